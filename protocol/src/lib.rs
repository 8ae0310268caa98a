//! The wire contract shared by every Leo part.
//!
//! Only this crate defines wire types: the HTTP bodies and envelopes, the SSE event payloads, the
//! sidecar IPC frames, the error codes with their HTTP statuses, the limits, and the checks that
//! decide whether a tool definition or a result is acceptable, the identifiers (`names`: the one
//! name rule, `AgentName`, `ClientId`, `RequestId`) and how a call ended (`outcome`). The
//! broker, the sidecar and the probe all speak through these types, so a rule lives in exactly
//! one place.

pub mod backoff;
pub mod chain;
pub mod codes;
pub mod console;
pub mod content;
pub mod depth;
pub mod envelope;
pub mod events;
pub mod glob;
pub mod harness;
pub mod history;
pub mod home;
pub mod input;
pub mod ipc;
pub mod limits;
#[cfg(feature = "codec")]
pub mod lines;
pub mod messages;
pub mod names;
#[cfg(feature = "otel")]
pub mod otel;
pub mod outcome;
pub mod requests;
pub mod sanitize;
pub mod schema;
pub mod sse;
pub mod status;
pub mod time;
pub mod tool;
pub mod webhooks;

pub use codes::ErrorCode;
