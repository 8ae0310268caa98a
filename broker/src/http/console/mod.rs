//! The web console: a page at `/` on the broker's TCP port where the operator logs in with the
//! operator token and watches apps, agents, tools and pending calls live, cancels calls, and
//! answers the questions agents ask through the built-in `ask_human` tool.
//!
//! Only the TCP listener serves it: it exists for browsers, and the unix socket has no Host
//! check and no browser can reach it. Who may call which console route is in `auth::POLICY`
//! like every other route; the session store is `session`, the CSRF defences `guard`, the pages
//! and login `pages`, the JSON routes `api`. The state it changes (the `ask_human` switch,
//! cancellations, answers) is changed by `Broker` operations, never here.

mod api;
pub mod guard;
pub mod pages;
pub mod session;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::AppState;

/// The console's routes, to be merged before `auth::authorize` is layered on.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(pages::index))
        .route("/login", get(pages::login_page).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/console/console.js", get(pages::script))
        .route("/console/console.css", get(pages::style))
        .route("/console/icon.svg", get(pages::icon))
        .route("/console/session", get(api::session))
        .route("/console/events", get(api::events))
        .route("/console/requests/{id}/cancel", post(super::routes::cancel))
        .route("/console/requests/{id}/answer", post(api::answer))
        .route("/console/ask-human", post(api::ask_human))
        .route(
            "/console/tools/{name}/approve",
            post(super::routes::approve),
        )
        .layer(axum::middleware::map_response(pages::security_headers))
}
