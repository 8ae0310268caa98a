//! Following the bus as a provider stream would, and one delivery task per call.
//!
//! **Retry rule.** A delivery that fails (no connection, no answer within the timeouts, a
//! status other than `200` and `202`, or a `200` whose body the broker refuses as an answer) is
//! tried again after a capped, jittered exponential backoff (`RETRY_FIRST` doubling to
//! `RETRY_CAP`), with the same `webhook-id`, for as long as the call is live and unclaimed and
//! its deadline (`timeout_s`) has not come; the call's own timer then ends it `timeout` as for
//! any app. A `202` ends the deliveries: the app answers later through the claim and result
//! routes. A cancellation is delivered the same way, for at most `CANCEL_RETRY_FOR`.
//!
//! A call of a group that several webhooks serve is delivered to one of them: the agent's
//! owner of the group if it has one, else the first by name.
//!
//! An approval request goes to every approver's webhook whose owner may decide it, retried
//! with the same backoff until a `2xx`, for as long as the call awaits approval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use leo_protocol::ErrorCode;
use leo_protocol::approvals::AwaitingApproval;
use leo_protocol::backoff::Backoff;
use leo_protocol::events::{CancelledEvent, kind};
use leo_protocol::names::{ClientId, RequestId};
use leo_protocol::requests::Request;
use leo_protocol::webhooks::{APPROVAL_SUFFIX, CANCELLED_SUFFIX, InlineAnswer};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::deliver::{self, Message};
use super::url::{Target, UrlRefused};
use super::{Delivery, Webhooks};
use crate::events::Event;

/// The first wait before a delivery is tried again.
pub const RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest wait between two tries.
pub const RETRY_CAP: Duration = Duration::from_secs(10);
/// How long a cancellation is tried for.
const CANCEL_RETRY_FOR: Duration = Duration::from_secs(30);

/// What one attempt came to.
enum Attempt {
    /// Nothing more to deliver for this call.
    Done,
    /// Accepted with `202`: the app answers later.
    Deferred,
    /// Try again later; why this one failed.
    Failed(String),
}

/// Follows the bus until shutdown.
pub async fn run(hooks: Arc<Webhooks>) {
    let shutdown = hooks.broker.shutdown_token();
    let mut rx = hooks.broker.bus().subscribe(None).rx;
    // Calls restored awaiting approval were announced before this subscription.
    hooks.catch_up_approvals();
    loop {
        let event = tokio::select! {
            biased;
            event = rx.recv() => event,
            _ = shutdown.cancelled() => return,
        };
        match event {
            Ok(event) => hooks.on_event(&event),
            Err(RecvError::Lagged(n)) => {
                warn!(
                    missed = n,
                    "webhook dispatch fell behind the event bus; catching up from the pending calls"
                );
                hooks.catch_up();
                hooks.catch_up_approvals();
            }
            Err(RecvError::Closed) => return,
        }
    }
}

impl Webhooks {
    fn on_event(self: &Arc<Self>, event: &Event) {
        match event.kind {
            kind::REQUEST => match serde_json::from_str::<Request>(&event.full) {
                Ok(request) => self.dispatch(&request, Bytes::from(event.full.clone())),
                Err(e) => warn!(error = %e, "unreadable request event"),
            },
            kind::APPROVAL_REQUESTED => {
                match serde_json::from_str::<AwaitingApproval>(&event.full) {
                    Ok(asked) => self.ask_approvers(&asked, Bytes::from(event.full.clone())),
                    Err(e) => warn!(error = %e, "unreadable approval request"),
                }
            }
            kind::CANCELLED => match serde_json::from_str::<CancelledEvent>(&event.full) {
                Ok(cancelled) => self.cancelled(&cancelled, Bytes::from(event.full.clone())),
                Err(e) => warn!(error = %e, "unreadable cancel event"),
            },
            _ => {}
        }
    }

    /// After missing events: every parked call of a webhook's group not yet being delivered.
    fn catch_up(self: &Arc<Self>) {
        for p in self.broker.pending() {
            if p.claimed_by.is_some() || self.lock().calls.contains_key(&p.id) {
                continue;
            }
            // The pending entry is the call's own request, its `traceparent` included.
            let request = p.request;
            let body = serde_json::to_vec(&request).unwrap_or_default();
            self.dispatch(&request, Bytes::from(body));
        }
    }

