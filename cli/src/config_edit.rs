//! Adding and removing one `api_clients` entry in the text of `config.yaml`, leaving every
//! other byte as the user wrote it: comments, blank lines, order, quoting, line endings.
//!
//! A YAML library would parse the file and write it back without its comments, so the edit
//! is done on lines instead, for the one shape it needs: the top-level `api_clients:` key and
//! its block of entries, each `NAME:` at one indent with its lines below it more indented.
//! The result is then checked by parsing both texts: the new document must be the old one with
//! exactly that entry added or removed, or the edit is refused (and nothing is written).

use serde_yaml_ng::{Mapping, Value};

const KEY: &str = "api_clients";

/// One line of the file, with its line ending kept apart.
#[derive(Debug, Clone)]
struct Line<'a> {
    text: &'a str,
    end: &'a str,
}

impl Line<'_> {
    /// Spaces before the content; `None` for a blank line or a comment, which belong to no
    /// indentation level.
    fn indent(&self) -> Option<usize> {
        let content = self.text.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            None
        } else {
            Some(self.text.len() - content.len())
        }
    }
}

fn lines(text: &str) -> Vec<Line<'_>> {
    text.split_inclusive('\n')
        .map(|raw| {
            let text = raw.trim_end_matches('\n').trim_end_matches('\r');
            Line {
                text,
                end: &raw[text.len()..],
            }
        })
        .collect()
}

fn join(lines: &[Line<'_>]) -> String {
    lines.iter().flat_map(|l| [l.text, l.end]).collect()
}

/// Where `api_clients:` is and what follows it on its line.
struct Block {
    /// The index of the `api_clients:` line.
    key: usize,
    /// The text after `api_clients:`, before any comment, trimmed: empty, `{}`, `~`, `null`…
    inline: String,
    /// One past the last line of the block's content (trailing comments and blank lines that
    /// come before the next top-level key are left out).
    end: usize,
    /// The indent of its entries, if it has any.
    entry_indent: Option<usize>,
}

/// The value part of a top-level `api_clients:` line, if `text` is one.
fn key_line(text: &str) -> Option<&str> {
    let rest = text.strip_prefix(KEY)?;
    let rest = rest.trim_start_matches(' ');
    rest.strip_prefix(':')
        .filter(|v| v.is_empty() || v.starts_with([' ', '\t']))
}

/// `value # comment` → `value`; a `#` inside quotes is not looked for (values here are short).
fn strip_comment(value: &str) -> &str {
    match value.find(" #") {
        Some(at) => value[..at].trim(),
        None if value.trim_start().starts_with('#') => "",
        None => value.trim(),
    }
}

fn find_block(lines: &[Line<'_>]) -> Option<Block> {
    let key = lines.iter().position(|l| key_line(l.text).is_some())?;
    let inline = strip_comment(key_line(lines[key].text).unwrap_or_default()).to_owned();
    let mut end = key + 1;
    let mut entry_indent = None;
    for (i, line) in lines.iter().enumerate().skip(key + 1) {
        match line.indent() {
            None => {}
            Some(0) => break,
            Some(n) => {
                entry_indent.get_or_insert(n);
                end = i + 1;
            }
        }
    }
    Some(Block {
        key,
        inline,
        end,
        entry_indent,
    })
}

/// The name an entry line starts, plain or quoted: `scout:`, `"scout":`, `'scout':`.
fn entry_name(content: &str) -> Option<String> {
    let (name, rest) = match content.chars().next()? {
        q @ ('"' | '\'') => {
            let close = content[1..].find(q)? + 1;
            (content[1..close].to_owned(), &content[close + 1..])
        }
        _ => {
            let colon = content.find(':')?;
            (content[..colon].trim_end().to_owned(), &content[colon..])
        }
    };
    let rest = rest.trim_start();
    rest.starts_with(':').then_some(name)
}

/// The lines of a new entry, ending in `eol`.
fn entry_lines(name: &str, targets: &[String], indent: usize, eol: &str) -> String {
    // JSON strings are YAML double-quoted scalars: `*` or `true` stay text.
    let quote = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let list: Vec<String> = targets.iter().map(|t| quote(t)).collect();
    format!(
        "{pad}{name}:{eol}{pad}{pad}can_message: [{list}]{eol}",
        pad = " ".repeat(indent),
        name = quote(name),
        list = list.join(", "),
    )
}

/// The file's line ending: CRLF if its first line has one.
fn eol_of(text: &str) -> &'static str {
    match text.find('\n') {
        Some(at) if text[..at].ends_with('\r') => "\r\n",
        _ => "\n",
    }
}

/// Adds `api_clients.NAME.can_message: TARGETS` to the text of `config.yaml`.
pub fn add_client(text: &str, name: &str, targets: &[String]) -> Result<String, String> {
    let eol = eol_of(text);
    let all = lines(text);
    let edited = match find_block(&all) {
        None => {
            let mut out = text.to_owned();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push_str(eol);
            }
            out.push_str(&format!("{KEY}:{eol}"));
            out.push_str(&entry_lines(name, targets, 2, eol));
            out
        }
        Some(block) => {
            if !matches!(block.inline.as_str(), "" | "{}" | "~" | "null") {
                return Err(format!(
                    "{KEY} is written on one line ({}); write one client per line to let leo edit it",
                    block.inline
                ));
            }
            let indent = block.entry_indent.unwrap_or(2);
            let mut head = join(&all[..block.end]);
            if !block.inline.is_empty() {
                // `api_clients: {}  # note` becomes `api_clients:  # note`.
                let line = all[block.key].text;
                let at = line.find(&block.inline).unwrap_or(line.len());
                let kept = format!("{}{}", &line[..at], &line[at + block.inline.len()..]);
                head = format!(
                    "{}{}{}{}",
                    join(&all[..block.key]),
                    kept.trim_end(),
                    all[block.key].end,
                    join(&all[block.key + 1..block.end])
                );
            }
            if !head.is_empty() && !head.ends_with('\n') {
                head.push_str(eol);
            }
            head.push_str(&entry_lines(name, targets, indent, eol));
            head.push_str(&join(&all[block.end..]));
            head
        }
    };
    verify(text, &edited, name, Some(targets))?;
    Ok(edited)
}

