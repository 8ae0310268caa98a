//! One forwarded call, from `tools/call` to its result.
//!
//! The call goes to the broker and the handler waits for exactly one of: the broker's result
//! (content, app error, timeout, withdrawal…), the connection dropping (`no_client`), or the
//! harness cancelling, in which case the broker is told with a `cancel` frame (the app then
//! sees `client_tool.cancelled`, reason `cancelled_by_agent`). Meanwhile the app's progress
//! reaches the harness (or the sidecar's own keep-alive while the app is quiet), and the app's
//! questions become `elicitation/create` requests (see `elicit`), ended with the call.
//! The sidecar adds no timeout of its own: `timeout_s: 0` tools are handoffs that may wait for
//! days, and the broker ends everything else.

use std::future::Future;
use std::time::Duration;

use leo_protocol::ipc::InputOutcome;
use leo_protocol::sampling::SampleOutcome;
use rmcp::model::{CallToolResult, ProgressToken, RequestId};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tracing::debug;

use crate::elicit;
use crate::link::{BrokerLink, CallEvent, CallEvents};
use crate::logging::{self, LogFilter};
use crate::outcome;
use crate::outcome::Ending;
use crate::progress::Ticker;
use crate::sampling;

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
pub async fn run(
    link: &BrokerLink,
    tool: &str,
    arguments: Value,
    harness: Harness<'_>,
    cancelled: impl Future<Output = ()>,
) -> Ended {
    tokio::pin!(cancelled);
    tokio::select! {
        () = link.back_within(crate::link::RIDE_OUT) => {}
        () = &mut cancelled => return Ended::Cancelled,
    }
    match link.start_live_call(tool, arguments) {
        Ok((id, rx, events)) => wait(link, Live { id, rx, events }, harness, cancelled).await,
        Err(reason) => Ended::Result(outcome::tool_error("no_client", &reason)),
    }
}

/// Waits for a live call's end, relaying what the app sends meanwhile.
pub async fn wait(
    link: &BrokerLink,
    mut live: Live,
    harness: Harness<'_>,
    cancelled: impl Future<Output = ()>,
) -> Ended {
    tokio::pin!(cancelled);
    let id = live.id;
    let peer = harness.peer;
    let mut ticker = Ticker::new(harness.progress, harness.progress_every);
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
                    return Ended::Asks(Box::new(Asked { live, input, message, requested_schema }));
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
            ended = &mut live.rx => {
                return Ended::Result(match ended {
                    Ok(o) => outcome::to_result(o),
                    // The sender is only dropped by `fail_all`, which sends first; be safe anyway.
                    Err(_) => outcome::tool_error("no_client", crate::link::CONNECTION_LOST),
                });
            }
            () = &mut cancelled => {
                link.cancel(id);
                return Ended::Cancelled;
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
