//! What a handler answers: MCP content for the agent, or the app's own error.
//!
//! Content is serialized once, when the `Reply` is made, and posted as it is: the result body
//! is written as three chunks (`{"client_id":…,"ok":true,"content":`, the content, `}`), so a
//! 1 MiB image is never copied into a second buffer or encoded twice. `Reply::raw_content` takes
//! content serialized ahead of time, for apps that answer the same large payload many times.

use bytes::Bytes;
use leo_protocol::content::AppError;
use leo_protocol::limits::MAX_ERROR_MESSAGE;
use serde::Serialize;
use serde_json::{Value, json};

/// MCP content serialized ahead of time (a JSON array of content blocks), for
/// `Reply::raw_content`. Cloning it shares the bytes rather than copying them, so an app that
/// answers the same large payload many times makes it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawContent(pub(crate) Bytes);

impl RawContent {
    /// The JSON text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for RawContent {
    fn from(json: Vec<u8>) -> RawContent {
        RawContent(Bytes::from(json))
    }
}

impl From<String> for RawContent {
    fn from(json: String) -> RawContent {
        RawContent(Bytes::from(json))
    }
}

impl From<&'static [u8]> for RawContent {
    fn from(json: &'static [u8]) -> RawContent {
        RawContent(Bytes::from_static(json))
    }
}

impl From<&'static str> for RawContent {
    fn from(json: &'static str) -> RawContent {
        RawContent(Bytes::from_static(json.as_bytes()))
    }
}

/// A handler's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply(pub(crate) Outcome);

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// A JSON array of content blocks, serialized, and the structured content (a JSON object,
    /// serialized) when there is one.
    Content(Bytes, Option<Bytes>),
    /// `{ok: false, error}`.
    Error(AppError),
}

impl Reply {
    /// One text block.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::content([content::text(text)])
    }

    /// One text block holding `value` as JSON (MCP has no JSON block; agents read text).
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Reply {
        match serde_json::to_string(value) {
            Ok(text) => Reply::text(text),
            Err(e) => Reply::error("internal", format!("cannot encode the result: {e}")),
        }
    }

    /// One image block from raw image bytes (base64-encoded here).
    pub fn image(bytes: &[u8], mime_type: &str) -> Reply {
        Reply::content([content::image(bytes, mime_type)])
    }

    /// Any MCP content blocks (see `content` for builders). The broker checks their shape.
    pub fn content(blocks: impl IntoIterator<Item = Value>) -> Reply {
        let blocks: Vec<Value> = blocks.into_iter().collect();
        match serde_json::to_vec(&blocks) {
            Ok(bytes) => Reply(Outcome::Content(Bytes::from(bytes), None)),
            Err(e) => Reply::error("internal", format!("cannot encode the result: {e}")),
        }
    }

    /// Content serialized ahead of time: `json` must be a JSON array of MCP content blocks. It is
    /// posted byte for byte; the broker checks it and, if it is refused, the call fails with
    /// the broker's `invalid_result` or `result_too_large` message instead of hanging.
    pub fn raw_content(json: impl Into<RawContent>) -> Reply {
        Reply(Outcome::Content(json.into().0, None))
    }

    /// Structured content: `value` must serialize to a JSON object; a tool registered with an
    /// `output_schema` must answer this way, and the broker checks `value` against the schema.
    /// The agent gets it as `structuredContent`, and a text block of the same JSON for clients
    /// that read only content. `Reply::structured(&v).with_content(blocks)` sends blocks too.
    pub fn structured<T: Serialize + ?Sized>(value: &T) -> Reply {
        match serde_json::to_value(value) {
            Ok(Value::Object(object)) => match serde_json::to_vec(&object) {
                Ok(bytes) => Reply(Outcome::Content(
                    Bytes::from_static(b"[]"),
                    Some(Bytes::from(bytes)),
                )),
                Err(e) => Reply::error("internal", format!("cannot encode the result: {e}")),
            },
            Ok(_) => Reply::error(
                "internal",
                "structured content must be a JSON object".to_owned(),
            ),
            Err(e) => Reply::error("internal", format!("cannot encode the result: {e}")),
        }
    }

    /// This reply's structured content with these content blocks next to it (the agent then
    /// gets the blocks instead of a text copy of the JSON). An error reply stays as it is.
    pub fn with_content(self, blocks: impl IntoIterator<Item = Value>) -> Reply {
        let Reply(Outcome::Content(_, structured)) = self else {
            return self;
        };
        match Reply::content(blocks).0 {
            Outcome::Content(content, _) => Reply(Outcome::Content(content, structured)),
            error => Reply(error),
        }
    }

    /// The app's own error; the agent sees `"<code>: <message>"`. `code` should be 1 to 64 of
    /// `[A-Za-z0-9_.-]`; the message is cut to 4,096 characters.
    pub fn error(code: impl Into<String>, message: impl Into<String>) -> Reply {
        let mut message: String = message.into();
        if let Some((cut, _)) = message.char_indices().nth(MAX_ERROR_MESSAGE) {
            message.truncate(cut);
        }
        Reply(Outcome::Error(AppError {
            code: code.into(),
            message,
        }))
    }

    /// True for an app error.
    pub fn is_error(&self) -> bool {
        matches!(self.0, Outcome::Error(_))
    }

    /// The serialized content, for a content reply.
    pub fn content_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Outcome::Content(bytes, _) => Some(bytes),
            Outcome::Error(_) => None,
        }
    }

    /// The serialized structured content, for a structured reply.
    pub fn structured_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Outcome::Content(_, structured) => structured.as_deref(),
            Outcome::Error(_) => None,
        }
    }

    /// The app error, for an error reply.
    pub fn app_error(&self) -> Option<&AppError> {
        match &self.0 {
            Outcome::Content(..) => None,
            Outcome::Error(e) => Some(e),
        }
    }
}

