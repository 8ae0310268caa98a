//! How deeply a JSON value nests, checked on its text.
//!
//! serde_json, which `leo-mcp` and `leo-app` read with, gives up at 128 levels of arrays and
//! objects, while the broker keeps results as the text the app sent (`RawValue`), whose reader
//! has no such limit. A result the broker accepted but the sidecar cannot read would reach no
//! one, so the broker refuses anything nested deeper than `MAX_JSON_DEPTH`: result content
//! blocks and call arguments alike. The frames and events that carry such a value wrap it a few
//! levels deeper; the limit leaves room for that.
//!
//! The check is one pass over the bytes that skips strings with `memchr` (a large image is one
//! string), never a parse into a tree. Only when it fails is the text walked a second time to
//! name the JSON path of the first value that is too deep.

use memchr::memchr2;

use crate::envelope::push_key;
use crate::limits::MAX_JSON_DEPTH;

/// Checks that the JSON text `json` (already known to be valid JSON) nests at most
/// `MAX_JSON_DEPTH` arrays and objects, counting the outermost as one. On failure, the message
/// names the path of the first value one level too deep, rooted at `at`.
pub fn check_depth(json: &[u8], at: &str) -> Result<(), String> {
    match too_deep(json, MAX_JSON_DEPTH) {
        None => Ok(()),
        Some(offset) => Err(format!(
            "at {}: nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects",
            path_to(json, offset, at)
        )),
    }
}

/// The offset of the first `[` or `{` that opens level `max + 1`, if any.
fn too_deep(json: &[u8], max: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i = string_end(json, i + 1);
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The offset just past the closing quote of the string whose contents start at `i`.
fn string_end(json: &[u8], mut i: usize) -> usize {
    loop {
        match memchr2(b'"', b'\\', json.get(i..).unwrap_or_default()) {
            // An escape: skip the backslash and the character it escapes.
            Some(k) if json[i + k] == b'\\' => i += k + 2,
            Some(k) => return i + k + 1,
            None => return json.len(),
        }
    }
}

/// Where the walk is inside one container.
enum Frame {
    /// In an object, at the member whose key token spans this range (quotes included).
    Object(Option<(usize, usize)>),
    /// In an array, at this element.
    Array(usize),
}

/// Longest key shown in a path, in characters.
const SHOWN_KEY: usize = 64;

/// The JSON path of the value that starts at `offset`.
fn path_to(json: &[u8], offset: usize, at: &str) -> String {
    let mut stack: Vec<Frame> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < offset {
        match json[i] {
            b'{' => {
                stack.push(Frame::Object(None));
                expect_key = true;
            }
            b'[' => stack.push(Frame::Array(0)),
            b']' | b'}' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array(n)) => *n += 1,
                Some(Frame::Object(_)) => expect_key = true,
                None => {}
            },
            b'"' => {
                let end = string_end(json, i + 1);
                if expect_key && let Some(Frame::Object(key)) = stack.last_mut() {
                    *key = Some((i, end));
                }
                expect_key = false;
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let mut out = at.to_owned();
    for frame in &stack {
        match frame {
            Frame::Array(n) => out.push_str(&format!("[{n}]")),
            Frame::Object(Some((start, end))) => {
                let key: String =
                    serde_json::from_slice(json.get(*start..*end).unwrap_or_default())
                        .unwrap_or_default();
                let mut shown: String = key.chars().take(SHOWN_KEY).collect();
                if shown.len() < key.len() {
                    shown.push('…');
                }
                push_key(&mut out, &shown);
            }
            Frame::Object(None) => out.push_str(".?"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize, leaf: &str) -> String {
        format!("{}{leaf}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn counts_arrays_and_objects_not_brackets_in_strings() {
        assert_eq!(too_deep(b"1", 0), None);
        assert_eq!(too_deep(b"{}", 0), Some(0));
        assert_eq!(too_deep(b"{}", 1), None);
        assert_eq!(too_deep(br#"{"a":[{}]}"#, 2), Some(6));
        assert_eq!(too_deep(br#"{"a":[{}]}"#, 3), None);
        // Brackets and escaped quotes inside strings are text.
        assert_eq!(too_deep(br#"["[[[\"[[", "{{{"]"#, 1), None);
        assert_eq!(too_deep(br#"["\\", [1]]"#, 1), Some(7));
        // Siblings do not add up.
        assert_eq!(too_deep(b"[[1],[2],[[3]]]", 3), None);
        assert_eq!(too_deep(b"[[1],[2],[[3]]]", 2), Some(10));
    }

    #[test]
    fn the_limit_holds_with_the_path_of_the_first_value_too_deep() {
        let ok = nested(MAX_JSON_DEPTH, "0");
        assert_eq!(check_depth(ok.as_bytes(), "$"), Ok(()));
        let deep = nested(MAX_JSON_DEPTH + 1, "0");
        let err = check_depth(deep.as_bytes(), "$.args").unwrap_err();
        let want = format!(
            "at $.args{}: nested deeper than",
            "[0]".repeat(MAX_JSON_DEPTH)
        );
        assert!(err.starts_with(&want), "{err}");

        // Through objects and arrays, past earlier siblings, keys quoted when needed.
        let inner = format!(
            r#"{{"type":"text","text":"x","annotations":{{"a b":[1,{{"k":"}}"}},{}]}}}}"#,
            nested(MAX_JSON_DEPTH, "0")
        );
        let err = check_depth(inner.as_bytes(), "$.content[2]").unwrap_err();
        let want = format!(
            "at $.content[2].annotations[\"a b\"][2]{}: nested",
            "[0]".repeat(MAX_JSON_DEPTH - 3)
        );
        assert!(err.starts_with(&want), "{err}");

        // A long key is shortened in the message.
        let long_key = "k".repeat(500);
        let text = format!(r#"{{"{long_key}":{}}}"#, nested(MAX_JSON_DEPTH, "0"));
        let err = check_depth(text.as_bytes(), "$").unwrap_err();
        assert!(
            err.starts_with(&format!("at $[\"{}…\"][0]", "k".repeat(64))),
            "{err}"
        );
    }

    #[test]
    fn a_large_string_is_skipped_not_walked() {
        let big = format!(r#"{{"data":"{}","x":[[1]]}}"#, "A\\\"".repeat(100_000));
        assert_eq!(too_deep(big.as_bytes(), 3), None);
        assert_eq!(too_deep(big.as_bytes(), 2), Some(big.len() - 5));
    }
}
