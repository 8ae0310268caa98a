//! Who may do what: the Host check for TCP, and the route × caller policy table, applied to
//! real requests (the rules themselves are pure, in `rules`).
//!
//! The Host check comes first on TCP, before any token is looked at: a request whose Host
//! header (or absolute-form target) is not an allowed name with the listener's port gets a
//! plain `403 forbidden host` (DNS rebinding protection), which an operator can tell apart from
//! a JSON scope denial; two Host headers are a malformed request (`400`). Then every route
//! states, in `Route::callers`, which kinds of caller may call it; that is an exhaustive
//! `match`, so a new route does not compile until someone decides who may call it.
//!
//! Nothing of a body is read here: a caller that fails these checks is answered before a byte
//! of its body is taken, and one that passes gets its route's body limit (`BodyLimit`). A body
//! that announces more than that is refused here too, before its handler runs.
//!
//! The message route's target is percent-decoded once, here, and checked against the agent
//! name rule and the API client's scope; the handler delivers to that same decoded `Target`.
//!
//! A caller is a bearer token's principal, a web-console session (the `leo_session` cookie,
//! looked at on console routes only and only when no bearer token is sent, so a cookie never
//! opens an API route), or nobody. State-changing console requests then pass the console's
//! CSRF defences (`console::guard`) before their handler runs.
//!
//! `/mcp` is the one route that makes these checks itself (`mcp::check`, by the same table and
//! the same Origin rule), after the same Host check: an agent's own token is not a principal of
//! the token table, and an MCP client must read its refusals as JSON-RPC.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{MatchedPath, State};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leo_protocol::ErrorCode;
use leo_protocol::ipc::AGENT_HEADER;

use super::AppState;
use super::console::guard::{check_csrf, check_origin};
use super::console::pages::to_login;
use super::console::session::Session;
use super::rules::{HostCheck, HostRefusal, Kind, Route, decode_target, message_segment};
use crate::refusal::Refusal;
use crate::tokens::Principal;
use leo_protocol::names::AgentName;

/// The message route's target, decoded once and checked; what the handler delivers to.
#[derive(Debug, Clone)]
pub struct Target(pub AgentName);

/// The largest body the matched route reads.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Who is calling.
enum Caller {
    Token(Principal),
    /// An agent's own token, on a route that takes it (its handler finds the agent).
    OwnAgent,
    Session(Session),
    Anonymous,
}

impl Caller {
    fn kind(&self) -> Kind {
        match self {
            Caller::Token(who) => kind_of(who),
            Caller::OwnAgent => Kind::OwnAgent,
            Caller::Session(s) if s.is_device() => Kind::DeviceSession,
            Caller::Session(_) => Kind::Session,
            Caller::Anonymous => Kind::Anonymous,
        }
    }
}

/// The kind of caller a token's principal is, for the policy table.
pub fn kind_of(who: &Principal) -> Kind {
    match who {
        Principal::Operator => Kind::Operator,
        Principal::Device(_) => Kind::Device,
        Principal::Agent => Kind::Agent,
        Principal::ApiClient(_) => Kind::ApiClient,
    }
}

/// `Leo-Agent: NAME`, if sent, held to the agent-name rule.
pub fn named_agent(headers: &HeaderMap) -> Result<Option<AgentName>, Refusal> {
    let Some(value) = headers.get(AGENT_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| AgentName::parse(v.trim()).ok())
        .map(Some)
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidParameter,
                format!("{AGENT_HEADER}: not an agent name (1 to 64 of A-Z a-z 0-9 _ . -)"),
            )
        })
}

