//! The sidecar's integration tests: one binary; every test drives the real `leo-mcp` over stdio
//! (an rmcp client, raw JSON-RPC lines, or the TypeScript SDK) against the real `leo broker` on
//! a temporary `LEO_HOME`, with the app played by the test over HTTP/SSE.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod support;

mod calls;
mod deny;
mod durable;
mod fallback;
mod features;
mod harness_clis;
mod harness_gone;
mod http;
mod interop;
mod messages;
mod native;
mod offers;
mod protocol;
mod remote;
mod restart;
mod scope;
mod telemetry;
mod untrusted;
mod wire;
