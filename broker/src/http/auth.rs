//! Who may do what: the Host check for TCP, and the route × caller policy table.
//!
//! The Host check comes first on TCP, before any token is looked at: a request whose Host
//! header is not an allowed name with the listener's port gets a plain `403 forbidden host`
//! (DNS rebinding protection), which an operator can tell apart from a JSON scope denial.
//! Then every route states, in `POLICY`, which kinds of caller may call it; a route missing
//! from the table is refused, so a new route is closed until someone opens it here.
//!
//! A caller is a bearer token's principal, a web-console session (the `leo_session` cookie,
//! looked at on console routes only and only when no bearer token is sent, so a cookie never
//! opens an API route), or nobody. State-changing console requests then pass the console's
//! CSRF defences (`console::guard`) before their handler runs.

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{MatchedPath, State};
use axum::http::{Method, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leo_protocol::ErrorCode;

use super::console::guard::{check_csrf, check_origin};
use super::console::pages::to_login;
use super::console::session::Session;
use super::{ApiError, AppState};
use crate::tokens::Principal;

/// The routes, as the policy table names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Events,
    RegisterTools,
    ListTools,
    Pending,
    Claim,
    Result,
    Cancel,
    /// `POST …/definitions/{name}/approve`: the operator approves a changed definition.
    Approve,
    Status,
    Message,
    /// `GET /login`, the form.
    LoginPage,
    /// `POST /login`.
    Login,
    Logout,
    /// `GET /`, the console.
    ConsolePage,
    /// The console's script, stylesheet and icon.
    ConsoleAsset,
    ConsoleSession,
    ConsoleEvents,
    ConsoleCancel,
    ConsoleAnswer,
    AskHuman,
    /// The console's approve button.
    ConsoleApprove,
}

/// Kinds of caller, for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Operator,
    Device,
    Agent,
    ApiClient,
    /// A web-console login (the operator, through the session cookie).
    Session,
    /// No credentials at all.
    Anonymous,
}

/// Routes anyone may call: the login form and the console's assets. An API-client token is
/// still refused, by the API-client check that runs first.
const PUBLIC: &[Kind] = &[
    Kind::Anonymous,
    Kind::Session,
    Kind::Operator,
    Kind::Device,
    Kind::Agent,
];

/// Route × caller kind: the one place that says who may call what. The provider stream
/// (`?client_tools=1`) is refused to agents in its handler, since it shares a path with the
/// plain stream; an API client is further limited to the targets of its `can_message`.
/// Cancelling a call is the operator's alone: devices are apps, and an app must not end
/// another app's calls. Console routes (TCP only) take the session cookie, not tokens.
const POLICY: &[(Route, &[Kind])] = &[
    (Route::Events, &[Kind::Operator, Kind::Device, Kind::Agent]),
    (Route::RegisterTools, &[Kind::Operator, Kind::Device]),
    (Route::ListTools, &[Kind::Operator, Kind::Device]),
    (Route::Pending, &[Kind::Operator, Kind::Device]),
    (Route::Claim, &[Kind::Operator, Kind::Device]),
    (Route::Result, &[Kind::Operator, Kind::Device]),
    (Route::Cancel, &[Kind::Operator]),
    (Route::Approve, &[Kind::Operator]),
    (Route::Status, &[Kind::Operator, Kind::Device]),
    (Route::Message, &[Kind::Operator, Kind::ApiClient]),
    (Route::LoginPage, PUBLIC),
    (Route::Login, PUBLIC),
    (Route::ConsoleAsset, PUBLIC),
    (Route::Logout, &[Kind::Session]),
    (Route::ConsolePage, &[Kind::Session]),
    (Route::ConsoleSession, &[Kind::Session]),
    (Route::ConsoleEvents, &[Kind::Session]),
    (Route::ConsoleCancel, &[Kind::Session]),
    (Route::ConsoleAnswer, &[Kind::Session]),
    (Route::AskHuman, &[Kind::Session]),
    (Route::ConsoleApprove, &[Kind::Session]),
];

