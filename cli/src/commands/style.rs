//! How the text output looks: aligned columns, and a little emphasis on a terminal.
//!
//! Colour only when stdout is a terminal and `NO_COLOR` is unset or empty (no-color.org), so
//! piped output and logs stay plain text that `grep` and `awk` read.

use std::io::IsTerminal;

/// Whether to emphasise with ANSI escapes.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Decides from stdout and `NO_COLOR`.
    pub fn detect() -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: !no_color && std::io::stdout().is_terminal(),
        }
    }

    #[cfg(test)]
    pub fn plain() -> Style {
        Style { color: false }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Section titles.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// Column headers and "none".
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// Something waiting on someone.
    pub fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }
}

/// Rows of cells printed in aligned columns, headers first; the last column is not padded.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, each line indented by `indent` and ended by a newline.
    pub fn render(&self, indent: &str, style: &Style) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let line = |cells: Vec<String>| {
            let mut out = String::from(indent);
            for (i, cell) in cells.iter().enumerate().take(columns) {
                out.push_str(cell);
                if i + 1 < columns {
                    let pad = widths[i].saturating_sub(width(cell)) + 2;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            let trimmed = out.trim_end().len();
            out.truncate(trimmed);
            out.push('\n');
            out
        };
        let header = line(self.headers.iter().map(|h| (*h).to_owned()).collect());
        let mut out = style.dim(header.trim_end_matches('\n'));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row.clone()));
        }
        out
    }
}

/// The columns `text` takes on a terminal: its characters less the ANSI colour escapes.
fn width(text: &str) -> usize {
    let mut n = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // `ESC [ … m`
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            n += 1;
        }
    }
    n
}

/// `text` cut to `max` characters, with `…` where it was cut; only its first line.
pub fn clip(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    if first.chars().count() <= max && first.len() == text.trim_end().len() {
        return first.to_owned();
    }
    let mut out: String = first.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_and_leaves_the_last_unpadded() {
        let mut t = Table::new(&["NAME", "TIMEOUT", "WHAT"]);
        t.row(vec![
            "read_clipboard".into(),
            "1m00s".into(),
            "Read it".into(),
        ]);
        t.row(vec!["ask".into(), "never".into(), String::new()]);
        assert_eq!(
            t.render("  ", &Style::plain()),
            "  NAME            TIMEOUT  WHAT\n  read_clipboard  1m00s    Read it\n  ask             never\n"
        );
    }

    #[test]
    fn coloured_cells_align_by_what_shows() {
        let color = Style { color: true };
        let mut t = Table::new(&["STATE", "AGE"]);
        t.row(vec![color.yellow("parked"), "3s".into()]);
        t.row(vec!["claimed by c_1".into(), "2m10s".into()]);
        let text = t.render("", &Style::plain());
        assert_eq!(
            text,
            "STATE           AGE\n\x1b[33mparked\x1b[0m          3s\nclaimed by c_1  2m10s\n"
        );
    }

    #[test]
    fn clips_long_and_multiline_text() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("exactly10!", 10), "exactly10!");
        assert_eq!(clip("a bit too long", 10), "a bit too…");
        assert_eq!(clip("first\nsecond", 10), "first…");
    }

    #[test]
    fn plain_style_adds_no_escapes() {
        let s = Style::plain();
        assert_eq!(s.bold("x") + &s.dim("y") + &s.yellow("z"), "xyz");
        assert_eq!(Style { color: true }.bold("x"), "\x1b[1mx\x1b[0m");
    }
}
