//! What a claimant sends its caller while a call is live: progress, questions for the user,
//! and the check of a result's structured content against the tool's `output_schema`.
//!
//! Progress and questions go to the one sidecar session that made the call, as `progress` and
//! `input` frames on that session's outbox (registered by `ipc` when the session starts). A
//! question's HTTP request waits for the sidecar's `input_answer`, for the call to end, or for
//! the call's deadline, whichever comes first; nothing here awaits under the core lock.
//! Log messages and sampling requests (`sample`) take the same road with the same rules.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use leo_protocol::ErrorCode;
use leo_protocol::content::Posted;
use leo_protocol::input::{InputAnswer, InputBody, InputOutcome, ProgressBody, sanitized_question};
use leo_protocol::ipc::BrokerFrame;
use leo_protocol::requests::{AckState, RequestAck};
use leo_protocol::sampling::SampleOutcome;
use leo_protocol::sanitize::{Lines, sanitize};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::{Broker, Core};
use crate::refusal::Refusal;
use crate::requests::{Call, ConnId, Stage};
use leo_protocol::lines::encode_frame as encode_line;

/// The sessions' outboxes and the questions waiting for an answer.
#[derive(Debug, Default)]
pub struct Relay {
    state: Mutex<RelayState>,
}

#[derive(Debug, Default)]
pub(super) struct RelayState {
    outboxes: HashMap<ConnId, mpsc::Sender<Bytes>>,
    /// Questions by their number: the session asked, and the waiter.
    inputs: HashMap<u64, (ConnId, oneshot::Sender<InputOutcome>)>,
    next_input: u64,
    /// Sampling requests by their number, likewise (`sample`).
    pub(super) samples: HashMap<u64, (ConnId, oneshot::Sender<SampleOutcome>)>,
    pub(super) next_sample: u64,
}

impl Relay {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, RelayState> {
        // Each section is one insert or remove; a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a live call's frames go: its session and the sidecar's id of the call, and when the
/// call times out.
pub(super) struct Route {
    pub(super) conn: ConnId,
    pub(super) local_id: u64,
    deadline: Option<std::time::Instant>,
}

/// Removes a question's waiter however its HTTP request ends (answered, the call ended, the
/// client went away).
struct Forget<'a> {
    relay: &'a Relay,
    input: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.relay.lock().inputs.remove(&self.input);
    }
}

impl Broker {
    /// `ipc` registers a session's frame queue, so calls' progress and questions reach it.
    pub fn attach_outbox(&self, conn: ConnId, outbox: mpsc::Sender<Bytes>) {
        self.relay.lock().outboxes.insert(conn, outbox);
    }

    /// The session ended: its queue is gone, and its unanswered questions end with the calls.
    pub fn detach_outbox(&self, conn: ConnId) {
        let mut relay = self.relay.lock();
        relay.outboxes.remove(&conn);
        relay.inputs.retain(|_, (c, _)| *c != conn);
        relay.samples.retain(|_, (c, _)| *c != conn);
    }

    /// The outbox of session `conn`, while it is connected.
    pub(super) fn outbox(&self, conn: ConnId) -> Option<mpsc::Sender<Bytes>> {
        self.relay.lock().outboxes.get(&conn).cloned()
    }

    /// Queues `line` for the sessions `conns`; a session too busy to take it misses it (what
    /// is pushed this way is a hint its sidecar can do without: a change to list again).
    pub(super) fn push_to(&self, conns: &[ConnId], line: &Bytes) {
        let relay = self.relay.lock();
        for conn in conns {
            if let Some(outbox) = relay.outboxes.get(conn)
                && outbox.try_send(line.clone()).is_err()
            {
                debug!(conn, "session busy; pushed frame dropped");
            }
        }
    }

    /// Queues `line` for session `conn`, waiting for room; false when the session is gone.
    pub(super) async fn send_to(&self, conn: ConnId, line: Bytes) -> bool {
        let outbox = self.relay.lock().outboxes.get(&conn).cloned();
        match outbox {
            Some(outbox) => outbox.send(line).await.is_ok(),
            None => false,
        }
    }

