//! `leo-mcp`: the per-agent stdio MCP server that shows Leo client tools to a harness.
//!
//! A harness (Claude Code, opencode, codex…) launches one `leo-mcp` per agent session. It speaks
//! MCP on stdin/stdout through rmcp and talks to the broker over `run/sidecar.sock` with the JSON
//! lines of `leo_protocol::ipc` (or, with `--url`, the same lines over the broker's TCP
//! listener: `dial`). The pieces:
//!
//! - `server` is the MCP face: `initialize`, `tools/list`, `tools/call`; `discover` keeps
//!   2026-07-28 clients on the `initialize` handshake.
//! - `mode` and `caps` decide how tools are shown: `native` (every client tool, with
//!   `list_changed`) or `fallback` (`leo_app_tools` and `leo_app_call`).
//! - `link` is the sidecar's handle on the broker (calls in flight, the tool view), and
//!   `reconnect` the task that keeps the IPC connection up with a capped backoff.
//! - `stdio` drives stdin/stdout on the IO reactor when they are pipes or sockets; `http`
//!   (feature `http`) serves the same server over Streamable HTTP at the broker's `/mcp`.
//! - `call`, `outcome` and `progress` are one tool call's life, from forwarding to the result;
//!   `elicit`, `logging` and `sampling` carry the app's questions, log messages and sampling
//!   requests to the harness meanwhile.
//! - `messages` is Leo's own tool `leo_messages`, listed in both modes: it returns and
//!   acknowledges the messages API clients sent to this agent (the pull path every harness has).
//!   `channel` is the push path for Claude Code channels (`notifications/claude/channel`).
//!
//! **Decision: channels are opt-in.** The experimental `claude/channel` capability is declared,
//! and arrivals pushed, only with `--channels` (or `LEO_MCP_CHANNELS=1`). Claude Code shows
//! channel events only from servers its user enabled as channels at launch anyway, a push puts
//! an API client's text into the model's context unasked, and every other harness keeps a
//! standard `initialize` answer. A push never acknowledges: `leo_messages` still returns the
//! message. See `channel` for the details.
//!
//! **Architecture Invariant:** stdout carries only MCP frames, written by rmcp; everything else
//! goes to stderr through `tracing`. `print_stdout` is denied here so that no `println!` can ever
//! corrupt the protocol.

#![deny(clippy::print_stdout)]

#[cfg(feature = "http")]
pub mod abandon;
pub mod call;
pub mod caps;
pub mod channel;
pub mod cli;
pub mod dial;
pub mod discover;
pub mod elicit;
pub mod error;
pub mod fallback;
pub mod forms;
pub mod frames;
pub mod home;
#[cfg(feature = "http")]
pub mod http;
pub mod link;
pub mod logging;
pub mod messages;
pub mod mode;
pub mod mrtr;
pub mod native;
pub mod offers;
pub mod offline;
pub mod outcome;
pub mod pending;
pub mod progress;
pub mod reconnect;
pub mod run;
pub mod sampling;
pub mod server;
pub mod session;
pub mod shape;
pub mod stdio;
#[cfg(feature = "http")]
pub mod streams;
pub mod task;
pub mod trace;
pub mod view;

pub use error::{Result, SidecarError};
pub use run::run;
