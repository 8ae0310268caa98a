//! The Leo broker: the local daemon between apps that offer tools and the agents that call them.
//!
//! Start with `ARCHITECTURE.md` at the repository root. In short: `core` holds the state behind
//! one lock and drives the pure state machines (`registry`, `requests`, `ownership`); `events`
//! numbers and fans out what happened; `http` and `ipc` are the two doors, for apps and for
//! sidecars; `webhooks` calls the apps that cannot hold a stream; `server` binds them and runs
//! the shutdown path.

mod accept;
pub mod admin;
pub mod agent_tokens;
pub mod config;
pub mod config_edit;
pub mod core;
pub mod error;
pub mod events;
pub mod history;
pub mod home;
pub mod http;
pub mod ipc;
pub mod lints;
pub mod messages;
pub mod metrics;
pub mod ownership;
pub mod refusal;
pub mod registry;
pub mod requests;
pub mod server;
pub mod sqlite;
pub mod state_file;
pub mod store;
pub mod suggest;
pub mod telemetry;
pub mod tokens;
pub mod webhooks;

pub use error::{BrokerError, Result};

/// Leo's own tool names, which `deny_tools` may always name (`ask_human` is the web console's).
pub const BUILTIN_TOOLS: &[&str] = &["leo_app_tools", "leo_app_call", "leo_messages", "ask_human"];
