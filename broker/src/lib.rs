//! The Leo broker: the local daemon between apps that offer tools and the agents that call them.
//!
//! Start with `ARCHITECTURE.md` at the repository root. In short: `core` holds the state behind
//! one lock and drives the pure state machines (`registry`, `requests`, `ownership`); `events`
//! numbers and fans out what happened; `http` and `ipc` are the two doors, for apps and for
//! sidecars; `webhooks` calls the apps that cannot hold a stream; `server` binds them, runs a
//! core on them and runs the shutdown path. With PostgreSQL, `cluster` makes the instance one
//! of several serving a database: it leads (the one core) or forwards to the leader
//! (`cluster::front`); `daemon` chooses between the two.
//!
//! The `leo` binary is the `leo-cli` crate. This library exports only what it needs, kept small:
//! - [`daemon`] and [`server`]: prepare, bind and run the daemon (`leo broker`);
//! - [`home`] and [`config`]: the `LEO_HOME` layout and its files, and `config.yaml`, which
//!   `leo client add|rm`, `leo serve-tool --tools FILE` and the banner read or write;
//! - [`error`]: [`BrokerError`], what those fail with;
//! - the few rules the CLI must apply exactly as the daemon does: [`new_token`] and
//!   [`read_token_file`] (token files), [`record_local`] (the audit trail of local changes),
//!   and [`WEBHOOKS_PATH`];
//! - [`mcp`]: the mount point of `/mcp`, where the binary plugs in `leo-mcp`'s MCP server over
//!   Streamable HTTP, and the in-process pipe its sessions reach the broker through;
//! - [`cluster::tokens`]: with a PostgreSQL store, the tokens every instance shares, which
//!   `leo client|device|agent` change in the database (the CLI links no database client of
//!   its own).
//!
//! What is stored, and how (the live store, history and audit, the lease), is the `leo-store`
//! crate's.
//!
//! Everything else is `pub(crate)`: the CLI talks to a running broker through its public doors
//! (`run/leo.sock`, `run/sidecar.sock`), as any app or sidecar does.

mod accept;
pub(crate) mod agent_tokens;
pub mod cluster;
pub mod config;
pub(crate) mod core;
pub mod daemon;
pub mod error;
pub(crate) mod events;
#[cfg(test)]
mod fence_tests;
pub(crate) mod fetch;
pub(crate) mod history;
pub mod home;
pub(crate) mod http;
pub(crate) mod ipc;
pub(crate) mod issuer;
pub(crate) mod lints;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod oauth;
pub(crate) mod offers;
pub(crate) mod ownership;
pub(crate) mod refusal;
pub(crate) mod registry;
pub(crate) mod requests;
pub mod server;
pub(crate) mod state_file;
pub(crate) mod suggest;
pub(crate) mod telemetry;
pub(crate) mod tokens;
pub(crate) mod webhooks;

/// The storage (`leo-store`), under the name the broker's modules know it by.
pub(crate) use leo_store as store;

pub use error::{BrokerError, Result};

/// `/mcp`'s mount point (see `http::mcp`).
pub mod mcp {
    pub use crate::http::mcp::{Caller, MakeMount, Mount, Pipe, Responding};
    /// The body of `/mcp`'s requests and responses.
    pub use axum::body::Body;
    pub use axum::http::Request;
}
pub use history::{record_local, verify_local};
pub use http::rules::WEBHOOKS_PATH;
/// The audit trail's chain, as `leo audit verify` reports it.
pub use leo_store::history::chain as audit_chain;
pub use tokens::{generate as new_token, read_token_file};

/// Leo's own tool names, which `deny_tools` may always name (`ask_human` is the web console's).
pub(crate) const BUILTIN_TOOLS: &[&str] =
    &["leo_app_tools", "leo_app_call", "leo_messages", "ask_human"];
