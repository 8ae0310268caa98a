//! The request lifecycle: a call is parked, claimed, and settled exactly once.
//!
//! ```text
//!   park ──▶ (Awaiting ──approve──▶) Parked ──claim──▶ Claimed ──result──▶ ended (result or app error)
//!              │                  │
//!              └──── end(reason) ─┴──▶ ended (timeout, cancelled, no_client)
//! ```
//!
//! **Invariant:** a live request holds the only `oneshot::Sender` of its caller, and every
//! transition out of `live` consumes it, so a call can be answered at most once; the id then
//! moves to a bounded list of ended requests so a late claim or result is told
//! `already_settled` instead of `unknown_request`.
//!
//! This module is pure state: no locks, no tasks, no I/O. The broker's `core` drives it under
//! its one mutex and publishes the events. Every change is also written to a journal of
//! `store::Op`s, which the core hands to the store before it lets go of the lock, so the
//! database records the same transitions in the same order, from one place.

use std::collections::{BTreeMap, HashMap, VecDeque};

use leo_protocol::ErrorCode;
use leo_protocol::content::Posted;
use leo_protocol::events::CancelReason;
use leo_protocol::ipc::{Outcome, RawOutcome};
pub use leo_protocol::outcome::CallOutcome;
use leo_protocol::requests::{PendingRequest, Request, RequestState};
use tokio::sync::oneshot;

use crate::ownership::Owners;
use crate::refusal::Refusal;
use crate::registry::ClientId;
use crate::store::{Op, StoredCall};

/// A request id, such as `r_0f3c…`.
pub use leo_protocol::names::RequestId;

/// Which sidecar connection a call came from.
pub type ConnId = u64;

/// What an agent asked for: the request apps are shown, and where it came from. It reads as
/// its `Request` (`call.tool`, `call.arguments`).
#[derive(Debug, Clone)]
pub struct Call {
    /// As announced in `client_tool.request`; `owner` is the owner when it was announced
    /// (listings say who owns now).
    pub request: Request,
    pub conn: ConnId,
    /// The sidecar's own id of the call.
    pub local_id: u64,
    /// When it was parked, for its age.
    pub parked_at: std::time::Instant,
}

impl std::ops::Deref for Call {
    type Target = Request;

    fn deref(&self) -> &Request {
        &self.request
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Held for a person's approval: no app sees it, nor may claim it.
    Awaiting(Box<Awaiting>),
    Parked,
    Claimed {
        by: ClientId,
    },
}

pub use leo_protocol::approvals::{Approval, Awaiting};

#[derive(Debug)]
struct Live {
    /// Its place in `order`.
    n: u64,
    call: Call,
    stage: Stage,
    reply: oneshot::Sender<RawOutcome>,
    timer: Option<tokio::task::AbortHandle>,
    /// The approval's expiry, while the call awaits one.
    approval_timer: Option<tokio::task::AbortHandle>,
    /// An approver changed the arguments: the agent's result says so.
    edited: bool,
}

/// A failure that ends a request, with the reason published to apps; the caller is answered
/// with the error code of its outcome (`CancelReason::code`).
#[derive(Debug, Clone)]
pub struct Failure {
    pub reason: CancelReason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: CancelReason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
        }
    }
}

/// A request that just ended by failure, for the caller to publish (`Broker::publish_ended`)
/// and record: dropping it unpublished would leave apps holding a call that is gone.
#[derive(Debug, Clone)]
#[must_use = "publish it: apps and the history must learn that the call ended"]
pub struct EndedCall {
    pub id: RequestId,
    pub call: Call,
    pub reason: CancelReason,
    /// Whether apps were shown the call (not while it awaited approval).
    pub offered: bool,
}

/// Every live request and the recently ended ones.
#[derive(Debug)]
pub struct Requests {
    live: HashMap<RequestId, Live>,
    /// Live ids in the order they were parked, for stable listings.
    order: BTreeMap<u64, RequestId>,
    parked: u64,
    ended: HashMap<RequestId, CallOutcome>,
    ended_order: VecDeque<RequestId>,
    remember: usize,
    /// Live ids by the sidecar's own call id, for cancels and duplicate checks.
    by_local: HashMap<(ConnId, u64), RequestId>,
    /// Changes not yet handed to the store, oldest first.
    journal: Vec<Op>,
}

