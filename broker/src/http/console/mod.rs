//! The web console: a page at `/` on the broker's TCP port where the operator logs in with the
//! operator token and watches apps, agents, tools and pending calls live, cancels calls, and
//! answers the questions agents ask through the built-in `ask_human` tool.
//!
//! Only the TCP listener serves it: it exists for browsers, and the unix socket has no Host
//! check and no browser can reach it. Who may call which console route is in `rules::Route::callers`
//! like every other route; the session store is `session`, the CSRF defences `guard`, the pages
//! and login `pages`, the JSON routes `api`. The state it changes (the `ask_human` switch,
//! cancellations, answers) is changed by `Broker` operations, never here.

pub(crate) mod api;
pub mod guard;
pub mod pages;
pub mod session;

use std::sync::Arc;

use axum::Router;

use super::AppState;

/// The console's routes (the `rules::ROUTES` rows of console routes), to be merged before
/// `auth::authorize` is layered on.
pub fn routes() -> Router<Arc<AppState>> {
    super::routes_where(super::Route::console)
        .layer(axum::middleware::map_response(pages::security_headers))
}