/// The approve route's path, as the router and the policy table both name it.
pub const APPROVE_PATH: &str = "/api/v1/client-tools/definitions/{name}/approve";

/// The message route's path, as the router and the API-client check both name it.
pub const MESSAGE_PATH: &str = "/web/agent/{target}/message";

impl Route {
    fn of(method: &Method, path: &str) -> Option<Route> {
        Some(match (method.as_str(), path) {
            ("GET", "/api/v1/events") => Route::Events,
            ("POST", "/api/v1/client-tools") => Route::RegisterTools,
            ("GET", "/api/v1/client-tools") => Route::ListTools,
            ("GET", "/api/v1/client-tools/requests") => Route::Pending,
            ("POST", "/api/v1/client-tools/requests/{id}/claim") => Route::Claim,
            ("POST", "/api/v1/client-tools/requests/{id}/result") => Route::Result,
            ("POST", "/api/v1/client-tools/requests/{id}/cancel") => Route::Cancel,
            ("POST", APPROVE_PATH) => Route::Approve,
            ("GET", "/api/v1/status") => Route::Status,
            ("POST", MESSAGE_PATH) => Route::Message,
            ("GET", "/login") => Route::LoginPage,
            ("POST", "/login") => Route::Login,
            ("POST", "/logout") => Route::Logout,
            ("GET", "/") => Route::ConsolePage,
            ("GET", "/console/console.js" | "/console/console.css" | "/console/icon.svg") => {
                Route::ConsoleAsset
            }
            ("GET", "/console/session") => Route::ConsoleSession,
            ("GET", "/console/events") => Route::ConsoleEvents,
            ("POST", "/console/requests/{id}/cancel") => Route::ConsoleCancel,
            ("POST", "/console/requests/{id}/answer") => Route::ConsoleAnswer,
            ("POST", "/console/ask-human") => Route::AskHuman,
            ("POST", "/console/tools/{name}/approve") => Route::ConsoleApprove,
            _ => return None,
        })
    }

    fn allows(self, kind: Kind) -> bool {
        POLICY
            .iter()
            .any(|(route, kinds)| *route == self && kinds.contains(&kind))
    }

    /// A web-console route: served on TCP only, authenticated by the session cookie.
    fn console(self) -> bool {
        matches!(
            self,
            Route::LoginPage
                | Route::Login
                | Route::Logout
                | Route::ConsolePage
                | Route::ConsoleAsset
                | Route::ConsoleSession
                | Route::ConsoleEvents
                | Route::ConsoleCancel
                | Route::ConsoleAnswer
                | Route::AskHuman
                | Route::ConsoleApprove
        )
    }

    /// A console route that changes state: it passes the Origin check, and the CSRF check
    /// when it has a session.
    fn changes_state(self) -> bool {
        matches!(
            self,
            Route::Login
                | Route::Logout
                | Route::ConsoleCancel
                | Route::ConsoleAnswer
                | Route::AskHuman
                | Route::ConsoleApprove
        )
    }
}

/// Who is calling.
enum Caller {
    Token(Principal),
    Session(Session),
    Anonymous,
}

impl Caller {
    fn kind(&self) -> Kind {
        match self {
            Caller::Token(Principal::Operator) => Kind::Operator,
            Caller::Token(Principal::Device(_)) => Kind::Device,
            Caller::Token(Principal::Agent) => Kind::Agent,
            Caller::Token(Principal::ApiClient(_)) => Kind::ApiClient,
            Caller::Session(_) => Kind::Session,
            Caller::Anonymous => Kind::Anonymous,
        }
    }
}

/// The bearer token of a request, if it has one.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Who presented the request's token, or the 401 to answer.
pub fn authenticate(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, ApiError> {
    let Some(token) = bearer(headers) else {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <token>",
        ));
    };
    state
        .tokens
        .lookup(token)
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "unknown token"))
}