impl Requests {
    pub fn new(remember: usize) -> Requests {
        Requests {
            live: HashMap::new(),
            order: BTreeMap::new(),
            parked: 0,
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
            remember: remember.max(1),
            by_local: HashMap::new(),
            journal: Vec::new(),
        }
    }

    /// The changes made since the last call, for the store.
    pub fn take_journal(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.journal)
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<(&Call, &Stage)> {
        self.live.get(id).map(|l| (&l.call, &l.stage))
    }

    /// Parks a new call, held for approval when `awaiting` is given. Its id must be fresh.
    pub fn park(
        &mut self,
        call: Call,
        reply: oneshot::Sender<RawOutcome>,
        awaiting: Option<Awaiting>,
    ) {
        let deadline_ms = call
            .timeout_s
            .map(|t| crate::store::now_ms().saturating_add((t as i64).saturating_mul(1000)));
        let mut row = stored(&call, deadline_ms, None);
        row.approval = awaiting.clone().map(|a| Approval::Awaiting(a).to_text());
        self.journal.push(Op::Park(row));
        self.by_local
            .insert((call.conn, call.local_id), call.id.clone());
        let stage = match awaiting {
            Some(a) => Stage::Awaiting(Box::new(a)),
            None => Stage::Parked,
        };
        self.insert(call, stage, reply, false);
    }

    /// Puts back a call the store had, as it was (not journaled: it is on disk already). Its
    /// `conn` is 0 until its sidecar comes back (`reattach`).
    pub fn restore(
        &mut self,
        call: Call,
        stage: Stage,
        reply: oneshot::Sender<RawOutcome>,
        edited: bool,
    ) {
        self.insert(call, stage, reply, edited);
    }

    /// Attaches the approval's expiry, aborted when the call is decided or ends.
    pub fn set_approval_timer(&mut self, id: &str, timer: tokio::task::AbortHandle) {
        match self.live.get_mut(id) {
            Some(live) if matches!(live.stage, Stage::Awaiting(_)) => {
                live.approval_timer = Some(timer)
            }
            _ => timer.abort(),
        }
    }

    /// `by` approved awaiting call `id` (the core checked who and the digest): it is parked
    /// for the apps, with `arguments` in place of the agent's when the approver edited them.
    pub fn approve(
        &mut self,
        id: &str,
        by: &str,
        arguments: Option<Box<serde_json::value::RawValue>>,
    ) -> Option<&Call> {
        let live = self.live.get_mut(id)?;
        if !matches!(live.stage, Stage::Awaiting(_)) {
            return None;
        }
        live.stage = Stage::Parked;
        live.edited = arguments.is_some();
        if let Some(timer) = live.approval_timer.take() {
            timer.abort();
        }
        let approval = Approval::Approved {
            edited: live.edited,
            by: by.to_owned(),
        };
        if let Some(args) = arguments {
            live.call.request.arguments = args;
        }
        self.journal.push(Op::Approval {
            id: id.to_owned(),
            approval: approval.to_text(),
            arguments: live
                .edited
                .then(|| live.call.request.arguments.get().to_owned()),
        });
        Some(&live.call)
    }

    /// Awaiting call `id`'s decision now names `digest` (the tool's definition changed while it
    /// awaited); stored, so a restart keeps asking for the new one.
    pub fn redigest(&mut self, id: &str, digest: String) -> Option<(&Call, &Awaiting)> {
        let live = self.live.get_mut(id)?;
        let Stage::Awaiting(awaiting) = &mut live.stage else {
            return None;
        };
        awaiting.digest = digest;
        self.journal.push(Op::Approval {
            id: id.to_owned(),
            approval: Approval::Awaiting((**awaiting).clone()).to_text(),
            arguments: None,
        });
        Some((&live.call, &**awaiting))
    }

    /// The calls awaiting approval, in the order they were parked.
    pub fn awaiting(&self) -> impl Iterator<Item = (&Call, &Awaiting)> {
        self.order.values().filter_map(|id| {
            let live = self.live.get(id)?;
            match &live.stage {
                Stage::Awaiting(a) => Some((&live.call, &**a)),
                _ => None,
            }
        })
    }

