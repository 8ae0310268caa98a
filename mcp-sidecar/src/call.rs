//! One forwarded call, from `tools/call` to its result.
//!
//! The call goes to the broker and the handler waits for exactly one of: the broker's result
//! (content, app error, timeout, withdrawal…), the connection dropping (`no_client`), or the
//! harness cancelling, in which case the broker is told with a `cancel` frame (the app then
//! sees `client_tool.cancelled`, reason `cancelled_by_agent`). Meanwhile the app's progress
//! reaches the harness (or the sidecar's own keep-alive while the app is quiet), and the app's
//! questions become `elicitation/create` requests (see `elicit`), ended with the call.
//! A call refused because no app serves its tool, soon after the connection came back from a
//! loss (a broker's restart, a cluster's takeover), is made again once the tool is listed or
//! after a short pause, until the ride-out is over (`run`): the new broker may not have its apps
//! back yet. The sidecar adds no timeout of its own: `timeout_s: 0` tools are handoffs that may wait for
//! days, and the broker ends everything else.

use std::future::Future;
use std::time::Duration;

use leo_protocol::backoff::Backoff;
use leo_protocol::codes::is_unserved;
use leo_protocol::ipc::{InputOutcome, Outcome};
use leo_protocol::sampling::SampleOutcome;
use rmcp::model::{CallToolResult, ProgressToken, RequestId};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::debug;

use crate::elicit;
use crate::link::{BrokerLink, CallEvent, CallEvents};
use crate::logging::{self, LogFilter};
use crate::outcome;
use crate::outcome::Ending;
use crate::progress::Ticker;
use crate::sampling;

/// The first pause before a call refused just after a reconnect is made again (unless its tool
/// is listed sooner); it doubles up to `AGAIN_CAP`.
const AGAIN_FIRST: Duration = Duration::from_millis(250);
const AGAIN_CAP: Duration = Duration::from_secs(2);
/// The shortest pause before such a call is made again, even with its tool listed.
const AGAIN_MIN: Duration = Duration::from_millis(50);

/// Forwards `tool(arguments)` and waits for its end.
pub async fn forward(
    link: &BrokerLink,
    tool: &str,
    arguments: Value,
    ctx: &RequestContext<RoleServer>,
    progress_every: Duration,
) -> CallToolResult {
    let harness = Harness::of(ctx, progress_every);
    match run(link, tool, arguments, harness, ctx.ct.cancelled()).await {
        Ended::Result(result) => result,
        // rmcp does not answer a cancelled request; this result is never sent.
        Ended::Cancelled => outcome::tool_error("cancelled", "the harness cancelled the call"),
        Ended::Asks(asked) => {
            link.answer_input(asked.input, crate::elicit::unsupported(ctx));
            outcome::tool_error(
                "input_unsupported",
                "the call asked a question no one can answer",
            )
        }
    }
}

/// Who a call reports to: the harness, and the progress token of its request (if any).
pub struct Harness<'a> {
    pub peer: &'a Peer<RoleServer>,
    pub progress: Option<ProgressToken>,
    pub progress_every: Duration,
    /// A 2026-07-28 request: a question ends the request with `input_required` (`mrtr`)
    /// instead of an `elicitation/create` request.
    pub asks_by_result: bool,
    /// The request whose stream its questions travel on (over Streamable HTTP, the call's own
    /// response stream, which a client reads where it may never open the standalone one).
    pub origin: Option<RequestId>,
    /// The session's `logging/setLevel`, which the app's log messages pass through.
    pub log: LogFilter,
}

impl<'a> Harness<'a> {
    /// The harness of request `ctx`.
    pub fn of(ctx: &'a RequestContext<RoleServer>, progress_every: Duration) -> Harness<'a> {
        Harness {
            peer: &ctx.peer,
            progress: ctx.meta.get_progress_token(),
            progress_every,
            asks_by_result: crate::mrtr::stateless(ctx),
            origin: Some(ctx.id.clone()),
            log: LogFilter::default(),
        }
    }

    /// With the session's log level (or, in 2026-07-28, the request's own).
    pub fn logging(mut self, session: &LogFilter, ctx: &RequestContext<RoleServer>) -> Harness<'a> {
        self.log = logging::for_request(session, ctx);
        self
    }
}

