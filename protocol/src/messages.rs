//! The bodies of `POST /web/agent/{target}/message`: a message from an API client or the
//! operator to an agent's mailbox, and what the sender is told.
//!
//! The text an agent reads (`ipc::Message`) is stamped by the broker; this is what the sender
//! posts before that.

use serde::{Deserialize, Serialize};

/// `POST /web/agent/{target}/message`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    pub text: String,
    pub from: String,
}

/// What the sender is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queued {
    pub agent: String,
    pub unread: usize,
    /// Messages dropped from this agent's mailbox since the broker started.
    pub dropped: u64,
}
