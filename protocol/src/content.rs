//! Results as apps post them, and the shape check of MCP content blocks.
//!
//! Content is passed to the agent verbatim, so the broker only checks what a harness needs to
//! render a block (its type and the fields that type requires, base64 that decodes), that
//! `leo-mcp` can read it (at most `MAX_JSON_DEPTH` levels deep) and the size limit. Extra fields
//! such as `annotations` or `_meta` pass through untouched. An app error's message reaches the
//! agent, so it goes through the one sanitizer (`crate::sanitize`).
//!
//! Each block is kept as the JSON text the app sent (`RawValue`) and checked by borrowing from
//! it: a 256 KiB image is scanned, never copied into a `Value` tree and serialized again, and
//! the sidecar frame embeds the same text. The size limit counts the content as sent.

use crate::names::ClientId;
use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::limits::*;
use crate::sanitize::{Lines, sanitize};

/// `POST /api/v1/client-tools/requests/{id}/result`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultBody {
    pub client_id: ClientId,
    pub ok: bool,
    /// Claim the request in the same step, for an app that answers at once: an unclaimed
    /// request is claimed (with every check of the claim route) and settled together.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub claim: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Box<RawValue>>>,
    /// A JSON object the harness receives as `structuredContent`; required (and checked) when
    /// the tool has an `output_schema`. Without `content`, the agent also gets one text block
    /// holding the same JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AppError>,
}

/// An app's own failure: `{code, message}`; the agent sees `"<code>: <message>"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppError {
    pub code: String,
    pub message: String,
}

/// A result body that breaks a rule, with the JSON path at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultError {
    /// The body is inconsistent or a block is malformed (`invalid_result`).
    Invalid(String),
    /// The content is larger than 1 MiB (`result_too_large`).
    TooLarge(usize),
}

/// The outcome an app posted, once checked.
#[derive(Debug, Clone)]
pub enum Posted {
    /// The blocks, each as the app sent it.
    Content(Vec<Box<RawValue>>),
    /// Blocks (maybe none) and a structured JSON object.
    Structured(Vec<Box<RawValue>>, serde_json::Value),
    Error(AppError),
}

/// Bytes of `blocks` as one JSON array.
pub fn content_size(blocks: &[Box<RawValue>]) -> usize {
    blocks.iter().map(|b| b.get().len() + 1).sum::<usize>() + 1
}

impl ResultBody {
    /// Checks the body and returns what the agent is to receive.
    pub fn into_posted(self) -> Result<Posted, ResultError> {
        if let Some(structured) = self.structured_content {
            return match (self.ok, self.content, self.error) {
                (true, content, None) => {
                    let content = content.unwrap_or_default();
                    check_structured(&content, &structured)?;
                    Ok(Posted::Structured(content, structured))
                }
                (true, _, Some(_)) => Err(ResultError::Invalid(
                    "at $.error: not allowed when ok is true".into(),
                )),
                (false, ..) => Err(ResultError::Invalid(
                    "at $.structured_content: not allowed when ok is false".into(),
                )),
            };
        }
        match (self.ok, self.content, self.error) {
            (true, Some(content), None) => {
                let size = content_size(&content);
                if size > MAX_RESULT_BYTES {
                    return Err(ResultError::TooLarge(size));
                }
                check_content(&content).map_err(ResultError::Invalid)?;
                Ok(Posted::Content(content))
            }
            (true, None, _) => Err(ResultError::Invalid(
                "at $.content: required when ok is true".into(),
            )),
            (true, Some(_), Some(_)) => Err(ResultError::Invalid(
                "at $.error: not allowed when ok is true".into(),
            )),
            (false, _, None) => Err(ResultError::Invalid(
                "at $.error: required when ok is false".into(),
            )),
            (false, Some(_), Some(_)) => Err(ResultError::Invalid(
                "at $.content: not allowed when ok is false".into(),
            )),
            (false, None, Some(mut error)) => {
                check_app_error(&error).map_err(ResultError::Invalid)?;
                if let Cow::Owned(clean) = sanitize(&error.message, Lines::Keep) {
                    error.message = clean;
                }
                Ok(Posted::Error(error))
            }
        }
    }
}

