//! Log messages an app sends its caller while it works on a call.
//!
//! They reach the harness that made the call as MCP `notifications/message` on that call's
//! stream, so a client shows them beside the call they belong to. The harness picks how much
//! it wants with `logging/setLevel`; `leo-mcp` drops what is below that level (everything
//! passes until the harness sets one). A log message is advice: the broker drops it when the
//! agent's session is too busy, never holds the call for it.
//!
//! The levels are RFC 5424's, as MCP names them. `data` is any JSON the app likes (a string
//! is the usual); its strings reach a person's screen, so they go through the one sanitizer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::MAX_LABEL;
use crate::names::ClientId;
use crate::sanitize::{Lines, sanitize};

/// The most a log message's `data` may take, as JSON text.
pub const MAX_LOG_BYTES: usize = 16 * 1024;

/// How severe a log message is, least first (RFC 5424, as MCP names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// `POST /api/v1/client-tools/requests/{id}/log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogBody {
    pub client_id: ClientId,
    pub level: LogLevel,
    /// The part of the app that speaks (MCP's `logger`), a short label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    /// What is said: a string, or any JSON value.
    pub data: Value,
}

impl LogBody {
    /// Checks the logger's length and the size of `data`.
    pub fn check(&self) -> Result<(), String> {
        if let Some(logger) = &self.logger
            && logger.chars().count() > MAX_LABEL
        {
            return Err(format!("at $.logger: at most {MAX_LABEL} characters"));
        }
        if self.data.is_null() {
            return Err("at $.data: required".into());
        }
        let size = serde_json::to_vec(&self.data)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_LOG_BYTES {
            return Err(format!("at $.data: {size} bytes, at most {MAX_LOG_BYTES}"));
        }
        Ok(())
    }
}

/// `data` with every string in it (keys too) sanitized, line breaks kept; the broker applies it
/// where a log message enters and `leo-mcp` where it hands one to the harness.
pub fn sanitized_data(data: Value) -> Value {
    match data {
        Value::String(s) => Value::String(sanitize(&s, Lines::Keep).into_owned()),
        Value::Array(items) => Value::Array(items.into_iter().map(sanitized_data).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (sanitize(&k, Lines::Join).into_owned(), sanitized_data(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn levels_order_from_debug_to_emergency_and_read_as_mcp_names_them() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Alert < LogLevel::Emergency);
        let level: LogLevel = serde_json::from_value(json!("warning")).unwrap();
        assert_eq!(level, LogLevel::Warning);
        assert!(serde_json::from_value::<LogLevel>(json!("warn")).is_err());
    }

    #[test]
    fn a_log_body_is_checked_with_its_path() {
        let body = |logger: Option<&str>, data: Value| LogBody {
            client_id: "c".into(),
            level: LogLevel::Info,
            logger: logger.map(str::to_owned),
            data,
        };
        assert_eq!(body(Some("db"), json!("copied 3 files")).check(), Ok(()));
        assert_eq!(
            body(None, Value::Null).check(),
            Err("at $.data: required".into())
        );
        let long = "x".repeat(MAX_LABEL + 1);
        assert!(
            body(Some(&long), json!(1))
                .check()
                .unwrap_err()
                .starts_with("at $.logger")
        );
        let big = json!("y".repeat(MAX_LOG_BYTES));
        assert!(
            body(None, big)
                .check()
                .unwrap_err()
                .starts_with("at $.data:")
        );
    }

    #[test]
    fn every_string_of_the_data_is_sanitized() {
        let data = json!({"step\u{1b}": ["a\u{7}", {"b": "line\r\nnext"}], "n": 3});
        assert_eq!(
            sanitized_data(data),
            json!({"step\u{fffd}": ["a\u{fffd}", {"b": "line\nnext"}], "n": 3})
        );
    }
}
