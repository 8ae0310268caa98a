//! The JSON-RPC error body of a request to `/mcp` that is refused before any MCP method runs:
//! by the broker (no token, the wrong kind of token, a foreign Origin, a body too large) or by
//! the MCP transport (a body that is not JSON or not a JSON-RPC message, an unknown session).
//!
//! An MCP client reads JSON-RPC, not the `{ok, error, code}` envelope of the other routes, so
//! these refusals are a JSON-RPC error response with `id: null` (the request was not read):
//! `error.code` is JSON-RPC's `-32700` (parse error) for a body that is not JSON and `-32600`
//! (invalid request) for everything else, `error.message` the refusal as `<code>: <message>`,
//! and `error.data.code` Leo's error code, as in the envelope.

use serde::Serialize;

use crate::ErrorCode;

/// JSON-RPC's "invalid request".
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's "parse error": the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;

/// `{"jsonrpc":"2.0","id":null,"error":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorResponse {
    pub jsonrpc: &'static str,
    pub id: Option<u64>,
    pub error: ErrorObject,
}

/// The `error` member.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    pub data: ErrorData,
}

/// `error.data`: Leo's code, for clients that tell refusals apart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorData {
    pub code: &'static str,
}

impl ErrorResponse {
    /// The refusal `code` with `message`, for a request whose id was not read.
    pub fn refusal(code: ErrorCode, message: &str) -> ErrorResponse {
        ErrorResponse::new(INVALID_REQUEST, code, message)
    }

    /// A refusal with the JSON-RPC error code `rpc`.
    pub fn new(rpc: i64, code: ErrorCode, message: &str) -> ErrorResponse {
        ErrorResponse {
            jsonrpc: "2.0",
            id: None,
            error: ErrorObject {
                code: rpc,
                message: format!("{}: {message}", code.as_str()),
                data: ErrorData {
                    code: code.as_str(),
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_as_json_rpc() {
        let body = serde_json::to_value(ErrorResponse::refusal(
            ErrorCode::Forbidden,
            "an operator token cannot open /mcp",
        ))
        .unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {
                    "code": -32600,
                    "message": "forbidden: an operator token cannot open /mcp",
                    "data": {"code": "forbidden"}
                }
            })
        );
    }
}
