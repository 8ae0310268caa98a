//! The one sanitizer for text that reaches an agent from outside: messages from API clients
//! (`leo_messages` and the channel push alike), app error messages, tool descriptions, labels
//! and the words inside their schemas, progress messages, and an app's questions for the user
//! (the message and the words of the form: titles, descriptions, choice labels).
//!
//! A harness puts these strings into the model's context and often onto a terminal. A control
//! character there can move the cursor, erase what was shown (backspace, `ESC [`, the one-byte
//! CSI U+009B), end a string early (NUL), or start a fake line. So every C0 control
//! (U+0000–U+001F), DEL (U+007F) and every C1 control (U+0080–U+009F) is replaced, with two
//! exceptions where the text may have lines: a line break becomes `\n` and a tab stays a tab.
//! Replaced characters become U+FFFD, so the reader sees that something was there.
//!
//! The broker applies it where such a string enters an agent's view and `leo-mcp` applies it
//! again where it hands one to the harness; it is idempotent, so applying it twice changes
//! nothing.

use std::borrow::Cow;

/// What a string may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Descriptions and error messages: line breaks become `\n`, tabs stay.
    Keep,
    /// Messages, labels and other one-line text: line breaks and tabs become a space.
    Join,
}

/// The replacement of a control character.
pub const REPLACEMENT: char = '\u{FFFD}';

/// `text` with every control character replaced (see the module docs); borrowed when there is
/// nothing to replace.
pub fn sanitize(text: &str, lines: Lines) -> Cow<'_, str> {
    if is_clean(text, lines) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            // `\r\n` is one line break.
            continue;
        }
        out.push(match (c, lines) {
            (c, Lines::Keep) if is_line_break(c) => '\n',
            ('\t', Lines::Keep) => '\t',
            (c, Lines::Join) if is_line_break(c) || c == '\t' => ' ',
            (c, _) if is_control(c) => REPLACEMENT,
            (c, _) => c,
        });
    }
    Cow::Owned(out)
}

/// Sanitizes, in place, the words a model or a user reads anywhere inside a schema (a tool's
/// input or output schema, a question's form): every `description` and `title` string (line
/// breaks kept) and every string of an `enumNames` list (the labels a form shows for its
/// choices, one line each). Other strings (`enum`, `const`, `default`, property names) are
/// values the arguments or the answer must match, so they are left alone: a question's form
/// is refused when one of them has a control character (`input::check_form`, with `is_clean`).
pub fn sanitize_schema(schema: &mut serde_json::Value) {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value) {
                    ("description" | "title", Value::String(s)) => clean_in_place(s, Lines::Keep),
                    ("enumNames", Value::Array(labels)) => {
                        for label in labels {
                            match label {
                                Value::String(s) => clean_in_place(s, Lines::Join),
                                other => sanitize_schema(other),
                            }
                        }
                    }
                    (_, other) => sanitize_schema(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sanitize_schema),
        _ => {}
    }
}

/// True when `sanitize` would leave `text` as it is: for a value that must reach the harness
/// unchanged, so that is refused rather than rewritten.
pub fn is_clean(text: &str, lines: Lines) -> bool {
    !text.chars().any(|c| changes(c, lines))
}

fn clean_in_place(text: &mut String, lines: Lines) {
    if let Cow::Owned(clean) = sanitize(text, lines) {
        *text = clean;
    }
}

/// True when `sanitize` would change `c`.
fn changes(c: char, lines: Lines) -> bool {
    match lines {
        Lines::Keep => c != '\n' && c != '\t' && (is_control(c) || is_line_break(c)),
        Lines::Join => is_control(c) || is_line_break(c),
    }
}

/// C0, DEL and C1.
fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Everything Unicode treats as ending a line: LF, VT, FF, CR, NEL, LS, PS.
fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\u{b}' | '\u{c}' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_replaced_and_lines_kept_or_joined() {
        for (text, keep, join) in [
            (
                "plain text, é ü 中",
                "plain text, é ü 中",
                "plain text, é ü 中",
            ),
            ("a\nb\tc", "a\nb\tc", "a b c"),
            ("a\r\nb\rc", "a\nb\nc", "a b c"),
            (
                "a\u{2028}b\u{85}c\u{b}d\u{c}e",
                "a\nb\nc\nd\ne",
                "a b c d e",
            ),
            (
                "\u{1b}[31mred\u{1b}[0m",
                "\u{fffd}[31mred\u{fffd}[0m",
                "\u{fffd}[31mred\u{fffd}[0m",
            ),
            (
                "ab\u{8}\u{8}xy",
                "ab\u{fffd}\u{fffd}xy",
                "ab\u{fffd}\u{fffd}xy",
            ),
            ("nul\u{0}end", "nul\u{fffd}end", "nul\u{fffd}end"),
            ("csi\u{9b}2J", "csi\u{fffd}2J", "csi\u{fffd}2J"),
            ("del\u{7f}", "del\u{fffd}", "del\u{fffd}"),
            ("bell\u{7}", "bell\u{fffd}", "bell\u{fffd}"),
            (
                "\u{80}\u{9f}\u{a0}",
                "\u{fffd}\u{fffd}\u{a0}",
                "\u{fffd}\u{fffd}\u{a0}",
            ),
        ] {
            assert_eq!(sanitize(text, Lines::Keep), keep, "{text:?}");
            assert_eq!(sanitize(text, Lines::Join), join, "{text:?}");
        }
    }

    #[test]
    fn schemas_keep_their_values_and_lose_controls_in_their_words() {
        let mut schema = serde_json::json!({
            "type": "object",
            "description": "top\u{1b}[2J",
            "properties": {
                "a\u{7}": {"type": "string", "title": "T\u{8}", "description": "one\r\ntwo",
                          "enum": ["x\u{7}"], "default": "x\u{7}"},
                "b": {"anyOf": [{"description": "\u{9b}1m"}]},
                "c": {"type": "string", "enum": ["x", "y"], "enumNames": ["X\u{1b}]0;t\u{7}", "Y\nY"]}
            }
        });
        sanitize_schema(&mut schema);
        assert_eq!(
            schema,
            serde_json::json!({
                "type": "object",
                "description": "top\u{fffd}[2J",
                "properties": {
                    "a\u{7}": {"type": "string", "title": "T\u{fffd}", "description": "one\ntwo",
                              "enum": ["x\u{7}"], "default": "x\u{7}"},
                    "b": {"anyOf": [{"description": "\u{fffd}1m"}]},
                    "c": {"type": "string", "enum": ["x", "y"],
                          "enumNames": ["X\u{fffd}]0;t\u{fffd}", "Y Y"]}
                }
            })
        );
    }

    #[test]
    fn clean_text_is_borrowed_and_a_second_pass_changes_nothing() {
        assert!(matches!(sanitize("a\nb\tc", Lines::Keep), Cow::Borrowed(_)));
        assert!(matches!(sanitize("a b", Lines::Join), Cow::Borrowed(_)));
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let text = format!("x{c}\r\ny{c}");
            for lines in [Lines::Keep, Lines::Join] {
                let once = sanitize(&text, lines).into_owned();
                assert_eq!(sanitize(&once, lines), once, "{c:?}");
                assert!(
                    !once
                        .chars()
                        .any(|c| is_control(c) && !matches!(c, '\n' | '\t')),
                    "{c:?}"
                );
            }
        }
    }
}
