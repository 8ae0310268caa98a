//! The `{ok, data}` / `{ok, error, code}` envelope every HTTP response is wrapped in, and the
//! one function that turns a request body into a typed value or a documented error.
//!
//! Parsing lives here, not in each route, so every route reports a malformed body the same way:
//! `invalid_parameter` or `unknown_parameter` with the JSON path of the field at fault.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ErrorCode;

/// A successful response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Success<T> {
    pub ok: bool,
    pub data: T,
}

/// A failed response.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub ok: bool,
    pub error: String,
    pub code: ErrorCode,
}

impl<T> Success<T> {
    pub fn new(data: T) -> Self {
        Success { ok: true, data }
    }
}

impl Failure {
    pub fn new(code: ErrorCode, error: impl Into<String>) -> Self {
        Failure {
            ok: false,
            error: error.into(),
            code,
        }
    }
}

/// A body that could not be turned into the route's type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BodyError {
    pub code: ErrorCode,
    pub message: String,
}

/// Formats a serde_path_to_error path as a JSON path rooted at `$`.
pub fn json_path(path: &serde_path_to_error::Path) -> String {
    let mut out = String::from("$");
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => push_key(&mut out, key),
            serde_path_to_error::Segment::Enum { variant } => push_key(&mut out, variant),
            serde_path_to_error::Segment::Unknown => out.push_str(".?"),
        }
    }
    out
}

/// Appends `.key`, or `["key"]` when the key is not a plain identifier.
pub fn push_key(out: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if plain {
        out.push('.');
        out.push_str(key);
    } else {
        out.push('[');
        out.push_str(&serde_json::Value::String(key.to_owned()).to_string());
        out.push(']');
    }
}

/// Parses a JSON body into `T`, naming the field at fault on error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(path_error)?;
    de.end().map_err(|e| BodyError {
        code: ErrorCode::InvalidParameter,
        message: format!("invalid JSON: {e}"),
    })?;
    Ok(value)
}

/// Converts an already-parsed JSON value into `T`, with the same error rules as `parse_json`.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, BodyError> {
    serde_path_to_error::deserialize(value).map_err(path_error)
}

fn path_error<E: std::fmt::Display + SerdeErrorKind>(
    err: serde_path_to_error::Error<E>,
) -> BodyError {
    let path = json_path(err.path());
    let inner = err.inner();
    let text = inner.to_string();
    if inner.is_syntax() {
        return BodyError {
            code: ErrorCode::InvalidParameter,
            message: format!("invalid JSON: {text}"),
        };
    }
    let text = strip_position(&text);
    if let Some(rest) = text.strip_prefix("unknown field `") {
        // The path already ends at the unknown field.
        let _ = rest;
        let at = path.clone();
        return BodyError {
            code: ErrorCode::UnknownParameter,
            message: format!("at {at}: unknown field"),
        };
    }
    if let Some(rest) = text.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let mut at = path.clone();
        push_key(&mut at, field);
        return BodyError {
            code: ErrorCode::InvalidParameter,
            message: format!("at {at}: missing field"),
        };
    }
    BodyError {
        code: ErrorCode::InvalidParameter,
        message: format!("at {path}: {text}"),
    }
}

/// serde_json appends " at line L column C"; the JSON path already says where.
pub fn strip_position(text: &str) -> &str {
    match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Lets `path_error` tell a syntax error from a data error for both error sources.
pub trait SerdeErrorKind {
    fn is_syntax(&self) -> bool;
}

impl SerdeErrorKind for serde_json::Error {
    fn is_syntax(&self) -> bool {
        matches!(
            self.classify(),
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof
        )
    }
}