impl From<AppError> for Reply {
    fn from(error: AppError) -> Reply {
        Reply::error(error.code, error.message)
    }
}

/// A handler may return `Result<Reply, E>` for any error that is a reply itself (`Reply`,
/// `AppError`), so `?` and `Err(Reply::error(…))` both work.
impl<E: Into<Reply>> From<Result<Reply, E>> for Reply {
    fn from(result: Result<Reply, E>) -> Reply {
        result.unwrap_or_else(Into::into)
    }
}

/// Builders of single MCP content blocks, for `Reply::content`.
pub mod content {
    use super::*;

    /// `{"type": "text", "text": …}`.
    pub fn text(text: impl Into<String>) -> Value {
        json!({"type": "text", "text": text.into()})
    }

    /// `{"type": "image", "data": <base64>, "mimeType": …}` from raw bytes.
    pub fn image(bytes: &[u8], mime_type: &str) -> Value {
        json!({"type": "image", "data": base64(bytes), "mimeType": mime_type})
    }

    /// `{"type": "audio", "data": <base64>, "mimeType": …}` from raw bytes.
    pub fn audio(bytes: &[u8], mime_type: &str) -> Value {
        json!({"type": "audio", "data": base64(bytes), "mimeType": mime_type})
    }

    /// `{"type": "resource_link", "uri": …, "name": …}`.
    pub fn resource_link(uri: &str, name: &str) -> Value {
        json!({"type": "resource_link", "uri": uri, "name": name})
    }

    /// Standard base64 with padding, as MCP wants for `data`.
    pub fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::content::base64;
    use super::*;

    #[test]
    fn base64_matches_the_standard_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn replies_serialize_once_and_errors_are_bounded() {
        let text = Reply::text("hi \"there\"");
        let bytes = text.content_bytes().unwrap_or_default();
        let parsed: Value = serde_json::from_slice(bytes).unwrap_or_default();
        assert_eq!(parsed, json!([{"type": "text", "text": "hi \"there\""}]));
        let long = Reply::error("boom", "é".repeat(MAX_ERROR_MESSAGE + 10));
        let error = long.app_error().map(|e| e.message.chars().count());
        assert_eq!(error, Some(MAX_ERROR_MESSAGE));
        let from: Reply = Err::<Reply, _>(AppError {
            code: "nope".into(),
            message: "no".into(),
        })
        .into();
        assert!(from.is_error());
    }
}