/// Removes `api_clients.NAME`; `None` when there is no such entry.
pub fn remove_client(text: &str, name: &str) -> Result<Option<String>, String> {
    let all = lines(text);
    let Some(block) = find_block(&all) else {
        return Ok(None);
    };
    let Some(indent) = block.entry_indent else {
        return Ok(None);
    };
    let start = (block.key + 1..block.end).find(|&i| {
        all[i].indent() == Some(indent)
            && entry_name(all[i].text.trim_start()).is_some_and(|n| n == name)
    });
    let Some(start) = start else {
        return Ok(None);
    };
    // The entry is its line and every following line indented deeper (blank lines and
    // comments inside it too), up to the next entry or the end of the block.
    let mut stop = start + 1;
    for (i, line) in all.iter().enumerate().take(block.end).skip(start + 1) {
        match line.indent() {
            Some(n) if n <= indent => break,
            Some(_) => stop = i + 1,
            None => {}
        }
    }
    let others = (block.key + 1..block.end)
        .filter(|&i| !(start..stop).contains(&i))
        .any(|i| all[i].indent().is_some());
    let mut out = join(&all[..start]);
    if !others {
        // The last entry: `api_clients:` with nothing under it would be null, which the
        // config refuses, so it becomes an empty mapping.
        let line = all[block.key].text;
        let value_at = line.find(':').map_or(line.len(), |c| c + 1);
        out = format!(
            "{}{}: {{}}{}{}{}",
            join(&all[..block.key]),
            &line[..value_at - 1],
            &line[value_at..],
            all[block.key].end,
            join(&all[block.key + 1..start])
        );
    }
    out.push_str(&join(&all[stop..]));
    verify(text, &out, name, None)?;
    Ok(Some(out))
}