/// Checks content and structured content together: one size limit over both, the blocks'
/// shapes, and a structured value that is an object no deeper than `MAX_JSON_DEPTH`.
fn check_structured(
    content: &[Box<RawValue>],
    structured: &serde_json::Value,
) -> Result<(), ResultError> {
    let text = serde_json::to_vec(structured).unwrap_or_default();
    let size = content_size(content) + text.len();
    if size > MAX_RESULT_BYTES {
        return Err(ResultError::TooLarge(size));
    }
    check_content(content).map_err(ResultError::Invalid)?;
    if !structured.is_object() {
        return Err(ResultError::Invalid(
            "at $.structured_content: expected a JSON object".into(),
        ));
    }
    crate::depth::check_depth(&text, "$.structured_content").map_err(ResultError::Invalid)
}

fn check_app_error(error: &AppError) -> Result<(), String> {
    if !crate::names::is_name_within(&error.code, MAX_ERROR_CODE) {
        return Err(format!(
            "at $.error.code: must be 1 to {MAX_ERROR_CODE} of [A-Za-z0-9_.-]"
        ));
    }
    if error.message.chars().count() > MAX_ERROR_MESSAGE {
        return Err(format!(
            "at $.error.message: at most {MAX_ERROR_MESSAGE} characters"
        ));
    }
    Ok(())
}

/// Checks that every block is an MCP content block of a known type with its required fields.
pub fn check_content(blocks: &[Box<RawValue>]) -> Result<(), String> {
    for (i, block) in blocks.iter().enumerate() {
        check_block(block, &format!("$.content[{i}]"))?;
    }
    Ok(())
}

/// A JSON object's members, borrowed from its text.
type Members<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;

fn members(raw: &RawValue) -> Option<Members<'_>> {
    serde_json::from_str(raw.get()).ok()
}

/// The string a member holds, borrowed unless it has escapes; `None` if it is not a string.
fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    // A JSON string token without a backslash is its own value between the quotes; finding
    // that out is a memchr, not a second parse of a large image.
    if text.len() >= 2 && text.starts_with('"') && !text.contains('\\') {
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    match serde_json::from_str::<&str>(text) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

fn check_block(block: &RawValue, at: &str) -> Result<(), String> {
    crate::depth::check_depth(block.get().as_bytes(), at)?;
    let Some(obj) = members(block) else {
        return Err(format!("at {at}: expected a content block object"));
    };
    let Some(kind) = obj.get("type") else {
        return Err(format!("at {at}.type: missing field"));
    };
    let Some(kind) = string(kind) else {
        return Err(format!("at {at}.type: expected a string"));
    };
    let need_str = |field: &str| -> Result<Cow<'_, str>, String> {
        match obj.get(field).map(|v| string(v)) {
            Some(Some(s)) => Ok(s),
            Some(None) => Err(format!("at {at}.{field}: expected a string")),
            None => Err(format!("at {at}.{field}: missing field")),
        }
    };
    match kind.as_ref() {
        "text" => need_str("text").map(drop),
        "image" | "audio" => {
            let data = need_str("data")?;
            need_str("mimeType")?;
            match base64_fault(&data) {
                Some(fault) => Err(format!("at {at}.data: expected base64: {fault}")),
                None => Ok(()),
            }
        }
        "resource_link" => {
            need_str("uri")?;
            need_str("name").map(drop)
        }
        "resource" => {
            let Some(res) = obj.get("resource") else {
                return Err(format!("at {at}.resource: missing field"));
            };
            let Some(res) = members(res) else {
                return Err(format!("at {at}.resource: expected an object"));
            };
            match res.get("uri").map(|v| string(v)) {
                Some(Some(_)) => {}
                Some(None) => return Err(format!("at {at}.resource.uri: expected a string")),
                None => return Err(format!("at {at}.resource.uri: missing field")),
            }
            let text = res.get("text").map(|v| string(v).is_some());
            let blob = res.get("blob").map(|v| string(v));
            if let Some(Some(blob)) = &blob
                && let Some(fault) = base64_fault(blob)
            {
                return Err(format!("at {at}.resource.blob: expected base64: {fault}"));
            }
            let blob = blob.map(|b| b.is_some());
            match (text, blob) {
                (Some(true), None) | (None, Some(true)) => Ok(()),
                (None, None) => Err(format!("at {at}.resource: needs text or blob")),
                (Some(_), Some(_)) => Err(format!("at {at}.resource: text and blob both given")),
                (Some(false), None) => Err(format!("at {at}.resource.text: expected a string")),
                (None, Some(false)) => Err(format!("at {at}.resource.blob: expected a string")),
            }
        }
        other => Err(format!("at {at}.type: unknown content type {other:?}")),
    }
}

