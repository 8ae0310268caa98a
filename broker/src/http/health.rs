//! `GET /healthz` and `GET /readyz` on every listener, without a token (the Host check of a
//! TCP listener still applies): what a load balancer or Kubernetes asks of each instance.
//!
//! Both are answered from what the instance already holds, never with a round trip to the
//! database: a probe every second from every balancer must cost nothing. `/healthz` says the
//! process serves. `/readyz` says whether it takes work now: a single broker or a leader when
//! its store's database answers (the store's availability flag, which its writer keeps) and it
//! is not shutting down; a follower when its last look at the lease reached the database and
//! named a leader it may forward to (what `cluster` tells the front, [`FollowerView`]). The
//! body is `leo_protocol::health::Readiness`, `200` when ready, `503` when not.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leo_protocol::health::{Health, Leader, OK, Readiness};

use super::AppState;
use super::rules::Route;

/// Why an instance whose database is away is not ready.
pub const UNREACHABLE: &str = "the database cannot be reached";

/// This instance in its cluster, as a leader's core serves: its id and advertised URL.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub url: String,
}

pub async fn healthz() -> Response {
    live()
}

fn live() -> Response {
    Json(Health {
        status: OK.to_owned(),
    })
    .into_response()
}

/// A single broker's or a leader's readiness: its store reaches its database, and it is not
/// shutting down.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let reason = if state.broker.shutdown_token().is_cancelled() {
        Some("the broker is shutting down".to_owned())
    } else if !state.broker.store().available() {
        Some(UNREACHABLE.to_owned())
    } else {
        None
    };
    let ready = match &state.instance {
        None => Readiness::new("single", reason),
        Some(me) => {
            let mut r = Readiness::new("leader", reason);
            r.instance = Some(me.id.clone());
            r.leader = Some(Leader {
                instance: me.id.clone(),
                url: Some(me.url.clone()),
            });
            r
        }
    };
    answer(ready)
}

/// `200` when ready, else `503`, with the body either way.
fn answer(ready: Readiness) -> Response {
    let status = if ready.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(ready)).into_response()
}

/// A follower's readiness as `cluster` last saw it: the leader it forwards to, or why it
/// cannot take work.
#[derive(Debug, Clone)]
pub struct FollowerView {
    pub leader: Option<Leader>,
    pub reason: Option<String>,
}

impl Default for FollowerView {
    /// Before the database was looked at.
    fn default() -> FollowerView {
        FollowerView {
            leader: None,
            reason: Some("no leader known yet: waiting for the database".to_owned()),
        }
    }
}

/// A front's answer to a probe (`GET /healthz`, `GET /readyz`), or `None` for any other
/// request.
pub fn follower_probe(method: &str, path: &str, me: &str, view: &FollowerView) -> Option<Response> {
    match Route::of_path(method, path)? {
        Route::Health => Some(live()),
        Route::Ready => {
            let mut ready = Readiness::new("follower", view.reason.clone());
            ready.instance = Some(me.to_owned());
            ready.leader = view.leader.clone();
            Some(answer(ready))
        }
        _ => None,
    }
}
