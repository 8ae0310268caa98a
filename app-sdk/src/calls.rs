//! The app's own book of calls: which requests wait for a free slot, which run, which were
//! already seen.
//!
//! Pure state, driven by the session loop, so the rules are tested without a broker:
//! - a request is claimed only when a slot is free (`max_concurrent`); until then it waits here
//!   unclaimed, so another instance of the app can take it, and leaves the queue if the broker
//!   cancels it;
//! - a request is offered once, however many ways it arrives (the stream, a replay after
//!   `Last-Event-ID`, the `pending=1` list);
//! - when the stream is lost (the broker restarted, the socket broke) the broker keeps this
//!   client's claims for its resume key, so running handlers go on and post their replies once
//!   the app is back; queued requests are forgotten: the `pending=1` list after the reconnect
//!   says which of them still wait, and which this client had claimed without hearing so (the
//!   answer to its claim was lost), which are run without claiming again;
//! - when the app comes back as another client (its key expired), its claims are gone: running
//!   handlers are cancelled and their replies dropped; the broker parks those calls again, and
//!   each is run again (claimed anew) once its old handler is gone, when the pending list or the
//!   stream offers it;
//! - a request whose claim got no definite answer is forgotten, so the pending list may offer
//!   it again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use leo_protocol::names::RequestId;
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
    queued: HashSet<RequestId>,
    running: HashMap<RequestId, Arc<Control>>,
    /// Queued requests this client already holds the claim of.
    ours: HashSet<RequestId>,
    /// Running calls whose claim was lost (back as another client): offered again, they run
    /// again once their old handler is gone.
    lost: HashSet<RequestId>,
    /// Those offered again while their old handler still ran.
    rerun: HashMap<RequestId, Request>,
    seen: HashSet<RequestId>,
    seen_order: VecDeque<RequestId>,
}

impl Calls {
    pub fn new(max: usize) -> Calls {
        Calls {
            max: max.max(1),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            running: HashMap::new(),
            ours: HashSet::new(),
            lost: HashSet::new(),
            rerun: HashMap::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    fn remember(&mut self, id: &str) {
        if self.seen.insert(id.into()) {
            self.seen_order.push_back(id.into());
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
        if self.lost.contains(id) && self.running.contains_key(id) {
            self.rerun.insert(id.clone(), request);
            return true;
        }
        if self.seen.contains(id) || self.queued.contains(id) || self.running.contains_key(id) {
            return false;
        }
        self.remember(id);
        self.queued.insert(id.clone());
        self.queue.push_back(request);
        true
    }

    /// Queues a request the broker lists as claimed by this client, unless it runs here: the
    /// answer to its claim was lost. It is run without claiming again.
    pub fn offer_ours(&mut self, request: Request) -> bool {
        let id = request.id.clone();
        if self.running.contains_key(&id) || self.queued.contains(&id) {
            return false;
        }
        self.remember(&id);
        self.queued.insert(id.clone());
        self.ours.insert(id);
        self.queue.push_front(request);
        true
    }

    /// Request `id` got no definite answer to its claim: it may be offered again.
    pub fn forget(&mut self, id: &str) {
        self.seen.remove(id);
    }

    /// The broker ended request `id`: it leaves the queue, or its handler is cancelled.
    pub fn cancelled(&mut self, id: &str) {
        self.remember(id);
        self.rerun.remove(id);
        if self.queued.remove(id) {
            self.queue.retain(|r| r.id != id);
        }
        if let Some(control) = self.running.get(id) {
            control.end();
        }
    }

    /// The next request to start, if a slot is free, and whether this client holds its claim
    /// already; it counts as running from now on.
    pub fn next_to_start(&mut self) -> Option<(Request, Arc<Control>, bool)> {
        if self.running.len() >= self.max {
            return None;
        }
        let request = self.queue.pop_front()?;
        self.queued.remove(&request.id);
        let claimed = self.ours.remove(&request.id);
        let control = Arc::new(Control::default());
        self.running.insert(request.id.clone(), control.clone());
        Some((request, control, claimed))
    }

    /// Request `id` is done (answered, refused, or given up); its slot is free.
    pub fn finished(&mut self, id: &str) {
        self.running.remove(id);
        self.lost.remove(id);
        if let Some(request) = self.rerun.remove(id) {
            self.remember(&request.id);
            self.queued.insert(request.id.clone());
            self.queue.push_back(request);
        }
    }

    /// The stream is gone: forget what waits; what runs goes on, its claim kept for the key.
    pub fn session_lost(&mut self) {
        for id in self.queued.drain() {
            self.seen.remove(&id);
        }
        self.ours.clear();
        self.queue.clear();
    }

    /// The app came back as another client, or gives up: what runs has lost its claim. The
    /// broker parks those calls again; offered again, they run again (see `lost`).
    pub fn claims_lost(&mut self) {
        for (id, control) in &self.running {
            control.end();
            self.seen.remove(id);
            self.lost.insert(id.clone());
        }
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

    fn start(calls: &mut Calls) -> Option<RequestId> {
        calls.next_to_start().map(|(r, _, _)| r.id)
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
        let (_, control, _) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
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
    fn a_lost_stream_keeps_what_runs_and_forgets_what_waits() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        calls.offer(req("r2"));
        let (_, control, _) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.session_lost();
        assert!(!control.ended(), "its claim is kept for the resume key");
        assert_eq!(calls.waiting(), 0);
        assert!(
            calls.offer(req("r2")),
            "the pending list may offer it again"
        );
        assert!(!calls.offer_ours(req("r1")), "it runs here");
        calls.claims_lost();
        assert!(control.ended(), "back as another client: the claim is gone");
    }

    #[test]
    fn a_call_whose_claim_was_lost_runs_again_once_its_old_handler_is_gone() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        let (_, control, _) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.session_lost();
        calls.claims_lost();
        assert!(control.ended());
        assert!(calls.offer(req("r1")), "the broker parked it again");
        assert!(
            calls.next_to_start().is_none(),
            "not while its old handler runs"
        );
        calls.finished("r1");
        let (r, _, claimed) = calls
            .next_to_start()
            .unwrap_or_else(|| panic!("r1 runs again"));
        assert!(r.id == "r1" && !claimed, "claimed anew");
        calls.finished("r1");
        assert!(!calls.offer(req("r1")), "and only once");
    }

    #[test]
    fn a_call_whose_claim_was_lost_is_offered_again_after_its_handler_ended() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.claims_lost();
        calls.finished("r1");
        assert!(
            calls.offer(req("r1")),
            "the pending list offers it after the handler ended"
        );
    }

    #[test]
    fn a_claim_without_an_answer_is_forgotten_and_run_when_listed_as_ours() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        let (_, _, claimed) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        assert!(!claimed);
        calls.forget("r1");
        calls.finished("r1");
        calls.session_lost();
        assert!(calls.offer_ours(req("r1")));
        assert!(!calls.offer(req("r1")), "queued once");
        let (r, _, claimed) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        assert!(r.id == "r1" && claimed, "run without claiming again");
    }

    #[test]
    fn shutdown_stops_without_ending() {
        let mut calls = Calls::new(1);
        calls.offer(req("r1"));
        calls.offer(req("r2"));
        let (_, control, _) = calls.next_to_start().unwrap_or_else(|| panic!("r1 starts"));
        calls.shutdown();
        assert!(control.token.is_cancelled() && !control.ended());
        assert_eq!(calls.waiting(), 0);
    }
}
