//! Results as apps post them, and the shape check of MCP content blocks.
//!
//! Content is passed to the agent verbatim, so the broker only checks what a harness needs to
//! render a block (its type and the fields that type requires) and the size limit. Extra fields
//! such as `annotations` or `_meta` pass through untouched.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::*;

/// `POST /api/v1/client-tools/requests/{id}/result`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultBody {
    pub client_id: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
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
#[derive(Debug, Clone, PartialEq)]
pub enum Posted {
    Content(Vec<Value>),
    Error(AppError),
}

impl ResultBody {
    /// Checks the body and returns what the agent is to receive.
    pub fn into_posted(self) -> Result<Posted, ResultError> {
        match (self.ok, self.content, self.error) {
            (true, Some(content), None) => {
                let size = serde_json::to_vec(&content)
                    .map(|v| v.len())
                    .unwrap_or(usize::MAX);
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
            (false, None, Some(error)) => {
                check_app_error(&error).map_err(ResultError::Invalid)?;
                Ok(Posted::Error(error))
            }
        }
    }
}

fn check_app_error(error: &AppError) -> Result<(), String> {
    let code_ok = !error.code.is_empty()
        && error.code.len() <= MAX_ERROR_CODE
        && error
            .code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if !code_ok {
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
pub fn check_content(blocks: &[Value]) -> Result<(), String> {
    for (i, block) in blocks.iter().enumerate() {
        check_block(block, &format!("$.content[{i}]"))?;
    }
    Ok(())
}

fn check_block(block: &Value, at: &str) -> Result<(), String> {
    let Some(obj) = block.as_object() else {
        return Err(format!("at {at}: expected a content block object"));
    };
    let Some(kind) = obj.get("type") else {
        return Err(format!("at {at}.type: missing field"));
    };
    let Some(kind) = kind.as_str() else {
        return Err(format!("at {at}.type: expected a string"));
    };
    let need_str = |field: &str| -> Result<(), String> {
        match obj.get(field) {
            Some(Value::String(_)) => Ok(()),
            Some(_) => Err(format!("at {at}.{field}: expected a string")),
            None => Err(format!("at {at}.{field}: missing field")),
        }
    };
    match kind {
        "text" => need_str("text"),
        "image" | "audio" => {
            need_str("data")?;
            need_str("mimeType")?;
            let data = obj.get("data").and_then(Value::as_str).unwrap_or_default();
            if !is_base64(data) {
                return Err(format!("at {at}.data: expected base64"));
            }
            Ok(())
        }
        "resource_link" => {
            need_str("uri")?;
            need_str("name")
        }
        "resource" => {
            let Some(res) = obj.get("resource") else {
                return Err(format!("at {at}.resource: missing field"));
            };
            let Some(res) = res.as_object() else {
                return Err(format!("at {at}.resource: expected an object"));
            };
            match res.get("uri") {
                Some(Value::String(_)) => {}
                Some(_) => return Err(format!("at {at}.resource.uri: expected a string")),
                None => return Err(format!("at {at}.resource.uri: missing field")),
            }
            match (res.get("text"), res.get("blob")) {
                (Some(Value::String(_)), None) | (None, Some(Value::String(_))) => Ok(()),
                (None, None) => Err(format!("at {at}.resource: needs text or blob")),
                (Some(_), Some(_)) => Err(format!("at {at}.resource: text and blob both given")),
                (Some(_), None) => Err(format!("at {at}.resource.text: expected a string")),
                (None, Some(_)) => Err(format!("at {at}.resource.blob: expected a string")),
            }
        }
        other => Err(format!("at {at}.type: unknown content type {other:?}")),
    }
}

fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}
