//! Calls that were sent to the broker and have not ended yet.
//!
//! Each entry is the one place a call's outcome can be delivered. The broker ends every call
//! with exactly one `result` frame; if the connection drops first, `fail_all` ends every entry
//! with `no_client`, so a waiting `tools/call` can never hang on a broker that went away.

use std::collections::HashMap;

use leo_protocol::content::AppError;
use leo_protocol::ipc::Outcome;
use tokio::sync::oneshot;

/// The in-flight calls of this session, by the sidecar's own call id.
#[derive(Debug, Default)]
pub struct Pending {
    calls: HashMap<u64, oneshot::Sender<Outcome>>,
}

impl Pending {
    /// Registers call `id`; its outcome arrives on the returned receiver.
    pub fn insert(&mut self, id: u64) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.calls.insert(id, tx);
        rx
    }

    /// Delivers `outcome` to call `id`. False when no such call waits (already cancelled).
    pub fn settle(&mut self, id: u64, outcome: Outcome) -> bool {
        match self.calls.remove(&id) {
            Some(tx) => {
                // The waiter may have gone (harness cancelled); nothing to do then.
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Forgets call `id` without an outcome (the harness cancelled it).
    pub fn forget(&mut self, id: u64) {
        self.calls.remove(&id);
    }

    /// Ends every call with `code: message`.
    pub fn fail_all(&mut self, code: &str, message: &str) -> usize {
        let n = self.calls.len();
        for (_, tx) in self.calls.drain() {
            let _ = tx.send(failure(code, message));
        }
        n
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// An `Outcome::Error`.
pub fn failure(code: &str, message: &str) -> Outcome {
    Outcome::Error {
        error: AppError {
            code: code.to_owned(),
            message: message.to_owned(),
        },
    }
}