    /// Remembers how a request ended before the restart.
    pub fn remember_ended(&mut self, id: RequestId, how: CallOutcome) {
        self.ended_order.push_back(id.clone());
        self.ended.insert(id, how);
        while self.ended_order.len() > self.remember {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// A call's sidecar connection was lost (a piped session, see `Broker::session_detached`):
    /// the call waits for its sidecar on no connection, as a restored one does, until
    /// `reattach`.
    pub fn detach(&mut self, id: &str) {
        if let Some(live) = self.live.get_mut(id) {
            self.by_local.remove(&(live.call.conn, live.call.local_id));
            live.call.conn = 0;
        }
    }

    /// A restored or detached call's sidecar is back on connection `conn`.
    pub fn reattach(&mut self, id: &str, conn: ConnId) -> bool {
        let Some(live) = self.live.get_mut(id) else {
            return false;
        };
        live.call.conn = conn;
        self.by_local
            .insert((conn, live.call.local_id), id.to_owned().into());
        true
    }

    /// A claim is given back (its app did not come back): the call is parked again.
    pub fn unclaim(&mut self, id: &str) -> Option<&Call> {
        let live = self.live.get_mut(id)?;
        if live.stage == Stage::Parked {
            return None;
        }
        live.stage = Stage::Parked;
        self.journal.push(Op::Unclaim { id: id.to_owned() });
        Some(&live.call)
    }

    fn insert(
        &mut self,
        call: Call,
        stage: Stage,
        reply: oneshot::Sender<RawOutcome>,
        edited: bool,
    ) {
        let id = call.id.clone();
        self.parked += 1;
        self.order.insert(self.parked, id.clone());
        self.live.insert(
            id,
            Live {
                n: self.parked,
                call,
                stage,
                reply,
                timer: None,
                approval_timer: None,
                edited,
            },
        );
    }

    /// Attaches the timeout task, aborted when the request ends.
    pub fn set_timer(&mut self, id: &str, timer: tokio::task::AbortHandle) {
        match self.live.get_mut(id) {
            Some(live) => live.timer = Some(timer),
            None => timer.abort(),
        }
    }

    /// The refusal for an id that is not live: `already_settled` (saying how it ended) or
    /// `unknown_request`.
    pub fn not_live(&self, id: &str) -> Refusal {
        match self.ended.get(id) {
            Some(how) => Refusal::new(
                ErrorCode::AlreadySettled,
                format!("request {id} already ended {}", how.describe()),
            ),
            None => Refusal::new(ErrorCode::UnknownRequest, format!("no request {id}")),
        }
    }

    /// `client` claims `id`. `serves` says whether it serves the call's group.
    pub fn claim(
        &mut self,
        id: &str,
        client: &str,
        serves: bool,
        owners: &mut Owners,
    ) -> Result<&Call, Refusal> {
        let Some(live) = self.live.get(id) else {
            return Err(self.not_live(id));
        };
        if matches!(live.stage, Stage::Awaiting(_)) {
            // Said as of an id never seen: an app learns nothing of a call before approval.
            return Err(Refusal::new(
                ErrorCode::UnknownRequest,
                format!("no request {id}"),
            ));
        }
        if !serves {
            return Err(Refusal::new(
                ErrorCode::NotProvider,
                format!(
                    "client {client} does not serve group {:?} of tool {:?}",
                    live.call.group, live.call.tool
                ),
            ));
        }
        if let Some(owner) = owners.owner(&live.call.agent, &live.call.group)
            && owner != client
        {
            return Err(Refusal::new(
                ErrorCode::OwnedByOther,
                format!(
                    "group {:?} of agent {:?} is owned by client {owner}",
                    live.call.group, live.call.agent
                ),
            ));
        }
        if let Stage::Claimed { by } = &live.stage {
            return Err(Refusal::new(
                ErrorCode::AlreadyClaimed,
                format!("request {id} is already claimed by client {by}"),
            ));
        }
        let live = self
            .live
            .get_mut(id)
            .ok_or_else(|| Refusal::new(ErrorCode::UnknownRequest, format!("no request {id}")))?;
        owners.take(&live.call.agent, &live.call.group, client);
        live.stage = Stage::Claimed {
            by: client.to_owned().into(),
        };
        self.journal.push(Op::Claim {
            id: id.to_owned(),
            by: client.to_owned(),
        });
        Ok(&live.call)
    }

    /// The claimant posts its result; the caller gets it.
    pub fn settle(&mut self, id: &str, client: &str, posted: Posted) -> Result<Call, Refusal> {
        let Some(live) = self.live.get(id) else {
            return Err(self.not_live(id));
        };
        match &live.stage {
            Stage::Awaiting(_) => {
                return Err(Refusal::new(
                    ErrorCode::UnknownRequest,
                    format!("no request {id}"),
                ));
            }
            Stage::Parked => {
                return Err(Refusal::new(
                    ErrorCode::NotClaimant,
                    format!("request {id} is not claimed; claim it before posting a result"),
                ));
            }
            Stage::Claimed { by } if by != client => {
                return Err(Refusal::new(
                    ErrorCode::NotClaimant,
                    format!("request {id} is claimed by client {by}, not {client}"),
                ));
            }
            Stage::Claimed { .. } => {}
        }
        let (ended, outcome) = match posted {
            Posted::Content(content) => (
                CallOutcome::Result,
                Outcome::Content {
                    content,
                    structured_content: None,
                },
            ),
            Posted::Structured(content, structured) => (
                CallOutcome::Result,
                Outcome::Content {
                    content,
                    structured_content: Some(structured),
                },
            ),
            Posted::Error(error) => (CallOutcome::Error, Outcome::Error { error }),
        };
        let live = self.remove(id, ended).ok_or_else(|| self.not_live(id))?;
        let outcome = if live.edited {
            with_edit_note(outcome, &live.call)
        } else {
            outcome
        };
        self.journal
            .push(ended_op(id, &live.call, ended, outcome.clone()));
        // The caller may have gone away; the request still ended exactly once.
        let _ = live.reply.send(outcome);
        Ok(live.call)
    }

    /// Ends a live request with a failure; `None` if it is not live (already ended).
    pub fn end(&mut self, id: &str, failure: Failure) -> Option<EndedCall> {
        let how = CallOutcome::of_reason(failure.reason);
        let live = self.remove(id, how)?;
        let outcome = RawOutcome::failed(failure.reason.code().as_str(), failure.message);
        self.journal
            .push(ended_op(id, &live.call, how, outcome.clone()));
        let _ = live.reply.send(outcome);
        Some(EndedCall {
            id: id.to_owned().into(),
            offered: !matches!(live.stage, Stage::Awaiting(_)),
            call: live.call,
            reason: failure.reason,
        })
    }

    /// Ends every live request `pick` selects, with the failure it returns.
    pub fn end_where(
        &mut self,
        mut pick: impl FnMut(&Call, &Stage) -> Option<Failure>,
    ) -> Vec<EndedCall> {
        let chosen: Vec<(RequestId, Failure)> = self
            .order
            .values()
            .filter_map(|id| {
                let live = self.live.get(id)?;
                pick(&live.call, &live.stage).map(|f| (id.clone(), f))
            })
            .collect();
        chosen
            .into_iter()
            .filter_map(|(id, f)| self.end(&id, f))
            .collect()
    }

    fn remove(&mut self, id: &str, how: CallOutcome) -> Option<Live> {
        let live = self.live.remove(id)?;
        self.by_local.remove(&(live.call.conn, live.call.local_id));
        for timer in [&live.timer, &live.approval_timer].into_iter().flatten() {
            timer.abort();
        }
        self.order.remove(&live.n);
        self.ended.insert(id.to_owned().into(), how);
        self.ended_order.push_back(id.to_owned().into());
        while self.ended_order.len() > self.remember {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
        Some(live)
    }

    /// Every live request, in the order calls were parked.
    pub fn live(&self) -> impl Iterator<Item = (&RequestId, &Call, &Stage)> {
        self.order
            .values()
            .filter_map(|id| self.live.get(id).map(|l| (id, &l.call, &l.stage)))
    }

    /// `GET …/requests?pending=1`, in the order calls were parked.
    pub fn pending(&self, owners: &Owners) -> Vec<PendingRequest> {
        self.order
            .values()
            .filter_map(|id| self.live.get(id))
            .filter(|l| !matches!(l.stage, Stage::Awaiting(_)))
            .map(|l| PendingRequest {
                request: Request {
                    owner: owners.owner(&l.call.agent, &l.call.group).cloned(),
                    ..l.call.request.clone()
                },
                state: match l.stage {
                    Stage::Awaiting(_) | Stage::Parked => RequestState::Parked,
                    Stage::Claimed { .. } => RequestState::Claimed,
                },
                claimed_by: match &l.stage {
                    Stage::Awaiting(_) | Stage::Parked => None,
                    Stage::Claimed { by } => Some(by.clone()),
                },
            })
            .collect()
    }

    /// The live request of a sidecar's call.
    pub fn find_local(&self, conn: ConnId, local_id: u64) -> Option<RequestId> {
        self.by_local.get(&(conn, local_id)).cloned()
    }
}

/// A call as the store keeps it.
fn stored(call: &Call, deadline_ms: Option<i64>, claimed_by: Option<ClientId>) -> StoredCall {
    StoredCall {
        request: Request {
            owner: None,
            ..call.request.clone()
        },
        local_id: call.local_id,
        deadline_ms,
        claimed_by,
        approval: None,
    }
}

/// An app's result for a call whose arguments an approver changed: a first text block says so,
/// with the arguments that ran, so the agent never takes the result for its own call's.
fn with_edit_note(outcome: RawOutcome, call: &Call) -> RawOutcome {
    let Outcome::Content {
        mut content,
        structured_content,
    } = outcome
    else {
        return outcome;
    };
    let note = serde_json::json!({
        "type": "text",
        "text": format!(
            "The approver changed the arguments of this call; it ran with {}",
            call.arguments.get()
        ),
    });
    if let Ok(block) = serde_json::value::to_raw_value(&note) {
        content.insert(0, block);
    }
    Outcome::Content {
        content,
        structured_content,
    }
}

fn ended_op(id: &str, call: &Call, how: CallOutcome, outcome: RawOutcome) -> Op {
    Op::End {
        id: id.into(),
        how,
        agent: call.agent.clone(),
        session: call.session.clone(),
        local_id: call.local_id,
        outcome: Some(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leo_protocol::content::AppError;
    use serde_json::json;
    use tokio::sync::oneshot::error::TryRecvError;

    fn call(id: &str, agent: &str, local_id: u64) -> Call {
        Call {
            request: Request {
                id: id.into(),
                agent: agent.into(),
                session: "s".into(),
                group: "g".into(),
                tool: "t".into(),
                arguments: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
                timeout_s: Some(600),
                created_at: "now".into(),
                owner: None,
                traceparent: None,
            },
            conn: 1,
            local_id,
            parked_at: std::time::Instant::now(),
        }
    }

    fn parked(reqs: &mut Requests, id: &str, agent: &str) -> oneshot::Receiver<RawOutcome> {
        let (tx, rx) = oneshot::channel();
        reqs.park(call(id, agent, reqs.len() as u64), tx, None);
        rx
    }

    fn code<T: std::fmt::Debug>(r: Result<T, Refusal>) -> ErrorCode {
        r.expect_err("expected a refusal").code
    }

    fn text(s: &str) -> Posted {
        let block = json!({"type": "text", "text": s}).to_string();
        Posted::Content(vec![
            serde_json::value::RawValue::from_string(block).unwrap(),
        ])
    }

    /// An outcome as the sidecar reads it, for comparisons.
    fn parsed(o: RawOutcome) -> Outcome {
        let line = serde_json::to_vec(&o).unwrap();
        serde_json::from_slice(&line).unwrap()
    }

    fn fail(reason: CancelReason) -> Failure {
        Failure::new(reason, "x")
    }

    #[test]
    fn parked_claimed_settled() {
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let mut rx = parked(&mut reqs, "r1", "a");
        assert_eq!(reqs.get("r1").unwrap().1, &Stage::Parked);
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        assert_eq!(
            reqs.get("r1").unwrap().1,
            &Stage::Claimed { by: "c1".into() }
        );
        assert_eq!(owners.owner("a", "g").map(ClientId::as_str), Some("c1"));
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        reqs.settle("r1", "c1", text("hi")).unwrap();
        assert_eq!(
            parsed(rx.try_recv().unwrap()),
            Outcome::Content {
                content: vec![json!({"type": "text", "text": "hi"})],
                structured_content: None,
            }
        );
        assert!(reqs.is_empty());
    }

    #[test]
    fn an_app_error_is_an_outcome_too() {
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let mut rx = parked(&mut reqs, "r1", "a");
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        let err = AppError {
            code: "nope".into(),
            message: "m".into(),
        };
        reqs.settle("r1", "c1", Posted::Error(err.clone())).unwrap();
        assert_eq!(
            parsed(rx.try_recv().unwrap()),
            Outcome::Error { error: err }
        );
        assert_eq!(
            code(reqs.settle("r1", "c1", text("again"))),
            ErrorCode::AlreadySettled
        );
    }

    #[test]
    fn claim_refusals_leave_the_request_as_it_was() {
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let _rx = parked(&mut reqs, "r1", "a");
        assert_eq!(
            code(reqs.claim("nope", "c1", true, &mut owners)),
            ErrorCode::UnknownRequest
        );
        assert_eq!(
            code(reqs.claim("r1", "c1", false, &mut owners)),
            ErrorCode::NotProvider
        );
        assert_eq!(reqs.get("r1").unwrap().1, &Stage::Parked);
        assert!(
            owners.owner("a", "g").is_none(),
            "a refused claim owns nothing"
        );
        owners.take("a", "g", "c2");
        assert_eq!(
            code(reqs.claim("r1", "c1", true, &mut owners)),
            ErrorCode::OwnedByOther
        );
        assert_eq!(reqs.get("r1").unwrap().1, &Stage::Parked);
        reqs.claim("r1", "c2", true, &mut owners).unwrap();
        assert_eq!(
            code(reqs.claim("r1", "c2", true, &mut owners)),
            ErrorCode::AlreadyClaimed
        );
        assert_eq!(
            code(reqs.claim("r1", "c1", true, &mut owners)),
            ErrorCode::OwnedByOther
        );
    }

    #[test]
    fn already_claimed_when_no_one_owns_yet() {
        // Ownership released (owner left) while a claim stands: a second claim is refused.
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let _rx = parked(&mut reqs, "r1", "a");
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        owners.release_client("c1");
        assert_eq!(
            code(reqs.claim("r1", "c2", true, &mut owners)),
            ErrorCode::AlreadyClaimed
        );
    }

    #[test]
    fn settle_refusals() {
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let mut rx = parked(&mut reqs, "r1", "a");
        assert_eq!(
            code(reqs.settle("nope", "c1", text("x"))),
            ErrorCode::UnknownRequest
        );
        assert_eq!(
            code(reqs.settle("r1", "c1", text("x"))),
            ErrorCode::NotClaimant
        );
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        assert_eq!(
            code(reqs.settle("r1", "c2", text("x"))),
            ErrorCode::NotClaimant
        );
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    }

    #[test]
    fn ending_parked_or_claimed_answers_once() {
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let mut rx1 = parked(&mut reqs, "r1", "a");
        let mut rx2 = parked(&mut reqs, "r2", "a");
        reqs.claim("r2", "c1", true, &mut owners).unwrap();
        let ended = reqs.end("r1", fail(CancelReason::Timeout)).unwrap();
        assert_eq!(ended.reason, CancelReason::Timeout);
        assert!(
            reqs.end("r1", fail(CancelReason::CancelledByAgent))
                .is_none(),
            "no second end"
        );
        let ended = reqs
            .end("r2", fail(CancelReason::CancelledByAgent))
            .unwrap();
        assert_eq!(ended.reason, CancelReason::CancelledByAgent);
        for rx in [&mut rx1, &mut rx2] {
            assert!(matches!(rx.try_recv(), Ok(Outcome::Error { .. })));
            assert!(rx.try_recv().is_err(), "exactly one outcome");
        }
        let refusal = reqs.claim("r1", "c1", true, &mut owners).unwrap_err();
        assert_eq!(refusal.code, ErrorCode::AlreadySettled);
        assert!(
            refusal.message.contains("by timeout"),
            "{}",
            refusal.message
        );
        assert_eq!(
            code(reqs.settle("r2", "c1", text("late"))),
            ErrorCode::AlreadySettled
        );
    }

    #[test]
    fn a_settled_request_cannot_be_ended_after() {
        let mut reqs = Requests::new(16);
        let mut owners = Owners::default();
        let mut rx = parked(&mut reqs, "r1", "a");
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        reqs.settle("r1", "c1", text("ok")).unwrap();
        assert!(reqs.end("r1", fail(CancelReason::Timeout)).is_none());
        assert!(matches!(rx.try_recv(), Ok(Outcome::Content { .. })));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn end_where_picks_and_keeps_order() {
        let mut reqs = Requests::new(16);
        let _a = parked(&mut reqs, "r1", "a");
        let _b = parked(&mut reqs, "r2", "b");
        let _c = parked(&mut reqs, "r3", "a");
        let ended =
            reqs.end_where(|c, _| (c.agent == "a").then(|| fail(CancelReason::CancelledByAgent)));
        let ids: Vec<&str> = ended.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["r1", "r3"]);
        let owners = Owners::default();
        let pending = reqs.pending(&owners);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, "r2");
    }

    #[test]
    fn ended_ids_are_forgotten_after_the_bound() {
        let mut reqs = Requests::new(1);
        let _a = parked(&mut reqs, "r1", "a");
        let _b = parked(&mut reqs, "r2", "a");
        let _ = reqs.end("r1", fail(CancelReason::Timeout));
        let _ = reqs.end("r2", fail(CancelReason::Timeout));
        let mut owners = Owners::default();
        assert_eq!(
            code(reqs.claim("r1", "c", true, &mut owners)),
            ErrorCode::UnknownRequest
        );
        assert_eq!(
            code(reqs.claim("r2", "c", true, &mut owners)),
            ErrorCode::AlreadySettled
        );
    }

    #[test]
    fn a_caller_that_went_away_does_not_stop_settling() {
        let mut reqs = Requests::new(4);
        let mut owners = Owners::default();
        drop(parked(&mut reqs, "r1", "a"));
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        reqs.settle("r1", "c1", text("nobody listens")).unwrap();
        assert!(reqs.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn ending_aborts_the_timer() {
        let mut reqs = Requests::new(4);
        let _rx = parked(&mut reqs, "r1", "a");
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = fired.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            f.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        reqs.set_timer("r1", timer.abort_handle());
        let _ = reqs.end("r1", fail(CancelReason::CancelledByAgent));
        tokio::time::advance(std::time::Duration::from_secs(10)).await;
        assert!(timer.await.unwrap_err().is_cancelled());
        assert!(!fired.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn an_awaiting_call_is_hidden_from_apps_until_approved_and_says_it_was_edited() {
        let mut reqs = Requests::new(8);
        let mut owners = Owners::default();
        let (tx, mut rx) = oneshot::channel();
        let awaiting = Awaiting {
            digest: "sha256:d".into(),
            editable: true,
            required_by: leo_protocol::approvals::RequiredBy::Tool,
            requested_at: "now".into(),
            expires_ms: 0,
        };
        reqs.park(call("r1", "a", 1), tx, Some(awaiting));
        assert!(reqs.pending(&owners).is_empty());
        assert_eq!(reqs.awaiting().count(), 1);
        assert_eq!(
            code(reqs.claim("r1", "c1", true, &mut owners)),
            ErrorCode::UnknownRequest
        );
        let edited = serde_json::value::RawValue::from_string(r#"{"n":2}"#.into()).unwrap();
        assert!(reqs.approve("r1", "operator", Some(edited)).is_some());
        assert!(
            reqs.approve("r1", "operator", None).is_none(),
            "decided once"
        );
        assert_eq!(reqs.pending(&owners).len(), 1);
        reqs.claim("r1", "c1", true, &mut owners).unwrap();
        reqs.settle("r1", "c1", text("done")).unwrap();
        let Outcome::Content { content, .. } = parsed(rx.try_recv().unwrap()) else {
            panic!("not content");
        };
        assert!(content[0]["text"].as_str().unwrap().contains(r#"{"n":2}"#));
        assert_eq!(content[1]["text"], "done");
        let journal = reqs.take_journal();
        assert!(
            journal.iter().any(
                |op| matches!(op, Op::Approval { arguments: Some(a), .. } if a == r#"{"n":2}"#)
            )
        );
    }
}
