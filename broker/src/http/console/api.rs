//! The console's JSON routes under `/console/…`, authenticated by the session cookie: the live
//! status stream, the `ask_human` switch, and answering its questions. Cancelling a call is the
//! API's own handler (`routes::cancel`), mounted at `/console/requests/{id}/cancel` too.
//!
//! The live view is an SSE stream of whole `status` snapshots: one when it opens, then one
//! after each change, coalesced so that a burst of changes is one snapshot and the last state
//! is always sent. A snapshot is small next to a page's worth of HTML and spares the page from
//! replaying events into a model of the broker's state.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use leo_protocol::ErrorCode;
use leo_protocol::console::{AnswerBody, AskHumanBody, ConsoleSession};
use leo_protocol::events::kind;
use leo_protocol::limits::MAX_RESULT_BYTES;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::session::Session;
use crate::http::AppState;
use crate::http::auth::BodyLimit;
use crate::http::reply::{json_body, ok};
use crate::refusal::Refusal;

/// The shortest gap between two snapshots; changes within it are sent as one.
///
/// In a cluster a snapshot is also sent every `SESSION_CHECK` without a change: the instances'
/// roles and `last_seen` change at each heartbeat, which is no change of this broker's state.
const COALESCE: Duration = Duration::from_millis(150);
/// How often an idle stream checks that its login has not expired (a logout ends it at once).
const SESSION_CHECK: Duration = Duration::from_secs(5);
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /console/session`: whether the cookie is a login, and for how long.
pub async fn session(Extension(session): Extension<Session>) -> Response {
    ok(ConsoleSession {
        expires_in_s: session.expires_in_s(),
    })
}

struct Live {
    state: Arc<AppState>,
    session: String,
    changes: watch::Receiver<u64>,
    logouts: watch::Receiver<u64>,
    first: bool,
    /// The last snapshot listed a cluster's instances.
    cluster: bool,
    shutdown: CancellationToken,
}

/// `GET /console/events`: `status` snapshots until the login ends or the broker stops.
pub async fn events(
    State(state): State<Arc<AppState>>,
    Extension(session): Extension<Session>,
) -> Response {
    let live = Live {
        changes: state.broker.watch_changes(),
        logouts: state.sessions.watch_logouts(),
        shutdown: state.broker.shutdown_token(),
        state,
        session: session.id,
        first: true,
        cluster: false,
    };
    Sse::new(stream::unfold(live, next_snapshot))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

async fn next_snapshot(mut s: Live) -> Option<(Result<SseEvent, Infallible>, Live)> {
    if !s.first {
        loop {
            tokio::select! {
                biased;
                _ = s.shutdown.cancelled() => return None,
                changed = s.changes.changed() => {
                    changed.ok()?;
                    break;
                }
                _ = s.logouts.changed() => {
                    s.state.sessions.get(&s.session)?;
                }
                _ = tokio::time::sleep(SESSION_CHECK) => {
                    s.state.sessions.get(&s.session)?;
                    if s.cluster {
                        break;
                    }
                }
            }
        }
        tokio::select! {
            biased;
            _ = s.shutdown.cancelled() => return None,
            _ = tokio::time::sleep(COALESCE) => {}
        }
    }
    s.first = false;
    s.state.sessions.get(&s.session)?;
    // Seen before the snapshot is taken: a change after this point wakes the stream again.
    s.changes.mark_unchanged();
    let status = s.state.broker.status();
    s.cluster = !status.instances.is_empty();
    let data = serde_json::to_string(&status).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "status failed to serialize");
        "{}".to_owned()
    });
    Some((Ok(SseEvent::default().event(kind::STATUS).data(data)), s))
}

/// `POST /console/ask-human` `{on}`.
#[tracing::instrument(name = "ask_human_switch", skip_all)]
pub async fn ask_human(
    State(state): State<Arc<AppState>>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: AskHumanBody = json_body(body, limit).await?;
    let switched = state.broker.set_ask_human(body.on)?;
    let detail = Some(if body.on { "on" } else { "off" }.to_owned());
    crate::http::history::audit(&state, None, "ask_human_switch", "ask_human", detail);
    Ok(ok(switched))
}

/// `POST /console/requests/{id}/answer` `{text}`.
#[tracing::instrument(name = "console_answer", skip_all, fields(request = %id))]
pub async fn answer(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: AnswerBody = json_body(body, limit).await?;
    if body.text.trim().is_empty() {
        return Err(Refusal::new(
            ErrorCode::InvalidParameter,
            "at $.text: the answer is empty",
        ));
    }
    if body.text.len() > MAX_RESULT_BYTES {
        return Err(Refusal::new(
            ErrorCode::ResultTooLarge,
            format!(
                "at $.text: {} bytes, at most {MAX_RESULT_BYTES}",
                body.text.len()
            ),
        ));
    }
    let ack = state.broker.answer_from_console(&id, &body.text).await?;
    crate::http::history::audit(&state, None, "result", &id, Some("console ok".into()));
    Ok(ok(ack))
}
