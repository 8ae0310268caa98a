//! `/mcp`: MCP over Streamable HTTP, for a harness that reaches the broker over the network (a
//! container, another host) instead of launching `leo-mcp`.
//!
//! The broker owns who may call, as on every route: the Host check (the outer TCP layer), then
//! the `Origin` check the MCP specification requires against DNS rebinding (the console's one
//! rule, `console::guard::check_origin`: present, it must be this very origin, `https://<Host>`
//! under `web.tls`), then the token
//! (`AgentKeys::identify`: an agent's own token opens its agent; the shared agent token opens
//! the agent named in `Leo-Agent`; every other kind of token is refused), then the body limit,
//! then, for a request that may open a session, the limits of sessions over the network
//! (`ipc::Door::remote_slot`: the agent's own, and the share the unix sockets keep).
//! A refusal is a JSON-RPC error body (`leo_protocol::jsonrpc`), since an MCP client reads
//! nothing else.
//!
//! What the agent then sees is not written here. The `leo` binary mounts `leo-mcp`'s own MCP
//! server (`Mount`), the one implementation of what an agent sees, and each MCP session it
//! opens is a sidecar session: it reaches `ipc::Door` through an in-process pipe (`Pipe`), says
//! `hello` with the caller's token, and from then on is a session like any other (status,
//! history, audit, `web.max_sessions`). So this library knows no MCP and depends on no MCP crate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use leo_protocol::ErrorCode;
use leo_protocol::jsonrpc::ErrorResponse;
use leo_protocol::names::AgentName;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::auth::{bearer, kind_of};
use super::console::guard::check_origin;
use super::rules::Route;
use crate::refusal::Refusal;
use crate::tokens::Principal;

/// The header that names an MCP session; a `POST` without it may open one.
const SESSION_HEADER: &str = "mcp-session-id";
/// Bytes buffered each way in a session's in-process pipe.
const PIPE_BYTES: usize = 64 * 1024;

/// A response being made.
pub type Responding = Pin<Box<dyn Future<Output = Response> + Send>>;

/// What serves MCP at `/mcp`: given by the `leo` binary, called only for a request that
/// passed every check, with who it is from.
pub trait Mount: Send + Sync + 'static {
    fn serve(&self, caller: Caller, request: Request<Body>) -> Responding;
}

/// Makes the mount each time a core runs (once, but for a cluster's instance that leads
/// again after it was deposed): it gets the pipe into that core's sidecar sessions, and the
/// token that is cancelled when that core stops.
pub type MakeMount = Box<dyn Fn(Pipe, CancellationToken) -> Arc<dyn Mount> + Send>;

/// Who a checked `/mcp` request is from: the agent its token opens, and the token, which the
/// session's `hello` presents again (the one check every session passes).
#[derive(Clone)]
pub struct Caller {
    pub agent: AgentName,
    pub token: String,
    /// For a request that may open a session (a `POST` naming none): its place among the
    /// sessions over the network (`ipc::RemoteSlot`), which the session it opens keeps while it
    /// lives; dropped with the request otherwise.
    pub hold: Option<Hold>,
}

/// What a session keeps while it lives, whatever it is.
pub type Hold = Arc<dyn std::any::Any + Send + Sync>;

/// Opens in-process connections to the broker's sidecar door.
#[derive(Clone)]
pub struct Pipe(crate::ipc::Door);

impl Pipe {
    pub(crate) fn new(door: crate::ipc::Door) -> Pipe {
        Pipe(door)
    }

    /// A new connection: the broker runs the other end as a sidecar session after its hello,
    /// under the one `web.max_sessions` budget.
    pub fn open(&self) -> tokio::io::DuplexStream {
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        self.0.admit(theirs);
        ours
    }
}

/// The handler of `Route::Mcp`.
pub async fn serve(State(state): State<Arc<AppState>>, request: Request<Body>) -> Response {
    let Some(mount) = state.mcp.clone() else {
        return refusal(Refusal::new(
            ErrorCode::NotFound,
            "this broker serves no MCP over HTTP",
        ));
    };
    let forwarded = request
        .extensions()
        .get::<crate::cluster::gate::Forwarded>()
        .is_some();
    let checked = check(&state, request.headers(), forwarded)
        .await
        .and_then(|mut caller| {
            let opens = request.method() == axum::http::Method::POST
                && !request.headers().contains_key(SESSION_HEADER);
            if opens {
                caller.hold = Some(Arc::new(state.sidecars.remote_slot(&caller.agent)?));
            }
            Ok(caller)
        });
    match checked {
        Ok(caller) => {
            let span =
                tracing::info_span!("mcp", agent = %caller.agent, method = %request.method());
            tracing::Instrument::instrument(mount.serve(caller, request), span).await
        }
        Err(e) => {
            let unauthorized = e.code == ErrorCode::Unauthorized;
            let mut response = refusal(e);
            if unauthorized && (state.oauth.is_some() || state.issuer.is_some()) {
                // RFC 9728 §5.1: where an MCP client finds how to get a token.
                let invalid = bearer(request.headers()).is_some();
                let value = super::oauth::challenge(&state, request.headers(), invalid);
                if let Ok(value) = header::HeaderValue::from_str(&value) {
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, value);
                }
            }
            response
        }
    }
}

