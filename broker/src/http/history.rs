//! The history routes: `GET /api/v1/client-tools/requests?state=ended` (the pending route's
//! path, chosen by `state`) and `GET /api/v1/audit`, and their query parameters, each refused
//! by name.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use leo_protocol::ErrorCode;
use leo_protocol::console::ConsoleHistory;
use leo_protocol::history::{CallOutcome, DEFAULT_PAGE, MAX_PAGE};

use super::AppState;
use super::reply::ok;
use crate::history::Error as HistoryError;
use crate::history::db::CallQuery;
use crate::refusal::Refusal;
use crate::tokens::Principal;

fn invalid(key: &str, message: impl std::fmt::Display) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidParameter,
        format!("query parameter {key:?}: {message}"),
    )
}

fn unknown(key: &str) -> Refusal {
    Refusal::new(
        ErrorCode::UnknownParameter,
        format!("unknown query parameter {key:?}"),
    )
}

/// The decoded pairs of a query string.
fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// True when the query asks for ended calls (`state=ended`); `state=pending` or no `state` is
/// the pending list. Any other `state` is refused.
pub fn wants_ended(query: Option<&str>) -> Result<bool, Refusal> {
    match pairs(query).iter().find(|(k, _)| k == "state") {
        None => Ok(false),
        Some((_, v)) if v == "ended" => Ok(true),
        Some((_, v)) if v == "pending" => Ok(false),
        Some((k, v)) => Err(invalid(k, format!("must be ended or pending, not {v:?}"))),
    }
}

/// The query without its `state=pending`, for the pending list's own flags.
pub fn without_state(query: Option<&str>) -> Option<String> {
    let query = query?;
    Some(
        query
            .split('&')
            .filter(|p| *p != "state=pending")
            .collect::<Vec<_>>()
            .join("&"),
    )
}

fn limit(key: &str, value: &str) -> Result<u32, Refusal> {
    match value.parse::<u32>() {
        Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        _ => Err(invalid(
            key,
            format!("must be a whole number from 1 to {MAX_PAGE}, not {value:?}"),
        )),
    }
}

fn before(key: &str, value: &str) -> Result<u64, Refusal> {
    value
        .parse::<u64>()
        .map_err(|_| invalid(key, format!("must be a seq number, not {value:?}")))
}

fn name(key: &str, value: &str) -> Result<String, Refusal> {
    if value.is_empty() || value.len() > 256 {
        return Err(invalid(key, "must be 1 to 256 bytes"));
    }
    leo_protocol::names::storable(value).map_err(|e| invalid(key, e))?;
    Ok(value.to_owned())
}

/// The ended-calls query, every parameter checked.
pub fn call_query(query: Option<&str>) -> Result<CallQuery, Refusal> {
    let mut q = CallQuery {
        limit: DEFAULT_PAGE,
        ..CallQuery::default()
    };
    for (key, value) in pairs(query) {
        match key.as_str() {
            "state" => {}
            "limit" => q.limit = limit(&key, &value)?,
            "before" => q.before = Some(before(&key, &value)?),
            "tool" => q.tool = Some(name(&key, &value)?),
            "agent" => q.agent = Some(name(&key, &value)?),
            "outcome" => {
                q.outcome = Some(CallOutcome::parse(&value).map_err(|_| {
                    invalid(
                        &key,
                        format!(
                            "must be one of result, error, timeout, cancelled, no_client, not {value:?}"
                        ),
                    )
                })?);
            }
            _ => return Err(unknown(&key)),
        }
    }
    Ok(q)
}

/// A history that could not be read: `503 store_unavailable` while PostgreSQL is away (try
/// again), else `500 internal`.
fn refused(e: HistoryError) -> Refusal {
    let code = if e.is_outage() {
        ErrorCode::StoreUnavailable
    } else {
        ErrorCode::Internal
    };
    Refusal::new(code, format!("history: {e}"))
}

/// Who made an audited change: a token's principal, else the console login.
pub fn actor(who: Option<&Principal>) -> (String, &'static str) {
    match who {
        Some(p) => crate::history::who(p),
        None => ("console".into(), "session"),
    }
}

/// Records an authenticated change in the audit trail.
pub fn audit(
    state: &AppState,
    who: Option<&Principal>,
    action: &str,
    target: &str,
    detail: Option<String>,
) {
    state
        .broker
        .history()
        .audit(actor(who), action, Some(target), detail);
}

/// `GET …/requests?state=ended`: contents only for the operator.
pub async fn ended(state: &AppState, who: &Principal, uri: &Uri) -> Result<Response, Refusal> {
    let q = call_query(uri.query())?;
    let contents = matches!(who, Principal::Operator);
    let list = state
        .broker
        .history()
        .calls(q, contents)
        .await
        .map_err(refused)?;
    Ok(ok(list))
}

/// How many ended calls the console's history panel shows.
const CONSOLE_HISTORY: u32 = 20;

/// `GET /console/history`: the last calls for the console's panel, without contents (the page
/// shows outcomes and durations only), and the last hour's calls per minute for its chart. It
/// takes no parameters.
pub async fn console_history(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<Response, Refusal> {
    if let Some((key, _)) = pairs(uri.query()).first() {
        return Err(unknown(key));
    }
    let q = CallQuery {
        limit: CONSOLE_HISTORY,
        ..CallQuery::default()
    };
    let history = state.broker.history();
    let list = history.calls(q, false).await.map_err(refused)?;
    let per_minute = history
        .per_minute(std::time::SystemTime::now())
        .await
        .map_err(refused)?;
    Ok(ok(ConsoleHistory {
        calls: list.calls,
        next_before: list.next_before,
        per_minute,
    }))
}

/// The media type of `GET /metrics` (OpenMetrics text, which Prometheus reads).
pub const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`: the operator's (`Route::callers`), or anyone's on `metrics.bind`.
pub async fn metrics(State(state): State<Arc<AppState>>, uri: Uri) -> Result<Response, Refusal> {
    if let Some((key, _)) = pairs(uri.query()).first() {
        return Err(unknown(key));
    }
    Ok(metrics_page(&state.broker))
}

/// The metrics page of `broker`.
pub fn metrics_page(broker: &crate::core::Broker) -> Response {
    use axum::response::IntoResponse;
    let dropped = broker.history().dropped();
    let body = crate::metrics::global().render(&broker.status(), dropped);
    ([(axum::http::header::CONTENT_TYPE, METRICS_TYPE)], body).into_response()
}

/// `GET /api/v1/audit`: the operator's alone (`Route::callers`).
pub async fn audit_list(State(state): State<Arc<AppState>>, uri: Uri) -> Result<Response, Refusal> {
    let (mut n, mut cursor) = (DEFAULT_PAGE, None);
    for (key, value) in pairs(uri.query()) {
        match key.as_str() {
            "limit" => n = limit(&key, &value)?,
            "before" => cursor = Some(before(&key, &value)?),
            _ => return Err(unknown(&key)),
        }
    }
    let list = state
        .broker
        .history()
        .audits(n, cursor)
        .await
        .map_err(refused)?;
    Ok(ok(list))
}