/// The bearer token of a request, if it has one.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Who presented the request's token, or the 401 to answer.
pub fn authenticate(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, Refusal> {
    let Some(token) = bearer(headers) else {
        return Err(Refusal::new(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <token>",
        ));
    };
    state
        .tokens
        .lookup(token)
        .ok_or_else(|| Refusal::new(ErrorCode::Unauthorized, UNKNOWN_TOKEN))
}

/// Why a bearer token that is no token of this broker is refused, and where tokens come from.
pub const UNKNOWN_TOKEN: &str = "unknown token: this broker has no such token (an app uses \
    $LEO_HOME/state/operator.token, or a device token from `leo device pair NAME`; a client \
    that sends messages, one from `leo client add NAME`; each works at once, without a restart)";

/// The message route's target of `req`, decoded, or the `400` for one that is not an agent.
fn target_of(req: &Request<Body>) -> Option<Result<Target, Refusal>> {
    let segment = message_segment(req.uri().path())?;
    Some(
        decode_target(segment)
            .map(Target)
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, m)),
    )
}

/// The API-client check, run before any other: such a token may only post a message to an
/// agent its `can_message` allows (or call the approval routes, which `authorize` lets through
/// to the core's approver check); everything else, routed or not, is 403. The scope is
/// matched against the decoded target, the one the message is delivered to.
fn api_client_gate(state: &AppState, name: &str, req: &Request<Body>) -> Result<Target, Refusal> {
    let target = (req.method() == Method::POST)
        .then(|| target_of(req))
        .flatten();
    let Some(target) = target else {
        return Err(Refusal::new(
            ErrorCode::Forbidden,
            format!("client {name:?} may only post to /web/agent/<target>/message"),
        ));
    };
    let target = target?;
    if state.tokens.may_message(name, &target.0) {
        Ok(target)
    } else {
        Err(Refusal::new(
            ErrorCode::Forbidden,
            format!("client {name:?} is not permitted to message {:?}", target.0),
        ))
    }
}

/// Route layer: finds the caller (token, console session, or nobody), runs the API-client
/// check, applies `Route::callers`, then the console's CSRF defences.
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
    let route = Route::of(req.method().as_str(), &path);
    if route.is_some_and(Route::checks_itself) {
        return next.run(req).await;
    }
    if route == Some(Route::Ipc)
        && req
            .extensions()
            .get::<crate::cluster::gate::Forwarded>()
            .is_some_and(|f| f.pipe)
    {
        // A follower's pipe for a sidecar on its socket: the hello's token is checked by
        // `ipc::Door`, as on this instance's own socket (`ipc::upgrade`).
        return next.run(req).await;
    }
    let caller = match bearer(req.headers()) {
        Some(token) => match authenticate(&state, req.headers()) {
            Ok(who) => Caller::Token(who),
            Err(e) => match own_agent(&state, route, token) {
                Some(_) => Caller::OwnAgent,
                None => return e.into_response(),
            },
        },
        None => match route.filter(|r| r.console()) {
            Some(_) => state
                .sessions
                .of(req.headers())
                .map_or(Caller::Anonymous, Caller::Session),
            None => Caller::Anonymous,
        },
    };
    let mut target = None;
    // An API client may call the approval routes too; whether it is an approver is the
    // core's rule (`approvals.approvers.api_clients`).
    let approval = matches!(
        route,
        Some(Route::Approvals | Route::ApproveCall | Route::DenyCall)
    );
    if let Caller::Token(Principal::ApiClient(name)) = &caller
        && !approval
    {
        match api_client_gate(&state, name, &req) {
            Ok(t) => target = Some(t),
            Err(e) => return e.into_response(),
        }
    }
    let kind = caller.kind();
    let Some(route) = route.filter(|r| r.allows(kind)) else {
        return refuse(kind, route, &req, &path);
    };
    if let Err(e) = admit(&state, route, &caller, &mut req, target) {
        return e.into_response();
    }
    match caller {
        Caller::Token(who) => {
            req.extensions_mut().insert(who);
        }
        Caller::Session(session) => {
            req.extensions_mut().insert(session);
        }
        Caller::OwnAgent | Caller::Anonymous => {}
    }
    next.run(req).await
}

/// The agent whose own token `token` is, looked for only on a route that takes such tokens:
/// everywhere else an agent's own token stays unknown (`401`), as it always was.
fn own_agent(state: &AppState, route: Option<Route>, token: &str) -> Option<AgentName> {
    route
        .filter(|r| r.allows(Kind::OwnAgent))
        .and_then(|_| state.sidecars.keys().owner_of(token))
}

