//! `GET /api/v1/events`: the SSE stream.
//!
//! A stream is `hello` (not numbered), then the events after `Last-Event-ID` that the ring
//! still holds, then live events. Provider streams see requests in full; others see ids. When
//! the stream ends for any reason its `ClientGuard` drops, which withdraws the client's tools.
//! A forwarder task per stream applies the slow-stream rule described in `crate::events`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use leo_protocol::ErrorCode;
use leo_protocol::events::{NAME_PARAM, check_app_name, kind};
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::reply::query_flags;
use crate::core::{Broker, ClientGuard};
use crate::events::{Event, STREAM_BACKLOG_BYTES};
use crate::refusal::Refusal;
use crate::tokens::Principal;

/// Comment lines that keep proxies and clients from timing the stream out.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// At shutdown, how long a stream may wait for events published before it.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(1);

struct Stream {
    hello: Option<String>,
    queue: mpsc::UnboundedReceiver<Arc<Event>>,
    backlog: Arc<AtomicUsize>,
    provider: bool,
    /// Whether the stream's principal may decide approvals: only such a plain stream is sent
    /// `client_tool.approval_requested` (an app never learns of a call before approval).
    approver: bool,
    shutdown: CancellationToken,
    broker: Arc<Broker>,
    /// The seq of the last event sent on this stream.
    sent: u64,
    /// Set at shutdown: the last seq this stream still owes its client.
    owed: Option<u64>,
    _forwarder: AbortOnDrop,
    _guard: ClientGuard,
}

/// Stops the forwarder when the stream goes.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub async fn stream(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    forwarded: Option<Extension<crate::cluster::gate::Forwarded>>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, Refusal> {
    let (name, flags) = app_name(uri.query())?;
    let (resume, flags) = resume_key(flags)?;
    let provider = query_flags(flags.as_deref(), &["client_tools"])?
        .iter()
        .any(|f| f == "client_tools");
    if provider && who == Principal::Agent {
        return Err(Refusal::new(
            ErrorCode::Forbidden,
            "the agent token cannot open a provider stream (client_tools=1)",
        ));
    }
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::InvalidParameter,
                        "Last-Event-ID must be a non-negative integer",
                    )
                })?,
        ),
    };
    let broker = state.broker.clone();
    let opened = broker.open_stream(
        provider,
        super::routes::caller(&who),
        name,
        last_event_id,
        resume,
    )?;
    if let Some(Extension(f)) = forwarded {
        broker.stream_via(&opened.hello.client_id, f.via);
    }
    let hello = serde_json::to_string(&opened.hello)
        .map_err(|_| Refusal::new(ErrorCode::Internal, "cannot encode hello"))?;
    let last_sent = opened
        .subscription
        .replay
        .first()
        .map(|e| e.seq - 1)
        .unwrap_or(opened.subscription.seq);
    let (tx, queue) = mpsc::unbounded_channel();
    let backlog = Arc::new(AtomicUsize::new(0));
    crate::metrics::global().watch_backlog(&backlog);
    let forwarder = tokio::spawn(forward(
        opened.subscription.replay.into(),
        opened.subscription.rx,
        last_sent,
        tx,
        backlog.clone(),
        broker.clone(),
    ));
    let approver = !provider
        && broker
            .config()
            .approvals
            .may_approve(&super::routes::caller(&who));
    let state = Stream {
        hello: Some(hello),
        queue,
        backlog,
        provider,
        approver,
        shutdown: broker.shutdown_token(),
        broker: broker.clone(),
        sent: last_sent,
        owed: None,
        _forwarder: AbortOnDrop(forwarder.abort_handle()),
        _guard: opened.guard,
    };
    let events = stream::unfold(state, next_event);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Takes `name=…` (percent-encoded) out of the query: the app's name, checked, and the
/// remaining parameters for `query_flags`.
/// Takes `resume=KEY` out of the query: a provider's key from an earlier `hello`.
fn resume_key(query: Option<String>) -> Result<(Option<String>, Option<String>), Refusal> {
    let mut key = None;
    let mut rest = Vec::new();
    for pair in query.as_deref().unwrap_or_default().split('&') {
        let Some(value) = pair.strip_prefix("resume=") else {
            rest.push(pair);
            continue;
        };
        let bad = |why: &str| {
            Refusal::new(
                ErrorCode::InvalidParameter,
                format!("query parameter \"resume\" {why}"),
            )
        };
        if key.is_some() {
            return Err(bad("is given twice"));
        }
        if value.is_empty()
            || value.len() > 64
            || !value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(bad("must be the key from a provider stream's hello"));
        }
        key = Some(value.to_owned());
    }
    let rest = rest.join("&");
    Ok((key, (!rest.is_empty()).then_some(rest)))
}

