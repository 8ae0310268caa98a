//! The agents' mail: every mailbox behind its own lock, and the channel that tells connected
//! sessions a message arrived.
//!
//! Mail never touches tools or requests, so it is not part of `Core`: delivering a message
//! never waits for the core lock, and no core operation waits for the mail lock. The policy on
//! who may read a mailbox (`deny_tools: [leo_messages]`) is the broker's, in `sessions`.

use std::sync::{Mutex, MutexGuard};

use leo_protocol::ipc::Message;
use tokio::sync::broadcast;
use tracing::info;

use crate::messages::{Mailboxes, Queued, stamp};
use crate::refusal::Refusal;

/// Mailboxes and their arrival notices.
pub struct PostOffice {
    boxes: Mutex<Mailboxes>,
    arrivals: broadcast::Sender<(String, Message)>,
}

impl PostOffice {
    /// Agents named in the config are known before they connect.
    pub fn new(known: impl IntoIterator<Item = String>) -> PostOffice {
        let (arrivals, _) = broadcast::channel(256);
        PostOffice {
            boxes: Mutex::new(Mailboxes::new(known)),
            arrivals,
        }
    }

    fn boxes(&self) -> MutexGuard<'_, Mailboxes> {
        // Each mailbox operation is one push or drain; a poisoned lock is still consistent.
        self.boxes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An agent connected: messages to it are accepted from now on.
    pub fn know(&self, agent: &str) {
        self.boxes().know(agent);
    }

    /// Stamps and queues a message for `agent`, and tells its connected sessions.
    pub fn deliver(&self, agent: &str, from: &str, text: &str) -> Result<Queued, Refusal> {
        let message = Message {
            text: stamp(from, text),
            from: from.to_owned(),
            at: leo_protocol::time::now(),
        };
        let queued = self.boxes().deliver(agent, message.clone())?;
        let _ = self.arrivals.send((agent.to_owned(), message));
        info!(agent, from, unread = queued.unread, "message queued");
        Ok(queued)
    }

    /// Returns and acknowledges `agent`'s unread messages, oldest first.
    pub fn take(&self, agent: &str) -> (Vec<Message>, u64) {
        self.boxes().take(agent)
    }

    /// Arrivals of messages, for sessions to push to harnesses that can show them.
    pub fn watch(&self) -> broadcast::Receiver<(String, Message)> {
        self.arrivals.subscribe()
    }
}
