//! The HTTP API: one router served on loopback TCP and on `run/leo.sock`, and the web console,
//! served on TCP only.
//!
//! **Architecture Invariant:** only this module knows HTTP and SSE. Handlers parse, authorize
//! and call `Broker`; the state machine never sees a request or a status code.

mod approvals;
pub(crate) mod auth;
pub mod console;
mod events;
pub mod health;
pub(crate) mod history;
pub(crate) mod ipc;
pub mod mcp;
pub(crate) mod oauth;
pub(crate) mod reply;
mod routes;
pub mod rules;
pub(crate) mod serve;
pub(crate) mod tls;

use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodFilter, MethodRouter, on};

pub use rules::{HostCheck, Route};
pub use serve::{TcpBudget, TcpLimits, serve_tcp};
pub use tls::{ServerTls, TlsFiles};

use crate::core::Broker;
use crate::tokens::TokenBook;

/// What every handler shares.
pub struct AppState {
    pub broker: Arc<Broker>,
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    pub tokens: TokenBook,
    pub max_body: usize,
    /// Console logins (used on TCP only).
    pub sessions: console::session::Sessions,
    /// The way into a sidecar session, for transports other than `run/sidecar.sock`.
    pub sidecars: crate::ipc::Door,
    /// What serves `/mcp`, when the binary mounted it.
    pub mcp: Option<Arc<dyn mcp::Mount>>,
    /// The TCP listener serves HTTPS (`web.tls`): a browser's own origin is `https://<Host>`.
    pub https: bool,
    /// The OAuth authorization server (`auth.oauth`), whose access tokens open `/mcp`.
    pub oauth: Option<Arc<crate::oauth::OAuth>>,
    /// The outside authorization server (`auth.issuer`), whose JWTs open `/mcp` instead.
    pub issuer: Option<Arc<crate::issuer::Issuer>>,
    /// `auth.public_url`: the issuer and the base of `/mcp`'s resource URL.
    pub public_url: Option<String>,
    /// This instance, when it leads a cluster (`/readyz` names it); `None` for a single broker.
    pub instance: Option<health::Instance>,
}

/// The API routes, shared by both listeners.
fn api_routes() -> Router<Arc<AppState>> {
    routes_where(|route| !route.tcp_only())
}

/// The rows of `rules::ROUTES` that `pick` keeps, each served by its handler: a route's method
/// and path are declared there and nowhere else.
fn routes_where(pick: impl Fn(Route) -> bool) -> Router<Arc<AppState>> {
    rules::ROUTES
        .iter()
        .filter(|(_, _, route)| pick(*route))
        .fold(Router::new(), |router, (method, path, route)| {
            let filter = match *method {
                "POST" => MethodFilter::POST,
                "DELETE" => MethodFilter::DELETE,
                _ => MethodFilter::GET,
            };
            router.route(path, handler(*route, filter))
        })
}

/// The handler of each route, on the method of its row, as a `match` the compiler holds to
/// every route.
fn handler(route: Route, method: MethodFilter) -> MethodRouter<Arc<AppState>> {
    use console::{api, pages};
    match route {
        Route::Events => on(method, events::stream),
        Route::RegisterTools => on(method, routes::register),
        Route::ListTools => on(method, routes::list_tools),
        Route::Pending => on(method, routes::pending),
        Route::Claim => on(method, routes::claim),
        Route::Result => on(method, routes::result),
        Route::Cancel | Route::ConsoleCancel => on(method, routes::cancel),
        Route::Approve | Route::ConsoleApprove => on(method, routes::approve),
        Route::Status => on(method, routes::status),
        Route::Message => on(method, routes::message),
        Route::Progress => on(method, routes::progress),
        Route::Input => on(method, routes::input),
        Route::Log => on(method, routes::log),
        Route::Sample => on(method, routes::sample),
        Route::OfferAnswer => on(method, routes::offer_answer),
        Route::ResourceUpdated => on(method, routes::resource_updated),
        Route::Audit => on(method, history::audit_list),
        Route::Metrics => on(method, history::metrics),
        Route::ConsoleHistory => on(method, history::console_history),
        Route::LoginPage => on(method, pages::login_page),
        Route::Login => on(method, pages::login),
        Route::Logout => on(method, pages::logout),
        Route::ConsolePage => on(method, pages::index),
        Route::ConsoleAsset => on(method, pages::asset),
        Route::ConsoleSession => on(method, api::session),
        Route::ConsoleEvents => on(method, api::events),
        Route::ConsoleAnswer => on(method, api::answer),
        Route::AskHuman => on(method, api::ask_human),
        Route::CreateWebhook => on(method, routes::create_webhook),
        Route::ListWebhooks => on(method, routes::list_webhooks),
        Route::RemoveWebhook => on(method, routes::remove_webhook),
        Route::Ipc => on(method, ipc::upgrade),
        Route::Mcp => on(method, mcp::serve),
        Route::Health => on(method, health::healthz),
        Route::Ready => on(method, health::readyz),
        Route::Approvals => on(method, approvals::list),
        Route::ApproveCall => on(method, approvals::approve),
        Route::DenyCall => on(method, approvals::deny),
        Route::ResourceMetadata => on(method, oauth::resource_metadata),
        Route::ServerMetadata => on(method, oauth::server_metadata),
        Route::OAuthRegister => on(method, oauth::register),
        Route::OAuthAuthorize => on(method, oauth::authorize),
        Route::OAuthToken => on(method, oauth::token),
        Route::ConsentPage => on(method, oauth::consent_page),
        Route::ConsentDecide => on(method, oauth::consent_decide),
        Route::OAuthGrants => on(method, oauth::grants),
        Route::RevokeGrant => on(method, oauth::revoke),
    }
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

/// The router of `metrics.bind`: `GET /metrics` and the probes, nothing else, without a
/// token (the listener is loopback only), behind the same Host check as the main TCP listener: without
/// it, a page on a rebinding DNS name could read the metrics.
pub fn metrics_router(state: Arc<AppState>, host: Arc<HostCheck>) -> Router {
    routes_where(Route::on_metrics_listener)
        .fallback(|| async {
            crate::refusal::Refusal::new(leo_protocol::ErrorCode::NotFound, "only /metrics here")
        })
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(host, auth::check_host))
}

/// `router` with the leader's gate of a cluster (see `cluster::gate`): what a follower
/// forwards with the cluster's key is admitted as [`Forwarded`](crate::cluster::gate::Forwarded).
pub fn with_gate(router: Router, key: Option<crate::cluster::gate::ClusterKey>) -> Router {
    use crate::cluster::gate;
    match key {
        Some(key) => router.layer(axum::middleware::from_fn_with_state(key, gate::gate)),
        None => router,
    }
}

/// The router for the unix socket: the API, without the Host check and without the console.
pub fn router(state: Arc<AppState>) -> Router {
    finish(api_routes(), state)
}

/// The router for TCP: the API and the console; the Host check runs before anything else,
/// auth included.
pub fn tcp_router(state: Arc<AppState>, host: Arc<HostCheck>) -> Router {
    let mcp = routes_where(|route| route == Route::Mcp || route.oauth_public());
    finish(api_routes().merge(console::routes()).merge(mcp), state)
        .layer(axum::middleware::from_fn_with_state(host, auth::check_host))
}
