//! `GET /api/v1/events`: the SSE stream.
//!
//! A stream is `hello` (not numbered), then the events after `Last-Event-ID` that the ring
//! still holds, then live events. Provider streams see requests in full; others see ids. When
//! the stream ends for any reason its `ClientGuard` drops, which withdraws the client's tools.

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
use leo_protocol::events::kind;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::reply::query_flags;
use super::{ApiError, AppState};
use crate::core::{Broker, ClientGuard};
use crate::events::Event;
use crate::tokens::Principal;

/// Comment lines that keep proxies and clients from timing the stream out.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct Stream {
    hello: Option<String>,
    queue: VecDeque<Arc<Event>>,
    rx: tokio::sync::broadcast::Receiver<Arc<Event>>,
    last_sent: u64,
    provider: bool,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
    _guard: ClientGuard,
}

fn principal_name(who: &Principal) -> String {
    match who {
        Principal::Operator => "operator".into(),
        Principal::Device(name) => format!("device:{name}"),
        Principal::Agent => "agent".into(),
        Principal::ApiClient(name) => format!("client:{name}"),
    }
}

pub async fn stream(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let provider = query_flags(uri.query(), &["client_tools"])?
        .iter()
        .any(|f| f == "client_tools");
    if provider && who == Principal::Agent {
        return Err(ApiError::new(
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
                    ApiError::new(
                        ErrorCode::InvalidParameter,
                        "Last-Event-ID must be a non-negative integer",
                    )
                })?,
        ),
    };
    let broker = state.broker.clone();
    let opened = broker.open_stream(provider, principal_name(&who), last_event_id);
    let hello = serde_json::to_string(&opened.hello)
        .map_err(|_| ApiError::new(ErrorCode::Internal, "cannot encode hello"))?;
    let last_sent = opened
        .subscription
        .replay
        .first()
        .map(|e| e.seq - 1)
        .unwrap_or(opened.subscription.seq);
    let state = Stream {
        hello: Some(hello),
        queue: opened.subscription.replay.into(),
        rx: opened.subscription.rx,
        last_sent,
        provider,
        shutdown: broker.shutdown_token(),
        broker,
        _guard: opened.guard,
    };
    let events = stream::unfold(state, next_event);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

fn sse(event: &Event, provider: bool) -> SseEvent {
    SseEvent::default()
        .id(event.seq.to_string())
        .event(event.kind)
        .data(event.data(provider))
}

async fn next_event(mut s: Stream) -> Option<(Result<SseEvent, Infallible>, Stream)> {
    if let Some(hello) = s.hello.take() {
        return Some((Ok(SseEvent::default().event(kind::HELLO).data(hello)), s));
    }
    loop {
        if let Some(event) = s.queue.pop_front() {
            if event.seq <= s.last_sent {
                continue;
            }
            s.last_sent = event.seq;
            let out = sse(&event, s.provider);
            return Some((Ok(out), s));
        }
        let received = tokio::select! {
            biased;
            _ = s.shutdown.cancelled() => return None,
            r = s.rx.recv() => r,
        };
        match received {
            Ok(event) => s.queue.push_back(event),
            Err(RecvError::Lagged(_)) => match s.broker.bus().since(s.last_sent) {
                // Resync from the ring; events the receiver still holds are skipped by seq.
                Some(missed) => s.queue.extend(missed),
                // The ring lost part of what this stream missed: close it, the client
                // reconnects with Last-Event-ID and its hello says replay_gap.
                None => return None,
            },
            Err(RecvError::Closed) => return None,
        }
    }
}