/// The target segment of `/web/agent/<target>/message`, as it appears in the path.
fn message_target(path: &str) -> Option<&str> {
    path.strip_prefix("/web/agent/")?
        .strip_suffix("/message")
        .filter(|t| !t.is_empty() && !t.contains('/'))
}

/// The API-client check, run before any other: such a token may only post a message to a
/// target its `can_message` allows; everything else, routed or not, is 403.
fn api_client_gate(state: &AppState, name: &str, req: &Request<Body>) -> Result<(), ApiError> {
    let path = req.uri().path();
    let target = (req.method() == Method::POST)
        .then(|| message_target(path))
        .flatten();
    let Some(target) = target else {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("client {name:?} may only post to /web/agent/<target>/message"),
        ));
    };
    let patterns = state
        .broker
        .config()
        .api_clients
        .get(name)
        .map(|c| c.can_message.as_slice())
        .unwrap_or_default();
    if crate::messages::target_allowed(patterns, target) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("client {name:?} is not permitted to message {target:?}"),
        ))
    }
}

/// Route layer: finds the caller (token, console session, or nobody), runs the API-client
/// check, applies `POLICY`, then the console's CSRF defences.
pub async fn authorize(
    State(state): State<Arc<AppState>>,
    mut req: Request<Body>,
    next: Next,
) -> Response {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let route = Route::of(req.method(), &path);
    let caller = match bearer(req.headers()) {
        Some(_) => match authenticate(&state, req.headers()) {
            Ok(who) => Caller::Token(who),
            Err(e) => return e.into_response(),
        },
        None => match route.filter(|r| r.console()) {
            Some(_) => state
                .sessions
                .of(req.headers())
                .map_or(Caller::Anonymous, Caller::Session),
            None => Caller::Anonymous,
        },
    };
    if let Caller::Token(Principal::ApiClient(name)) = &caller
        && let Err(e) = api_client_gate(&state, name, &req)
    {
        return e.into_response();
    }
    let kind = caller.kind();
    let Some(route) = route.filter(|r| r.allows(kind)) else {
        return match (kind, route) {
            (Kind::Anonymous, Some(Route::ConsolePage)) => to_login(),
            (Kind::Anonymous, Some(r)) if r.console() => ApiError::new(
                ErrorCode::Unauthorized,
                "no console login (log in at /login)",
            )
            .into_response(),
            (Kind::Anonymous, _) => ApiError::new(
                ErrorCode::Unauthorized,
                "missing Authorization: Bearer <token>",
            )
            .into_response(),
            _ => ApiError::new(
                ErrorCode::Forbidden,
                format!("this token may not {} {path}", req.method()),
            )
            .into_response(),
        };
    };
    if route.console() && route.changes_state() {
        let checked = check_origin(req.headers()).and_then(|()| match &caller {
            Caller::Session(session) => check_csrf(req.headers(), session),
            _ => Ok(()),
        });
        if let Err(e) = checked {
            return e.into_response();
        }
    }
    match caller {
        Caller::Token(who) => {
            req.extensions_mut().insert(who);
        }
        Caller::Session(session) => {
            req.extensions_mut().insert(session);
        }
        Caller::Anonymous => {}
    }
    next.run(req).await
}

/// For requests no route matched: 401 without a valid token, 403 for an API client (whose
/// token opens nothing but its message route), else `None` so the caller answers 404 or 405.
pub fn gate_unrouted(state: &AppState, req: &Request<Body>) -> Option<ApiError> {
    match authenticate(state, req.headers()) {
        Err(e) => Some(e),
        Ok(Principal::ApiClient(name)) => {
            Some(api_client_gate(state, &name, req).err().unwrap_or_else(|| {
                ApiError::new(ErrorCode::Forbidden, "this token may not use this route")
            }))
        }
        Ok(_) => None,
    }
}

/// The names and port a TCP request's Host header must carry.
#[derive(Debug, Clone)]
pub struct HostCheck {
    port: u16,
    hosts: HashSet<String>,
}