/// The checks of a `/mcp` request after the Host check, in order: Origin (a follower's, for
/// what it `forwarded`), token, body limit.
async fn check(state: &AppState, headers: &HeaderMap, forwarded: bool) -> Result<Caller, Refusal> {
    if !forwarded {
        check_origin(headers, state.https)?;
    }
    let Some(token) = bearer(headers) else {
        return Err(Refusal::new(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <agent token>",
        ));
    };
    let named = super::auth::named_agent(headers)?;
    if token.starts_with(leo_protocol::oauth::ACCESS_PREFIX) {
        return oauth_caller(state, headers, token, named.as_ref());
    }
    if let Some(issuer) = state.issuer.as_ref()
        && crate::issuer::looks_like_jwt(token)
    {
        let agent = issuer
            .verify(token)
            .await
            .map_err(|why| Refusal::new(ErrorCode::Unauthorized, why))?;
        return opened(state, headers, token, agent, named.as_ref());
    }
    // A token the table does not know may still be an agent's own (`state/agents/`).
    match state.tokens.lookup(token) {
        Some(who) if !Route::Mcp.allows(kind_of(&who)) => return Err(wrong_kind(&who)),
        _ => {}
    }
    let agent = state.sidecars.identify(token, named.as_ref())?;
    checked(state, headers, agent, token)
}

/// The caller, once its token named `agent`: the body limit.
fn checked(
    state: &AppState,
    headers: &HeaderMap,
    agent: AgentName,
    token: &str,
) -> Result<Caller, Refusal> {
    let limit = Route::Mcp.body_limit(state.max_body);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(super::reply::too_large(limit));
    }
    Ok(Caller {
        agent,
        token: token.to_owned(),
        hold: None,
    })
}

/// An OAuth access token: valid, unexpired, for this resource (its `aud`), it opens its
/// grant's agent, and no other that `Leo-Agent` names.
fn oauth_caller(
    state: &AppState,
    headers: &HeaderMap,
    token: &str,
    named: Option<&AgentName>,
) -> Result<Caller, Refusal> {
    let Some(oauth) = &state.oauth else {
        return Err(Refusal::new(
            ErrorCode::Unauthorized,
            "this broker accepts no OAuth access tokens (auth.oauth is off)",
        ));
    };
    let resource = super::oauth::resource_url(state, headers);
    let access = oauth
        .verify(token, &resource)
        .map_err(|e| Refusal::new(ErrorCode::Unauthorized, e.description))?;
    opened(state, headers, token, access.agent, named)
}

/// An access token that opens `agent`: no other that `Leo-Agent` names.
fn opened(
    state: &AppState,
    headers: &HeaderMap,
    token: &str,
    agent: AgentName,
    named: Option<&AgentName>,
) -> Result<Caller, Refusal> {
    if let Some(other) = named.filter(|a| **a != agent) {
        return Err(Refusal::new(
            ErrorCode::Forbidden,
            format!(
                "this access token opens agent {:?}, not {other:?}",
                agent.as_str()
            ),
        ));
    }
    checked(state, headers, agent, token)
}

/// The refusal of a token that is not an agent's, by the policy table.
fn wrong_kind(who: &Principal) -> Refusal {
    let name = match who {
        Principal::Operator => "the operator token",
        Principal::Device(_) => "a device token",
        Principal::ApiClient(_) => "an API client's token",
        Principal::Agent => "the agent token",
    };
    Refusal::new(
        ErrorCode::Forbidden,
        format!("{name} cannot open /mcp; give an agent token"),
    )
}

/// A refusal as the JSON-RPC error body an MCP client reads, with the status of its code.
pub(crate) fn refusal(e: Refusal) -> Response {
    crate::metrics::global().rejected(crate::metrics::Door::Http, e.code);
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (
        status,
        axum::Json(ErrorResponse::refusal(e.code, &e.message)),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}