/// Checks that `new` is `old` with `api_clients.NAME` set to `targets` (or removed), and that
/// the broker's own loader accepts it.
fn verify(old: &str, new: &str, name: &str, targets: Option<&[String]>) -> Result<(), String> {
    let refuse = |why: String| {
        format!("cannot edit config.yaml without changing more than api_clients.{name} ({why})")
    };
    leo_broker::config::Config::parse(new).map_err(refuse)?;
    let doc = |text: &str| -> Result<Mapping, String> {
        if text.trim().is_empty() {
            return Ok(Mapping::new());
        }
        serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
    };
    let mut want = doc(old).map_err(refuse)?;
    let clients = want
        .entry(Value::String(KEY.into()))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if clients.is_null() {
        *clients = Value::Mapping(Mapping::new());
    }
    let clients = clients
        .as_mapping_mut()
        .ok_or_else(|| refuse(format!("{KEY} is not a mapping")))?;
    match targets {
        Some(targets) => {
            let mut entry = Mapping::new();
            entry.insert(
                Value::String("can_message".into()),
                Value::Sequence(targets.iter().map(|t| Value::String(t.clone())).collect()),
            );
            clients.insert(Value::String(name.into()), Value::Mapping(entry));
        }
        None => {
            clients.remove(Value::String(name.into()));
        }
    }
    if doc(new).map_err(refuse)? == want {
        Ok(())
    } else {
        Err(refuse("the edited file reads differently".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn adding_keeps_everything_else_byte_for_byte() {
        let entry = "  \"scout\":\n    can_message: [\"rocket\", \"ci-*\"]\n";
        let cases = [
            ("".to_owned(), format!("api_clients:\n{entry}")),
            (
                "# only a comment".to_owned(),
                format!("# only a comment\napi_clients:\n{entry}"),
            ),
            (
                "web:\n  port: 8371   # mine\n".to_owned(),
                format!("web:\n  port: 8371   # mine\napi_clients:\n{entry}"),
            ),
            (
                "api_clients:\n    old:   # the first\n        can_message: [a]\n\n# next\nweb: {port: 1}\n"
                    .to_owned(),
                "api_clients:\n    old:   # the first\n        can_message: [a]\n    \"scout\":\n        can_message: [\"rocket\", \"ci-*\"]\n\n# next\nweb: {port: 1}\n"
                    .to_owned(),
            ),
            (
                "api_clients: {}   # none yet\nweb:\n  port: 2\n".to_owned(),
                format!("api_clients:    # none yet\n{entry}web:\n  port: 2\n"),
            ),
            (
                "api_clients:\nweb:\n  port: 2\n".to_owned(),
                format!("api_clients:\n{entry}web:\n  port: 2\n"),
            ),
        ];
        for (old, want) in cases {
            let new = add_client(&old, "scout", &targets(&["rocket", "ci-*"]))
                .unwrap_or_else(|e| panic!("{old:?}: {e}"));
            assert_eq!(new, want, "{old:?}");
        }
        let crlf = add_client("web:\r\n  port: 3\r\n", "s", &targets(&["x"])).unwrap_or_default();
        assert_eq!(
            crlf,
            "web:\r\n  port: 3\r\napi_clients:\r\n  \"s\":\r\n    can_message: [\"x\"]\r\n"
        );
    }

    #[test]
    fn removing_takes_only_the_entry() {
        let old = "# top\napi_clients:\n  a:\n    can_message: [x]   # keep a\n  # about b\n  b:\n    can_message:\n      - y\n\n  c: {can_message: [z]}\nweb:\n  port: 4\n";
        let new = remove_client(old, "b")
            .unwrap_or_default()
            .unwrap_or_default();
        assert_eq!(
            new,
            "# top\napi_clients:\n  a:\n    can_message: [x]   # keep a\n  # about b\n\n  c: {can_message: [z]}\nweb:\n  port: 4\n"
        );
        let last =
            "api_clients:   # who may message\n  a:\n    can_message: [x]\nweb:\n  port: 4\n";
        assert_eq!(
            remove_client(last, "a")
                .unwrap_or_default()
                .unwrap_or_default(),
            "api_clients: {}   # who may message\nweb:\n  port: 4\n"
        );
        assert_eq!(remove_client(old, "nobody"), Ok(None));
        assert_eq!(remove_client("web: {}\n", "a"), Ok(None));
    }

    #[test]
    fn what_cannot_be_edited_safely_is_refused() {
        let flow = "api_clients: {a: {can_message: [x]}}\n";
        let e = add_client(flow, "b", &targets(&["y"]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("one client per line"), "{e}");
        // A quoted key the line search does not see: appending would duplicate it.
        let quoted = "\"api_clients\":\n  a:\n    can_message: [x]\n";
        let e = add_client(quoted, "b", &targets(&["y"]))
            .err()
            .unwrap_or_default();
        assert!(e.starts_with("cannot edit config.yaml"), "{e}");
    }
}