    /// Starts the delivery of `request` if a webhook serves its group.
    fn dispatch(self: &Arc<Self>, request: &Request, body: Bytes) {
        let mut guard = self.lock();
        let state = &mut *guard;
        // Calls that ended since: a deferred call settled through the result route publishes
        // no event, so the list is pruned here.
        let broker = &self.broker;
        state.calls.retain(|id, _| broker.is_live(id));
        let chosen = state
            .hooks
            .values()
            .filter(|h| h.stored.group == request.group)
            .find(|h| {
                request
                    .owner
                    .as_ref()
                    .is_none_or(|o| *o == h.stored.client_id)
            });
        let Some(hook) = chosen else {
            return;
        };
        let hook_name = hook.stored.name.clone();
        let stop = broker.shutdown_token().child_token();
        let task = CallTask {
            hooks: self.clone(),
            name: hook.stored.name.clone(),
            client_id: hook.stored.client_id.clone().into(),
            owner: hook.stored.owner.clone(),
            target: hook.target.clone(),
            key: hook.key.clone(),
            id: request.id.clone(),
            deadline: request
                .timeout_s
                .map(|s| Instant::now() + Duration::from_secs(s)),
            stop: stop.clone(),
        };
        state.calls.insert(
            request.id.clone(),
            Delivery {
                hook: hook_name,
                stop,
            },
        );
        let span = info_span!("webhook_delivery", request = %request.id, webhook = %task.name);
        broker.tasks().spawn(task.deliver(body).instrument(span));
    }

    /// Every call awaiting approval, delivered to the approvers' webhooks (again, with the same
    /// `webhook-id`, to one that had it: a receiver dedupes by it).
    fn catch_up_approvals(self: &Arc<Self>) {
        let Ok(list) = self.broker.approvals("operator") else {
            return;
        };
        for asked in list.approvals {
            let body = serde_json::to_vec(&asked).unwrap_or_default();
            self.ask_approvers(&asked, Bytes::from(body));
        }
    }

    /// Delivers an approval request to every approver's webhook whose owner may decide it
    /// (an approver now, and not the call's own agent), each until it answers `2xx`, the call
    /// no longer awaits approval, or the approval expires.
    fn ask_approvers(self: &Arc<Self>, asked: &AwaitingApproval, body: Bytes) {
        let approvals = &self.broker.config().approvals;
        let own = format!("device:{}", asked.agent);
        let expires = leo_protocol::time::parse_rfc3339(&asked.expires_at)
            .and_then(|at| at.duration_since(std::time::SystemTime::now()).ok())
            .unwrap_or(RETRY_CAP);
        let state = self.lock();
        for hook in state.hooks.values().filter(|h| h.stored.approvals) {
            if !approvals.may_approve(&hook.stored.owner) || hook.stored.owner == own {
                continue;
            }
            let task = CallTask {
                hooks: self.clone(),
                name: hook.stored.name.clone(),
                client_id: ClientId::from(String::new()),
                owner: hook.stored.owner.clone(),
                target: hook.target.clone(),
                key: hook.key.clone(),
                id: asked.id.clone(),
                deadline: Some(Instant::now() + expires),
                stop: self.broker.shutdown_token().child_token(),
            };
            let span = info_span!("approval_delivery", request = %asked.id, webhook = %task.name);
            self.broker
                .tasks()
                .spawn(task.deliver_approval(body.clone()).instrument(span));
        }
    }

    /// The call ended without a result: stop its deliveries and tell the app.
    fn cancelled(self: &Arc<Self>, cancelled: &CancelledEvent, body: Bytes) {
        let mut state = self.lock();
        let Some(delivery) = state.calls.remove(&cancelled.id) else {
            return;
        };
        delivery.stop.cancel();
        let Some(hook) = state.hooks.get(&delivery.hook) else {
            return;
        };
        let task = CallTask {
            hooks: self.clone(),
            name: hook.stored.name.clone(),
            client_id: hook.stored.client_id.clone().into(),
            owner: hook.stored.owner.clone(),
            target: hook.target.clone(),
            key: hook.key.clone(),
            id: cancelled.id.clone(),
            deadline: Some(Instant::now() + CANCEL_RETRY_FOR),
            stop: self.broker.shutdown_token().child_token(),
        };
        let span = info_span!("webhook_cancel", request = %cancelled.id, webhook = %task.name, reason = cancelled.reason.as_str());
        self.broker
            .tasks()
            .spawn(task.deliver_cancel(body).instrument(span));
    }
}

/// What a delivery task needs, copied out of the webhook when it starts.
struct CallTask {
    hooks: Arc<Webhooks>,
    name: String,
    client_id: ClientId,
    /// The principal that created the webhook: its inline answers act as it.
    owner: String,
    target: Result<Target, UrlRefused>,
    key: Arc<[u8]>,
    id: RequestId,
    deadline: Option<Instant>,
    stop: CancellationToken,
}

