//! The app's own book of calls: which requests wait for a free slot, which run, which were
//! already seen.
//!
//! Pure state, driven by the session loop, so the rules are tested without a broker:
//! - a request is claimed only when a slot is free (`max_concurrent`); until then it waits here
//!   unclaimed, so another instance of the app can take it, and leaves the queue if the broker
//!   cancels it;
//! - a request is offered once, however many ways it arrives (the stream, a replay after
//!   `Last-Event-ID`, the `pending=1` list);
//! - when the stream is lost the broker ends every call this client had claimed, so running
//!   handlers are cancelled, and queued requests are forgotten: the `pending=1` list after the
//!   reconnect says which of them still wait.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use leo_protocol::requests::Request;
use tokio_util::sync::CancellationToken;

/// How many finished request ids are remembered to drop repeats.
const SEEN: usize = 4096;

/// The cancellation of one running call.
#[derive(Debug, Default)]
pub struct Control {
    pub token: CancellationToken,
    /// The broker ended the call: its result must not be posted.
    ended: AtomicBool,
}

impl Control {
    /// The broker ended the call (or it ended with the stream).
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.token.cancel();
    }

    /// The app is shutting down: the handler is asked to stop, and a reply it still gives in
    /// time is posted.
    pub fn stop(&self) {
        self.token.cancel();
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

#[derive(Debug)]
pub struct Calls {
    max: usize,
    queue: VecDeque<Request>,
    queued: HashSet<String>,
    running: HashMap<String, Arc<Control>>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
}

impl Calls {
    pub fn new(max: usize) -> Calls {
        Calls {
            max: max.max(1),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            running: HashMap::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    fn remember(&mut self, id: &str) {
        if self.seen.insert(id.to_owned()) {
            self.seen_order.push_back(id.to_owned());
            if self.seen_order.len() > SEEN
                && let Some(old) = self.seen_order.pop_front()
            {
                self.seen.remove(&old);
            }
        }
    }

    /// Queues a request unless it was seen before; returns whether it was queued.
    pub fn offer(&mut self, request: Request) -> bool {
        let id = &request.id;
        if self.seen.contains(id) || self.queued.contains(id) || self.running.contains_key(id) {
            return false;
        }
        self.remember(id);
        self.queued.insert(id.clone());
        self.queue.push_back(request);
        true
    }

    /// The broker ended request `id`: it leaves the queue, or its handler is cancelled.
    pub fn cancelled(&mut self, id: &str) {
        self.remember(id);
        if self.queued.remove(id) {
            self.queue.retain(|r| r.id != id);
        }
        if let Some(control) = self.running.get(id) {
            control.end();
        }
    }

    /// The next request to claim, if a slot is free; it counts as running from now on.
    pub fn next_to_start(&mut self) -> Option<(Request, Arc<Control>)> {
        if self.running.len() >= self.max {
            return None;
        }
        let request = self.queue.pop_front()?;
        self.queued.remove(&request.id);
        let control = Arc::new(Control::default());
        self.running.insert(request.id.clone(), control.clone());
        Some((request, control))
    }

    /// Request `id` is done (answered, refused, or given up); its slot is free.
    pub fn finished(&mut self, id: &str) {
        self.running.remove(id);
    }

    /// The stream is gone: end what runs, forget what waits.
    pub fn session_lost(&mut self) {
        for control in self.running.values() {
            control.end();
        }
        for id in self.queued.drain() {
            self.seen.remove(&id);
        }
        self.queue.clear();
    }

    /// The app stops: ask what runs to stop, drop what waits.
    pub fn shutdown(&mut self) {
        for control in self.running.values() {
            control.stop();
        }
        self.queued.clear();
        self.queue.clear();
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: &str) -> Request {
        Request {
            id: id.into(),
            agent: "a".into(),
            session: "s".into(),
            group: "g".into(),
            tool: "t".into(),
            arguments: serde_json::value::RawValue::from_string("{}".into()).unwrap_or_default(),
            timeout_s: None,
            created_at: "now".into(),
            owner: None,
            traceparent: None,
        }
    }

    fn start(calls: &mut Calls) -> Option<String> {
        calls.next_to_start().map(|(r, _)| r.id)
    }

    #[test]
    fn claims_only_with_a_free_slot_and_in_order() {
        let mut calls = Calls::new(2);
        for id in ["r1", "r2", "r3", "r4"] {
            assert!(calls.offer(req(id)));
        }
        assert_eq!(start(&mut calls).as_deref(), Some("r1"));
        assert_eq!(start(&mut calls).as_deref(), Some("r2"));
        assert_eq!(start(&mut calls), None, "both slots are taken");
        assert_eq!(calls.waiting(), 2);
        calls.finished("r1");
        assert_eq!(start(&mut calls).as_deref(), Some("r3"));
        assert_eq!(calls.running(), 2);
    }

    #[test]
    fn a_request_is_offered_once_however_it_arrives() {
        let mut calls = Calls::new(1);
        assert!(calls.offer(req("r1")));
        assert!(!calls.offer(req("r1")), "queued");
        start(&mut calls);
        assert!(!calls.offer(req("r1")), "running");
        calls.finished("r1");
        assert!(!calls.offer(req("r1")), "finished");
    }

    #[test]
    fn cancellation_leaves_the_queue_or_ends_the_handler() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        calls.offer(req("r2"));
        let (_, control) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.cancelled("r2");
        assert_eq!(calls.waiting(), 0);
        assert!(
            !calls.offer(req("r2")),
            "a cancelled request is not offered again"
        );
        calls.cancelled("r1");
        assert!(control.token.is_cancelled() && control.ended());
    }

    #[test]
    fn a_lost_stream_ends_what_runs_and_forgets_what_waits() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        calls.offer(req("r2"));
        let (_, control) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.session_lost();
        assert!(control.ended());
        assert_eq!(calls.waiting(), 0);
        assert!(
            calls.offer(req("r2")),
            "the pending list may offer it again"
        );
        assert!(!calls.offer(req("r1")), "the broker ended it");
    }

    #[test]
    fn shutdown_stops_without_ending() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        calls.offer(req("r2"));
        let (_, control) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.shutdown();
        assert!(control.token.is_cancelled() && !control.ended());
        assert_eq!(calls.waiting(), 0);
    }
}