/// A call sent to the broker and not ended yet.
#[derive(Debug)]
pub struct Live {
    pub id: u64,
    rx: oneshot::Receiver<Ending>,
    events: CallEvents,
}

/// A question the app asked during a 2026-07-28 request, with the call it belongs to.
#[derive(Debug)]
pub struct Asked {
    pub live: Live,
    pub input: u64,
    pub message: String,
    pub requested_schema: Value,
}

/// How a forwarded call ended, or stopped to ask.
pub enum Ended {
    Result(CallToolResult),
    /// The harness cancelled it (the broker was told).
    Cancelled,
    /// The app asked a question that travels as an `input_required` result.
    Asks(Box<Asked>),
}

/// `forward`, with the cancellation signal given: the request's own, or a task's
/// `tasks/cancel` (see `task`).
///
/// A call refused because no connected app serves its tool is made again while the connection
/// is back from a loss within `RIDE_OUT` of it (`BrokerLink::rejoining`): the broker it now
/// talks to (restarted, or a cluster's new leader) may not have its apps back yet. It waits
/// for the tool to be listed, or a short pause, and sends the call again. That is safe because
/// the broker refuses such a call before it records or parks anything (`Broker::call` checks
/// `permitted` before `park`; a follower pipes the session to the leader, which does the
/// same), so the refused call changed nothing. Outside that window the refusal is the answer
/// at once: a call to a tool nobody serves does not wait.
pub async fn run(
    link: &BrokerLink,
    tool: &str,
    mut arguments: Value,
    harness: Harness<'_>,
    cancelled: impl Future<Output = ()>,
) -> Ended {
    tokio::pin!(cancelled);
    let mut pause = Backoff::new(AGAIN_FIRST, AGAIN_CAP);
    loop {
        tokio::select! {
            () = link.back_within(crate::link::RIDE_OUT) => {}
            () = &mut cancelled => return Ended::Cancelled,
        }
        // Kept only when a refusal may be followed by the same call again.
        let again = link
            .rejoining(crate::link::RIDE_OUT)
            .map(|_| arguments.clone());
        let live = match link.start_live_call(tool, std::mem::take(&mut arguments)) {
            Ok((id, rx, events)) => Live { id, rx, events },
            Err(reason) => return Ended::Result(outcome::tool_error("no_client", &reason)),
        };
        let refused = match follow(link, live, &harness, &mut cancelled).await {
            Followed::Ended(ended) => return ended,
            Followed::Unserved(refused) => refused,
        };
        let (Some(kept), Some(until)) = (again, link.rejoining(crate::link::RIDE_OUT)) else {
            return Ended::Result(outcome::to_result(refused));
        };
        debug!(
            tool,
            "no app serves the tool yet after a reconnect; calling again soon"
        );
        arguments = kept;
        tokio::select! {
            () = listed_or_after(link, tool, pause.next_delay(), until) => {}
            () = &mut cancelled => {
                debug!(tool, "cancelled while waiting to call again");
                return Ended::Cancelled;
            }
        }
    }
}

/// Returns once `tool` is listed (at the earliest after `AGAIN_MIN`, so a tool listed yet
/// refused is not called in a tight loop), or after `pause`, or at `until`.
async fn listed_or_after(link: &BrokerLink, tool: &str, pause: Duration, until: Instant) {
    let end = (Instant::now() + pause).min(until);
    let mut views = link.subscribe();
    tokio::time::sleep_until((Instant::now() + AGAIN_MIN).min(end)).await;
    let listed = views.wait_for(|v| v.tools.iter().any(|t| t.name == tool));
    let _ = tokio::time::timeout_at(end, listed).await;
}

/// How following a call ended: as the harness will see it, or refused because no app serves
/// its tool (which `run` may make again).
enum Followed {
    Ended(Ended),
    Unserved(Ending),
}