fn app_name(query: Option<&str>) -> Result<(Option<String>, Option<String>), Refusal> {
    let mut name = None;
    let mut rest = Vec::new();
    for pair in query.unwrap_or_default().split('&') {
        let Some(raw) = pair
            .strip_prefix(NAME_PARAM)
            .and_then(|p| p.strip_prefix('='))
        else {
            rest.push(pair);
            continue;
        };
        let bad = |why: String| {
            Refusal::new(
                ErrorCode::InvalidParameter,
                format!("query parameter {NAME_PARAM:?} {why}"),
            )
        };
        if name.is_some() {
            return Err(bad("is given twice".into()));
        }
        let decoded: String = form_urlencoded::parse(format!("{NAME_PARAM}={raw}").as_bytes())
            .map(|(_, v)| v.into_owned())
            .next()
            .unwrap_or_default();
        check_app_name(&decoded).map_err(bad)?;
        name = Some(decoded);
    }
    let rest = rest.join("&");
    Ok((name, (!rest.is_empty()).then_some(rest)))
}

fn sse(event: &Event, provider: bool) -> SseEvent {
    SseEvent::default()
        .id(event.seq.to_string())
        .event(event.kind)
        .data(event.data(provider))
}

/// Moves events from the fan-out to the stream's queue as soon as they are published, in seq
/// order without gaps, and closes the queue when the stream breaks the slow-stream rule.
async fn forward(
    replay: VecDeque<Arc<Event>>,
    mut rx: tokio::sync::broadcast::Receiver<Arc<Event>>,
    mut last_sent: u64,
    tx: mpsc::UnboundedSender<Arc<Event>>,
    backlog: Arc<AtomicUsize>,
    broker: Arc<Broker>,
) {
    let mut pending = replay;
    loop {
        while let Some(event) = pending.pop_front() {
            if event.seq <= last_sent {
                continue;
            }
            let size = event.size();
            if backlog.fetch_add(size, Ordering::SeqCst) + size > STREAM_BACKLOG_BYTES {
                tracing::info!(seq = event.seq, "closing a stream that reads too slowly");
                return;
            }
            last_sent = event.seq;
            if tx.send(event).is_err() {
                return;
            }
        }
        match rx.recv().await {
            Ok(event) => pending.push_back(event),
            Err(RecvError::Lagged(_)) => match broker.bus().since(last_sent) {
                // Resync from the ring; events the receiver still holds are skipped by seq.
                Some(missed) => pending.extend(missed),
                // The ring lost part of what this stream missed: close it, the client
                // reconnects with Last-Event-ID and its hello says replay_gap.
                None => return,
            },
            Err(RecvError::Closed) => return,
        }
    }
}

async fn next_event(mut s: Stream) -> Option<(Result<SseEvent, Infallible>, Stream)> {
    if let Some(hello) = s.hello.take() {
        return Some((Ok(SseEvent::default().event(kind::HELLO).data(hello)), s));
    }
    loop {
        let event = next_queued(&mut s).await?;
        s.sent = event.seq;
        s.backlog.fetch_sub(event.size(), Ordering::SeqCst);
        if event.kind == kind::APPROVAL_REQUESTED && !s.approver {
            continue;
        }
        let out = sse(&event, s.provider);
        return Some((Ok(out), s));
    }
}

/// The next event queued for the stream; `None` when it ends.
async fn next_queued(s: &mut Stream) -> Option<Arc<Event>> {
    let event = loop {
        if let Some(owed) = s.owed {
            // Shutting down: send what was published before it (the `shutdown` cancellations
            // above all), then end. The forwarder may not have queued it yet.
            if s.sent >= owed {
                return None;
            }
            match tokio::time::timeout(SHUTDOWN_DRAIN, s.queue.recv()).await {
                Ok(Some(event)) => break event,
                _ => return None,
            }
        }
        tokio::select! {
            biased;
            event = s.queue.recv() => break event?,
            _ = s.shutdown.cancelled() => s.owed = Some(s.broker.bus().seq()),
        }
    };
    Some(event)
}
