//! Requests that were sent to the broker and have not been answered yet.
//!
//! Each entry is the one place an answer can be delivered. The broker answers every `call` with
//! exactly one `result` frame and every `fetch_messages` with one `messages` frame. If the
//! connection drops first, calls keep waiting for the reconnect (the broker re-attaches them
//! by id, even across its restart) while fetches fail; `fail_all` ends every entry with a
//! failure when the harness goes. The table is generic over the answer: calls wait
//! for an `Ending`, `leo_messages` for a `Fetch`.

use std::collections::HashMap;

use tokio::sync::oneshot;

/// The unanswered requests of this session, by the sidecar's own id.
#[derive(Debug)]
pub struct Pending<T> {
    waiting: HashMap<u64, oneshot::Sender<T>>,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending {
            waiting: HashMap::new(),
        }
    }
}

impl<T> Pending<T> {
    /// Registers request `id`; its answer arrives on the returned receiver.
    pub fn insert(&mut self, id: u64) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        self.waiting.insert(id, tx);
        rx
    }

    /// Delivers `answer` to request `id`. `Err` gives the answer back when nobody takes it: no
    /// such request waits (cancelled, timed out), or its waiter has gone.
    pub fn settle(&mut self, id: u64, answer: T) -> Result<(), T> {
        match self.waiting.remove(&id) {
            Some(tx) => tx.send(answer),
            None => Err(answer),
        }
    }

    /// Forgets request `id` without an answer (the harness cancelled it).
    pub fn forget(&mut self, id: u64) {
        self.waiting.remove(&id);
    }

    /// Ends every request with `failure()`; returns how many there were.
    pub fn fail_all(&mut self, failure: impl Fn() -> T) -> usize {
        let n = self.waiting.len();
        for (_, tx) in self.waiting.drain() {
            let _ = tx.send(failure());
        }
        n
    }

    /// Whether request `id` waits for an answer.
    pub fn contains(&self, id: u64) -> bool {
        self.waiting.contains_key(&id)
    }

    /// The ids that wait for an answer.
    pub fn ids(&self) -> Vec<u64> {
        self.waiting.keys().copied().collect()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_reach_their_waiter_once_and_the_rest_come_back() {
        let mut p: Pending<u32> = Pending::default();
        let mut a = p.insert(1);
        let b = p.insert(2);
        assert_eq!(p.settle(1, 10), Ok(()));
        assert_eq!(a.try_recv(), Ok(10));
        assert_eq!(p.settle(1, 11), Err(11), "answered already");
        drop(b);
        assert_eq!(p.settle(2, 20), Err(20), "the waiter is gone");
        let mut c = p.insert(3);
        assert_eq!(p.fail_all(|| 0), 1);
        assert_eq!(c.try_recv(), Ok(0));
        assert!(p.is_empty());
    }
}