impl HostCheck {
    /// Loopback names, the bind address when it is specific, and `allowed_hosts`.
    pub fn new(port: u16, bind: std::net::IpAddr, allowed: &[String]) -> HostCheck {
        let mut hosts: HashSet<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        if !bind.is_unspecified() {
            hosts.insert(bind.to_string());
        }
        hosts.extend(allowed.iter().map(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase()
        }));
        HostCheck { port, hosts }
    }

    /// True when `host` (a Host header value) names an allowed host with our port.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        port == self.port && self.hosts.contains(&name.to_ascii_lowercase())
    }
}

/// `name:port` or `[v6]:port` → (name, port). A missing port is `None`.
fn split_host(host: &str) -> Option<(&str, u16)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        (name, after.strip_prefix(':')?)
    } else {
        let (name, port) = host.rsplit_once(':')?;
        if name.contains(':') {
            return None;
        }
        (name, port)
    };
    if name.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, port.parse().ok()?))
}

/// Outer TCP layer: the Host check, before auth.
pub async fn check_host(
    State(check): State<Arc<HostCheck>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    match host {
        Some(h) if check.allows(h) => next.run(req).await,
        _ => (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "forbidden host",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_header_variants() {
        let c = HostCheck::new(
            8370,
            [127, 0, 0, 1].into(),
            &["leo".into(), "[fd00::1]".into()],
        );
        for (host, ok) in [
            ("127.0.0.1:8370", true),
            ("localhost:8370", true),
            ("LOCALHOST:8370", true),
            ("[::1]:8370", true),
            ("leo:8370", true),
            ("[fd00::1]:8370", true),
            ("127.0.0.1", false),
            ("leo", false),
            ("127.0.0.1:8371", false),
            ("evil.example:8370", false),
            ("::1:8370", false),
            ("[::1]", false),
            ("[::1]8370", false),
            ("127.0.0.1:", false),
            ("127.0.0.1:99999", false),
            (":8370", false),
        ] {
            assert_eq!(c.allows(host), ok, "{host}");
        }
    }

    #[test]
    fn every_route_has_a_policy_row() {
        for r in [
            Route::Events,
            Route::RegisterTools,
            Route::ListTools,
            Route::Pending,
            Route::Claim,
            Route::Result,
            Route::Cancel,
            Route::Approve,
            Route::Status,
            Route::Message,
            Route::LoginPage,
            Route::Login,
            Route::Logout,
            Route::ConsolePage,
            Route::ConsoleAsset,
            Route::ConsoleSession,
            Route::ConsoleEvents,
            Route::ConsoleCancel,
            Route::ConsoleAnswer,
            Route::AskHuman,
            Route::ConsoleApprove,
        ] {
            assert!(POLICY.iter().any(|(x, _)| *x == r), "{r:?}");
            let public = r.allows(Kind::Anonymous);
            assert_eq!(
                r.allows(Kind::Session),
                r.console(),
                "{r:?}: sessions open console routes only"
            );
            assert!(!r.allows(Kind::ApiClient) || r == Route::Message, "{r:?}");
            assert!(!public || r.console() && !r.changes_state() || r == Route::Login);
        }
        assert!(!Route::Claim.allows(Kind::Agent));
        assert!(Route::Events.allows(Kind::Agent));
        assert!(!Route::Events.allows(Kind::ApiClient));
        assert!(Route::Message.allows(Kind::ApiClient));
        assert!(Route::Cancel.allows(Kind::Operator));
        assert!(!Route::Cancel.allows(Kind::Device));
        assert!(Route::Approve.allows(Kind::Operator));
        assert!(!Route::Approve.allows(Kind::Device));
        assert!(!Route::Approve.allows(Kind::Agent));
        assert_eq!(message_target("/web/agent/rocket/message"), Some("rocket"));
        assert_eq!(message_target("/web/agent//message"), None);
        assert_eq!(message_target("/web/agent/a/b/message"), None);
    }
}