/// The answer to a caller `Route::callers` does not admit to `route`.
fn refuse(kind: Kind, route: Option<Route>, req: &Request<Body>, path: &str) -> Response {
    match (kind, route) {
        (Kind::Anonymous, Some(Route::ConsolePage)) => to_login(),
        (Kind::Anonymous, Some(Route::ConsentPage)) => {
            super::console::pages::to_login_then(req.uri().path())
        }
        (Kind::DeviceSession, Some(r)) if r.console() => Refusal::new(
            ErrorCode::Forbidden,
            "a device's console login decides OAuth consents only",
        )
        .into_response(),
        (Kind::Anonymous, Some(r)) if r.console() => Refusal::new(
            ErrorCode::Unauthorized,
            "no console login (log in at /login)",
        )
        .into_response(),
        (Kind::Anonymous, _) => Refusal::new(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <token>",
        )
        .into_response(),
        _ => Refusal::new(
            ErrorCode::Forbidden,
            format!("this token may not {} {path}", req.method()),
        )
        .into_response(),
    }
}

/// The checks after `Route::callers`: the console's CSRF defences, the message route's target
/// (decoded once, unless the API-client gate already did), and the route's body limit, which
/// a declared `Content-Length` must respect before the handler reads anything.
fn admit(
    state: &AppState,
    route: Route,
    caller: &Caller,
    req: &mut Request<Body>,
    target: Option<Target>,
) -> Result<(), Refusal> {
    if route.console() && route.changes_state() {
        check_origin(req.headers(), state.https)?;
        if let Caller::Session(session) = caller {
            check_csrf(req.headers(), session)?;
        }
    }
    if route == Route::Message {
        let target = match target {
            Some(t) => t,
            None => target_of(req)
                .unwrap_or_else(|| Err(Refusal::new(ErrorCode::InvalidParameter, "no target")))?,
        };
        req.extensions_mut().insert(target);
    }
    let limit = route.body_limit(state.max_body);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(super::reply::too_large(limit));
    }
    req.extensions_mut().insert(BodyLimit(limit));
    Ok(())
}

/// For requests no route matched: 401 without a valid token, 403 for an API client (whose
/// token opens nothing but its message route), else `None` so the caller answers 404 or 405.
pub fn gate_unrouted(state: &AppState, req: &Request<Body>) -> Option<Refusal> {
    match authenticate(state, req.headers()) {
        Err(e) => Some(e),
        Ok(Principal::ApiClient(name)) => {
            Some(api_client_gate(state, &name, req).err().unwrap_or_else(|| {
                Refusal::new(ErrorCode::Forbidden, "this token may not use this route")
            }))
        }
        Ok(_) => None,
    }
}

/// Outer TCP layer: the Host check, before auth. The request target's authority counts when
/// the target is in absolute form, and the Host header must be there exactly once.
pub async fn check_host(
    State(check): State<Arc<HostCheck>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    if req
        .extensions()
        .get::<crate::cluster::gate::Forwarded>()
        .is_some()
    {
        // The follower that forwarded it checked the Host its client sent it.
        return next.run(req).await;
    }
    let authority = req.uri().authority().map(|a| a.as_str());
    let hosts = req
        .headers()
        .get_all(header::HOST)
        .iter()
        .map(|h| h.as_bytes());
    let (status, text) = match check.check(authority, hosts) {
        Ok(()) => return next.run(req).await,
        Err(HostRefusal::Malformed) => (StatusCode::BAD_REQUEST, "more than one Host header"),
        Err(HostRefusal::Forbidden) => (StatusCode::FORBIDDEN, "forbidden host"),
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_message_body_holds_the_longest_text() {
        let envelope = 1024;
        assert!(
            super::super::rules::MESSAGE_BODY >= 6 * crate::messages::MAX_TEXT_BYTES + envelope
        );
    }
}