    /// The live call `id`, if `client_id` is `caller`'s connected provider that claimed it.
    pub(super) fn claimed_route(
        core: &Core,
        id: &str,
        client_id: &str,
        caller: &str,
    ) -> Result<Route, Refusal> {
        Self::require_provider(core, client_id, caller)?;
        let Some((call, stage)) = core.requests.get(id) else {
            return Err(core.requests.not_live(id));
        };
        match stage {
            Stage::Claimed { by } if by == client_id => Ok(route_of(call)),
            Stage::Claimed { by } => Err(Refusal::new(
                ErrorCode::NotClaimant,
                format!("request {id} is claimed by client {by}, not {client_id}"),
            )),
            Stage::Awaiting(_) => Err(Refusal::new(
                ErrorCode::UnknownRequest,
                format!("no request {id}"),
            )),
            Stage::Parked => Err(Refusal::new(
                ErrorCode::NotClaimant,
                format!("request {id} is not claimed; claim it first"),
            )),
        }
    }

    /// `POST …/requests/{id}/progress`: passes the claimant's progress to the caller's session.
    /// A session too busy to take it drops the report: the next one supersedes it anyway.
    pub fn report_progress(
        &self,
        id: &str,
        body: ProgressBody,
        caller: &str,
    ) -> Result<RequestAck, Refusal> {
        body.check()
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, m))?;
        let route = Self::claimed_route(&self.lock(), id, &body.client_id, caller)?;
        let frame = BrokerFrame::Progress {
            id: route.local_id,
            progress: body.progress,
            total: body.total,
            message: body
                .message
                .as_deref()
                .map(|m| sanitize(m, Lines::Join).into_owned()),
        };
        Ok(self.advise(id, &route, &frame))
    }

    /// Passes advice (progress, a log message) to `route`'s session; a session too busy to
    /// take it drops it.
    pub(super) fn advise(&self, id: &str, route: &Route, frame: &BrokerFrame) -> RequestAck {
        if let Some(outbox) = self.outbox(route.conn)
            && outbox.try_send(encode_line(frame)).is_err()
        {
            debug!(request = id, "session busy; advice dropped");
        }
        RequestAck {
            id: id.to_owned().into(),
            state: AckState::Claimed,
        }
    }

    /// Sends a request (a question, a sampling request) to `route`'s session and waits for
    /// its answer on `rx`, the call's end or its deadline.
    pub(super) async fn send_and_wait<T>(
        &self,
        id: &str,
        route: &Route,
        frame: &BrokerFrame,
        rx: oneshot::Receiver<T>,
    ) -> Result<T, Refusal> {
        let sent = match self.outbox(route.conn) {
            Some(outbox) => outbox.send(encode_line(frame)).await.is_ok(),
            None => false,
        };
        if !sent {
            return Err(Refusal::new(
                ErrorCode::NoClient,
                "the agent's session is gone",
            ));
        }
        debug!(request = id, "sent to the harness");
        self.wait_answer(id, route, rx).await
    }

    /// `POST …/requests/{id}/input`: asks the agent's user through the harness and waits for
    /// the answer, at most until the call ends or times out.
    pub async fn ask_input(
        &self,
        id: &str,
        body: InputBody,
        caller: &str,
    ) -> Result<InputAnswer, Refusal> {
        body.check()
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, m))?;
        let route = Self::claimed_route(&self.lock(), id, &body.client_id, caller)?;
        let (tx, rx) = oneshot::channel();
        let input = {
            let mut relay = self.relay.lock();
            relay.next_input += 1;
            let input = relay.next_input;
            relay.inputs.insert(input, (route.conn, tx));
            input
        };
        let _forget = Forget {
            relay: &self.relay,
            input,
        };
        let (message, requested_schema) = sanitized_question(&body.message, body.requested_schema);
        let frame = BrokerFrame::Input {
            id: route.local_id,
            input,
            message,
            requested_schema,
        };
        match self.send_and_wait(id, &route, &frame, rx).await? {
            InputOutcome::Answer(a) => Ok(a),
            InputOutcome::Refused { error } => Err(refusal_of(error)),
        }
    }

    /// The sidecar's answer on `rx`, or the call's end, or its deadline, whichever comes first.
    async fn wait_answer<T>(
        &self,
        id: &str,
        route: &Route,
        mut rx: oneshot::Receiver<T>,
    ) -> Result<T, Refusal> {
        let mut changes = self.watch_changes();
        let deadline = async {
            match route.deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                answer = &mut rx => return match answer {
                    Ok(answer) => Ok(answer),
                    // The session ended; so did the call.
                    Err(_) => Err(self.lock().requests.not_live(id)),
                },
                () = &mut deadline => return Err(Refusal::new(
                    ErrorCode::Timeout,
                    format!("no answer before request {id} timed out"),
                )),
                changed = changes.changed() => {
                    if changed.is_err() || self.lock().requests.get(id).is_none() {
                        return Err(self.lock().requests.not_live(id));
                    }
                }
            }
        }
    }

    /// The sidecar of session `conn` answered question `input`.
    pub fn input_answered(&self, conn: ConnId, input: u64, outcome: InputOutcome) {
        let mut relay = self.relay.lock();
        match relay.inputs.get(&input) {
            Some((c, _)) if *c == conn => {
                if let Some((_, tx)) = relay.inputs.remove(&input) {
                    let _ = tx.send(outcome);
                }
            }
            _ => debug!(input, "answer to a question nobody waits for"),
        }
    }

    /// A result for a tool with an `output_schema` must carry `structured_content` that
    /// matches it; the first faults are named with their JSON paths.
    pub(super) fn check_output(core: &Core, id: &str, posted: &Posted) -> Result<(), Refusal> {
        let Some((call, _)) = core.requests.get(id) else {
            return Ok(()); // settle answers not_live
        };
        let Some(visible) = core.registry.visible(&call.tool) else {
            return Ok(());
        };
        let Some(validator) = visible
            .spec
            .output
            .as_ref()
            .filter(|_| visible.spec.group == call.group)
        else {
            return Ok(());
        };
        let structured = match posted {
            Posted::Structured(_, s) => s,
            Posted::Content(_) => {
                return Err(Refusal::new(
                    ErrorCode::InvalidResult,
                    format!(
                        "at $.structured_content: required, tool {:?} has an output_schema",
                        call.tool
                    ),
                ));
            }
            Posted::Error(_) => return Ok(()),
        };
        let faults: Vec<String> = validator
            .iter_errors(structured)
            .take(3)
            .map(|e| {
                let path = super::calls::pointer_to_path(e.instance_path().as_str());
                format!(
                    "at $.structured_content{}: {e}",
                    path.strip_prefix('$').unwrap_or(&path)
                )
            })
            .collect();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(Refusal::new(ErrorCode::InvalidResult, faults.join("; ")))
        }
    }
}

fn route_of(call: &Call) -> Route {
    Route {
        conn: call.conn,
        local_id: call.local_id,
        deadline: call
            .timeout_s
            .map(|s| call.parked_at + Duration::from_secs(s)),
    }
}

/// The sidecar's refusal of a question, with the code it named (`input_unsupported`, or
/// `invalid_parameter` for a form the harness's SDK could not read).
pub(super) fn refusal_of(error: leo_protocol::content::AppError) -> Refusal {
    let code = match error.code.as_str() {
        "input_unsupported" => ErrorCode::InputUnsupported,
        "invalid_parameter" => ErrorCode::InvalidParameter,
        "cancelled" => ErrorCode::Cancelled,
        _ => ErrorCode::NoClient,
    };
    Refusal::new(code, error.message)
}
