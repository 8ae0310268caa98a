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

use crate::messages::{MAILBOX, Mailboxes, Queued, stamp};
use crate::refusal::Refusal;
use crate::store::{Op, Store};

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

    /// Puts back the unread messages the store had, oldest first; their agents are known.
    pub fn restore(&self, mail: Vec<(String, Message)>) {
        let mut boxes = self.boxes();
        for (agent, message) in mail {
            boxes.know(&agent);
            // The store keeps at most a mailbox's worth, so nothing is dropped here.
            let _ = boxes.deliver(&agent, message);
        }
    }

    /// Stamps and queues a message for `agent`, records it in `store` (under this lock, so in
    /// order), and tells its connected sessions.
    pub fn deliver(
        &self,
        agent: &str,
        from: &str,
        text: &str,
        store: &Store,
    ) -> Result<Queued, Refusal> {
        let message = Message {
            text: stamp(from, text),
            from: from.to_owned(),
            at: leo_protocol::time::now(),
        };
        let queued = {
            let mut boxes = self.boxes();
            let queued = boxes.deliver(agent, message.clone())?;
            let mut ops = vec![Op::Mail {
                agent: agent.to_owned(),
                message: message.clone(),
            }];
            if queued.unread == MAILBOX {
                ops.push(Op::MailTrim {
                    agent: agent.to_owned(),
                    keep: MAILBOX,
                });
            }
            store.send(ops);
            queued
        };
        let _ = self.arrivals.send((agent.to_owned(), message));
        info!(agent, from, unread = queued.unread, "message queued");
        Ok(queued)
    }

    /// Returns and acknowledges `agent`'s unread messages, oldest first.
    pub fn take(&self, agent: &str, store: &Store) -> (Vec<Message>, u64) {
        let mut boxes = self.boxes();
        let taken = boxes.take(agent);
        if !taken.0.is_empty() {
            store.send(vec![Op::MailTaken {
                agent: agent.to_owned(),
            }]);
        }
        taken
    }

    /// Arrivals of messages, for sessions to push to harnesses that can show them.
    pub fn watch(&self) -> broadcast::Receiver<(String, Message)> {
        self.arrivals.subscribe()
    }
}