impl CallTask {
    /// Delivers `client_tool.request` until it is answered, accepted, or may not be tried
    /// again.
    async fn deliver(self, body: Bytes) {
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP).jittered();
        let mut tries = 0u32;
        loop {
            tries += 1;
            // Not cut short when the call ends meanwhile: the app's answer, late, is still
            // read (bounded by the timeouts), refused by the core and logged.
            let sent = self.send(&self.id, kind::REQUEST, body.clone()).await;
            match self.take(sent).await {
                Attempt::Done => return,
                Attempt::Deferred => {
                    debug!("delivery accepted; the app answers later");
                    return;
                }
                Attempt::Failed(why) => {
                    info!(tries, error = %why, "delivery failed");
                    self.hooks.record(&self.name, Some(why));
                }
            }
            if !self.wait(backoff.next_delay()).await || !self.hooks.broker.is_parked(&self.id) {
                return;
            }
        }
    }

    /// Delivers `client_tool.approval_requested` to an approver's webhook until it answers
    /// `2xx` (it decides later, over the approval routes), while the call awaits approval.
    async fn deliver_approval(self, body: Bytes) {
        let id = format!("{}{APPROVAL_SUFFIX}", self.id);
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP).jittered();
        loop {
            let failure = match self.send(&id, kind::APPROVAL_REQUESTED, body.clone()).await {
                Ok(answer) if (200..300).contains(&answer.status) => {
                    debug!("approval request delivered");
                    self.hooks.record(&self.name, None);
                    return;
                }
                Ok(answer) => format!("the approval request was answered HTTP {}", answer.status),
                Err(why) => leo_protocol::chain::error_chain(&why),
            };
            info!(error = %failure, "approval request delivery failed");
            self.hooks.record(&self.name, Some(failure));
            if !self.wait(backoff.next_delay()).await || !self.hooks.broker.is_awaiting(&self.id) {
                return;
            }
        }
    }

    /// Delivers `client_tool.cancelled`, for a bounded time.
    async fn deliver_cancel(self, body: Bytes) {
        let id = format!("{}{CANCELLED_SUFFIX}", self.id);
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP).jittered();
        loop {
            let sent = tokio::select! {
                sent = self.send(&id, kind::CANCELLED, body.clone()) => sent,
                _ = self.stop.cancelled() => return,
            };
            match sent {
                Ok(answer) if (200..300).contains(&answer.status) => {
                    debug!("cancellation delivered");
                    self.hooks.record(&self.name, None);
                    return;
                }
                Ok(answer) => {
                    let why = format!("the cancellation was answered HTTP {}", answer.status);
                    self.hooks.record(&self.name, Some(why));
                }
                Err(why) => {
                    let why = leo_protocol::chain::error_chain(&why);
                    self.hooks.record(&self.name, Some(why));
                }
            }
            if !self.wait(backoff.next_delay()).await {
                warn!("the cancellation could not be delivered");
                return;
            }
        }
    }

    /// Sleeps `delay` unless the deadline comes first or the task is stopped; false then.
    async fn wait(&self, delay: Duration) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() + delay >= d) {
            debug!("no time for another try before the call's deadline");
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = self.stop.cancelled() => false,
        }
    }

    async fn send(
        &self,
        id: &str,
        event: &'static str,
        body: Bytes,
    ) -> Result<deliver::Answer, deliver::DeliveryError> {
        let target = self
            .target
            .as_ref()
            .map_err(|e| deliver::DeliveryError::Refused(e.clone()))?;
        let message = Message { id, event, body };
        deliver::send(target, &self.key, &message, self.hooks.max_answer).await
    }

    /// Takes the app's answer: `200` settles the call in one step, `202` defers it.
    async fn take(&self, sent: Result<deliver::Answer, deliver::DeliveryError>) -> Attempt {
        let answer = match sent {
            Ok(answer) => answer,
            Err(why) => return Attempt::Failed(leo_protocol::chain::error_chain(&why)),
        };
        match answer.status {
            202 => {
                self.hooks.record(&self.name, None);
                Attempt::Deferred
            }
            200 => self.settle(&answer.body).await,
            other => Attempt::Failed(format!("the app answered HTTP {other}")),
        }
    }

    /// Claims and settles the call with the app's inline answer, through the result route's
    /// own operation, so the call still ends exactly once.
    async fn settle(&self, body: &[u8]) -> Attempt {
        let answer: InlineAnswer = match leo_protocol::envelope::parse_json(body) {
            Ok(a) => a,
            Err(e) => return Attempt::Failed(format!("the app's answer is not an answer: {e}")),
        };
        let hooks = &self.hooks;
        let result = answer.into_result(&self.client_id);
        let detail = format!(
            "{} {}",
            self.client_id,
            if result.ok { "ok" } else { "error" }
        );
        let settled = hooks
            .broker
            .post_result(&self.id, result, &self.owner)
            .await;
        match settled {
            Ok(_) => {
                // The change is the webhook's (its signed delivery's answer), not a token's.
                let who = (format!("webhook:{}", self.name), "webhook");
                let history = hooks.broker.history();
                history.audit(who, "result", Some(&self.id), Some(detail));
                hooks.lock().calls.remove(&self.id);
                debug!("settled by the inline answer");
                hooks.record(&self.name, None);
                Attempt::Done
            }
            Err(r) => match r.code {
                ErrorCode::InvalidResult | ErrorCode::ResultTooLarge => {
                    Attempt::Failed(format!("the app's answer was refused: {}", r.message))
                }
                _ => {
                    // The call ended, or another app has it: the answer came too late.
                    hooks.lock().calls.remove(&self.id);
                    info!(code = r.code.as_str(), error = %r.message, "late inline answer ignored");
                    hooks.record(&self.name, None);
                    Attempt::Done
                }
            },
        }
    }
}
