//! Turning outcomes into responses: the `{ok, data}` envelope, `Refusal` as a response, and the body
//! reader that enforces the size limit and names the field at fault.
//!
//! The body is read frame by frame and refused as soon as it passes its route's limit: memory
//! grows with the bytes that actually arrived, never with what `Content-Length` announces, and
//! never past the limit.

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use leo_protocol::ErrorCode;
use leo_protocol::envelope::{Failure, Success};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::refusal::Refusal;

/// How long a client is told to wait before it tries again after `503 store_unavailable`
/// (`Retry-After`, in seconds): the database is back or a new leader serves within seconds,
/// and a client that retries sooner only adds refusals.
const RETRY_AFTER_S: u32 = 1;

/// Every failed response: the documented `{ok: false, error, code}` with the status of its
/// code. It never carries internals: the message is written for the caller. A refusal that
/// ends by itself (`store_unavailable`: the database is away, or no instance leads yet) says
/// when to try again, wherever it is made.
impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        crate::metrics::global().rejected(crate::metrics::Door::Http, self.code);
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(Failure::new(self.code, self.message))).into_response();
        if self.code == ErrorCode::StoreUnavailable {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        }
        response
    }
}

/// `200 {ok: true, data}`.
pub fn ok<T: Serialize>(data: T) -> Response {
    Json(Success::new(data)).into_response()
}

/// The `413 body_too_large` for a body over `limit` bytes.
pub fn too_large(limit: usize) -> Refusal {
    Refusal::new(
        ErrorCode::BodyTooLarge,
        format!("the body is larger than {limit} bytes"),
    )
}

/// Reads the whole body, at most `limit` bytes, as it arrives.
pub async fn read_body(mut body: Body, limit: usize) -> Result<Vec<u8>, Refusal> {
    use http_body_util::BodyExt;
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Refusal::new(
                ErrorCode::InvalidParameter,
                format!("the body could not be read: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(too_large(limit));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// Reads the whole body (at most `limit` bytes) and parses it as `T`.
pub async fn json_body<T: DeserializeOwned>(body: Body, limit: usize) -> Result<T, Refusal> {
    let bytes = read_body(body, limit).await?;
    if bytes.is_empty() {
        return Err(Refusal::new(
            ErrorCode::InvalidParameter,
            "at $: a JSON body is required",
        ));
    }
    leo_protocol::envelope::parse_json(&bytes).map_err(Refusal::from)
}

/// Like `json_body`, but an empty body is `T::default()` (for routes whose body is optional).
pub async fn optional_json_body<T: DeserializeOwned + Default>(
    body: Body,
    limit: usize,
) -> Result<T, Refusal> {
    let bytes = read_body(body, limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    leo_protocol::envelope::parse_json(&bytes).map_err(Refusal::from)
}

/// Parses `a=1&b=0` flags; names the parameter at fault.
pub fn query_flags(query: Option<&str>, allowed: &[&str]) -> Result<Vec<String>, Refusal> {
    let mut on = Vec::new();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, "1"));
        if !allowed.contains(&key) {
            return Err(Refusal::new(
                ErrorCode::UnknownParameter,
                format!("unknown query parameter {key:?}"),
            ));
        }
        match value {
            "1" | "true" => on.push(key.to_owned()),
            "0" | "false" => {}
            other => {
                return Err(Refusal::new(
                    ErrorCode::InvalidParameter,
                    format!("query parameter {key:?} must be 1 or 0, not {other:?}"),
                ));
            }
        }
    }
    Ok(on)
}
