//! The HTTP API: one router served on loopback TCP and on `run/leo.sock`, and the web console,
//! served on TCP only.
//!
//! **Architecture Invariant:** only this module knows HTTP and SSE. Handlers parse, authorize
//! and call `Broker`; the state machine never sees a request or a status code.

mod auth;
pub mod console;
mod events;
mod reply;
mod routes;
pub mod rules;
mod serve;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use reply::ApiError;
pub use rules::{HostCheck, Route};
pub use serve::{TcpLimits, serve_tcp};

use crate::core::Broker;
use crate::tokens::Tokens;

/// What every handler shares.
pub struct AppState {
    pub broker: Arc<Broker>,
    pub tokens: Tokens,
    pub max_body: usize,
    /// Console logins (used on TCP only).
    pub sessions: console::session::Sessions,
}

/// The API routes, shared by both listeners.
fn api_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/events", get(events::stream))
        .route(
            "/api/v1/client-tools",
            post(routes::register).get(routes::list_tools),
        )
        .route("/api/v1/client-tools/requests", get(routes::pending))
        .route(
            "/api/v1/client-tools/requests/{id}/claim",
            post(routes::claim),
        )
        .route(
            "/api/v1/client-tools/requests/{id}/result",
            post(routes::result),
        )
        .route(
            "/api/v1/client-tools/requests/{id}/cancel",
            post(routes::cancel),
        )
        .route(rules::APPROVE_PATH, post(routes::approve))
        .route("/api/v1/status", get(routes::status))
        .route(rules::MESSAGE_PATH, post(routes::message))
        .route(rules::PROGRESS_PATH, post(routes::progress))
        .route(rules::INPUT_PATH, post(routes::input))
}

/// Authorizes `routes` by the policy table in `auth` and answers what no route matched.
fn finish(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router {
    routes
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(state)
}

/// The router for the unix socket: the API, without the Host check and without the console.
pub fn router(state: Arc<AppState>) -> Router {
    finish(api_routes(), state)
}

/// The router for TCP: the API and the console; the Host check runs before anything else,
/// auth included.
pub fn tcp_router(state: Arc<AppState>, host: Arc<HostCheck>) -> Router {
    finish(api_routes().merge(console::routes()), state)
        .layer(axum::middleware::from_fn_with_state(host, auth::check_host))
}
