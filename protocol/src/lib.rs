//! What every Leo part shares: the wire contract, and the few rules that are not wire types
//! but must be written once.
//!
//! The wire: only this crate defines wire types. The HTTP bodies and envelopes (`tool`,
//! `content`, `requests`, `input`, `logging`, `sampling`, `messages`, `history`, `webhooks`, `console`, `status`,
//! `envelope`, and `jsonrpc`, the JSON-RPC error body of a refused `/mcp` request), the SSE event payloads (`events`), the sidecar IPC frames (`ipc`) and their line
//! codec (`lines`), the error codes with their HTTP statuses (`codes`), the limits (`limits`),
//! the checks that decide whether a tool definition, a form or a result is acceptable
//! (`schema`, `depth`, and the checks beside each body), the identifiers (`names`: the one name
//! rule, `AgentName`, `ClientId`, `RequestId`) and how a call ended (`outcome`).
//!
//! The shared rules, which put nothing on the wire but which two parts would otherwise each
//! spell out: the one sanitizer for text that reaches an agent (`sanitize`), the `$LEO_HOME`
//! layout (`home`), the harness table (`harness`), the glob of agent patterns (`glob`), the
//! reconnect backoff (`backoff`), the error chain printed in logs (`chain`), RFC 3339 time
//! (`time`), the SSE parser (`sse`), and the OpenTelemetry exporter and `traceparent` helpers
//! (`otel`), and the TLS client rule and PEM reading (`tls`). The broker, the sidecar, the SDK and the probe all use these, so a rule lives in
//! exactly one place.

pub mod approvals;
pub mod backoff;
pub mod chain;
pub mod choices;
pub mod codes;
pub mod console;
pub mod content;
pub mod depth;
pub mod envelope;
pub mod events;
pub mod glob;
pub mod harness;
pub mod health;
pub mod history;
pub mod home;
pub mod input;
pub mod ipc;
pub mod jsonrpc;
pub mod limits;
#[cfg(feature = "codec")]
pub mod lines;
pub mod link;
pub mod logging;
pub mod messages;
pub mod names;
pub mod oauth;
pub mod offers;
#[cfg(feature = "otel")]
pub mod otel;
pub mod outcome;
pub mod requests;
pub mod sampling;
pub mod sanitize;
pub mod schema;
pub mod sse;
pub mod status;
pub mod time;
#[cfg(feature = "tls")]
pub mod tls;
pub mod tool;
pub mod webhooks;

pub use codes::ErrorCode;