/// Waits for a live call's end, relaying what the app sends meanwhile.
pub async fn wait(
    link: &BrokerLink,
    live: Live,
    harness: Harness<'_>,
    cancelled: impl Future<Output = ()>,
) -> Ended {
    match follow(link, live, &harness, cancelled).await {
        Followed::Ended(ended) => ended,
        Followed::Unserved(refused) => Ended::Result(outcome::to_result(refused)),
    }
}

/// `wait`, telling the refusal of an unserved tool apart.
async fn follow(
    link: &BrokerLink,
    mut live: Live,
    harness: &Harness<'_>,
    cancelled: impl Future<Output = ()>,
) -> Followed {
    tokio::pin!(cancelled);
    let id = live.id;
    let peer = harness.peer;
    let mut ticker = Ticker::new(harness.progress.clone(), harness.progress_every);
    // Questions asked of the user, each answered when its harness request ends; dropping the
    // set (the call ended) aborts those still open.
    let mut questions: JoinSet<(u64, InputOutcome)> = JoinSet::new();
    // Sampling requests, likewise.
    let mut samples: JoinSet<(u64, SampleOutcome)> = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            // Events first: the broker writes a call's progress before its result, and a
            // report already here must reach the harness before the call's answer.
            Some(event) = live.events.recv() => match event {
                CallEvent::Progress { progress, total, message } => {
                    if let Some(p) = ticker.app_reported(progress, total, message) {
                        debug!(call = id, progress = p.progress, "app progress");
                        if peer.notify_progress(p).await.is_err() {
                            debug!(call = id, "cannot send progress; the client may be gone");
                        }
                    }
                }
                CallEvent::Input { input, message, requested_schema } if harness.asks_by_result => {
                    let asked = Asked { live, input, message, requested_schema };
                    return Followed::Ended(Ended::Asks(Box::new(asked)));
                }
                CallEvent::Input { input, message, requested_schema } => {
                    match elicit::prepare(peer, harness.origin.clone(), message, requested_schema) {
                        Ok(ask) => {
                            questions.spawn(async move { (input, ask.await) });
                        }
                        Err(refused) => link.answer_input(input, refused),
                    }
                }
                CallEvent::Log { level, logger, data } => {
                    if harness.log.passes(level) {
                        let note = logging::notification(level, logger, data);
                        logging::send(peer, harness.origin.clone(), note).await;
                    }
                }
                CallEvent::Sample { sample, .. } if harness.asks_by_result => {
                    link.answer_sample(sample, sampling::unsupported(peer));
                }
                CallEvent::Sample { sample, params } => {
                    match sampling::prepare(peer, harness.origin.clone(), params) {
                        Ok(ask) => {
                            samples.spawn(async move { (sample, ask.await) });
                        }
                        Err(refused) => link.answer_sample(sample, refused),
                    }
                }
            },
            ended = &mut live.rx => return ending(ended),
            () = &mut cancelled => {
                link.cancel(id);
                return Followed::Ended(Ended::Cancelled);
            }
            Some(answered) = questions.join_next(), if !questions.is_empty() => {
                if let Ok((input, outcome)) = answered {
                    link.answer_input(input, outcome);
                }
            }
            Some(answered) = samples.join_next(), if !samples.is_empty() => {
                if let Ok((sample, outcome)) = answered {
                    link.answer_sample(sample, outcome);
                }
            }
            progress = ticker.tick() => {
                debug!(call = id, progress = progress.progress, "progress");
                if peer.notify_progress(progress).await.is_err() {
                    debug!(call = id, "cannot send progress; the client may be gone");
                }
            }
        }
    }
}

/// A call's ending, the refusal of an unserved tool told apart.
fn ending(ended: Result<Ending, oneshot::error::RecvError>) -> Followed {
    match ended {
        Ok(Outcome::Error { error }) if is_unserved(&error.code, &error.message) => {
            Followed::Unserved(Outcome::Error { error })
        }
        Ok(o) => Followed::Ended(Ended::Result(outcome::to_result(o))),
        // The sender is only dropped by `fail_all`, which sends first; be safe anyway.
        Err(_) => Followed::Ended(Ended::Result(outcome::tool_error(
            "no_client",
            crate::link::CONNECTION_LOST,
        ))),
    }
}