/// Why `s` is not strict base64 (RFC 4648 section 4: the standard alphabet, padded to a
/// multiple of 4 with at most two `=`, and no stray bits after the last byte), or `None`.
fn base64_fault(s: &str) -> Option<&'static str> {
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Some("the length is not a multiple of 4 (pad with =)");
    }
    let pad = bytes
        .iter()
        .rev()
        .take(2)
        .take_while(|&&b| b == b'=')
        .count();
    let body = &bytes[..bytes.len() - pad];
    // Non-short-circuit tests over fixed chunks, so the compiler vectorizes the check of a
    // large image instead of branching on every byte.
    let alphabet = body
        .chunks(64)
        .all(|chunk| chunk.iter().fold(true, |ok, &b| ok & is_base64_byte(b)));
    if !alphabet {
        return Some("a character outside A-Z, a-z, 0-9, + and /, or = before the end");
    }
    // One `=` leaves 2 unused bits in the last character, two leave 4; they must be zero.
    let unused = match (pad, body.last()) {
        (1, Some(&last)) => sextet(last) & 0b11,
        (2, Some(&last)) => sextet(last) & 0b1111,
        _ => 0,
    };
    if unused != 0 {
        return Some("the bits after the last byte are not zero");
    }
    None
}

/// The 6-bit value of a base64 character (of the alphabet).
fn sextet(b: u8) -> u8 {
    match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'+' => 62,
        _ => 63,
    }
}

fn is_base64_byte(b: u8) -> bool {
    (b.wrapping_sub(b'A') < 26)
        | (b.wrapping_sub(b'a') < 26)
        | (b.wrapping_sub(b'0') < 10)
        | (b == b'+')
        | (b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_alphabet() {
        for b in 0..=255u8 {
            let expected = b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
            assert_eq!(is_base64_byte(b), expected, "byte {b}");
        }
        let ok = |s: &str| base64_fault(s).is_none();
        let long = "QUJD".repeat(1000);
        assert!(ok(&long));
        assert!(ok(&format!("{long}QQ==")));
        assert!(ok(&format!("{long}QUI=")));
        assert!(ok(""));
        assert!(ok("iVBORw0KGgo="));
        for bad in [
            "A", "AB=", "ABC", "A===", "====", "AB=C", "=AAA", "QR==", "QUJ=", "QUJD-A==",
        ] {
            assert!(!ok(bad), "{bad:?}");
        }
        assert!(!ok(&format!("{long}==")));
        assert!(!ok(&format!("{long}===")));
        assert!(!ok(&format!("{long}-AAA")));
        assert!(!ok(&format!("{}é{}", "A".repeat(70), "B".repeat(72))));
    }

    #[test]
    fn strings_are_read_from_their_token() {
        let raw = |t: &str| RawValue::from_string(t.to_owned()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(string(&raw(r#""abc""#)).as_deref(), Some("abc"));
        assert_eq!(string(&raw(r#""""#)).as_deref(), Some(""));
        assert_eq!(string(&raw(r#""a\"b\n""#)).as_deref(), Some("a\"b\n"));
        assert_eq!(string(&raw(r#""\u00e9""#)).as_deref(), Some("é"));
        assert_eq!(string(&raw("12")), None);
        assert_eq!(string(&raw(r#"["a"]"#)), None);
    }
}
