//! `GET /api/v1/ipc` with `Upgrade: leo-ipc`: the sidecar IPC over the TCP listener, for a
//! `leo-mcp --url` on another host or in a container, which cannot reach `run/sidecar.sock`.
//!
//! The request passes what every request passes first (the Host check on TCP, then the route
//! table's callers: the shared agent token or an agent's own token, nothing else), then this
//! handler decides whose session it is before it upgrades, so that a refused caller gets an
//! HTTP answer with the JSON error body, not a frame: an agent's own token names its agent
//! (`Leo-Agent`, if sent, must agree); the shared agent token must name one with `Leo-Agent:
//! NAME`, under the hello's rule (a name with its own token refuses it). After `101 Switching
//! Protocols` the connection is handed to the one door of sidecar sessions (`ipc::Door`),
//! whose hello must then repeat that agent and token: the upgrade authenticates, the hello
//! cannot switch identity. A browser cannot send this upgrade, and a request with an `Origin`
//! is refused all the same.
//!
//! The session keeps its TCP connection's place in `web.max_connections` (`ConnSlot`) and its
//! place among the sessions over the network (`ipc::RemoteSlot`: the network's share of
//! `web.max_sessions`, and the agent's `web.max_sessions_per_agent`) for as long as it lives; a
//! caller past either limit is refused `403` before anything is upgraded.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use leo_protocol::ErrorCode;
use leo_protocol::ipc::{AGENT_HEADER, UPGRADE_PROTOCOL};
use tracing::{debug, info};

use super::AppState;
use super::serve::ConnSlot;
use crate::agent_tokens::AgentKeys;
use crate::ipc::Bound;
use crate::refusal::Refusal;
use crate::tokens::{Principal, TokenBook};

/// Upgrades an agent's request to a sidecar session.
#[tracing::instrument(name = "ipc_upgrade", skip_all)]
pub async fn upgrade(
    State(state): State<Arc<AppState>>,
    slot: Option<Extension<ConnSlot>>,
    mut req: Request,
) -> Result<Response, Refusal> {
    let piped = req
        .extensions()
        .get::<crate::cluster::gate::Forwarded>()
        .cloned();
    if let Some(forwarded) = &piped
        && forwarded.pipe
    {
        if asks_for(req.headers(), crate::cluster::link::UPGRADE) {
            return link(&state, forwarded.clone(), slot, &mut req);
        }
        check_upgrade(req.headers())?;
        return piped_session(&state, forwarded.clone(), slot, &mut req);
    }
    let bound = who_upgrades(state.sidecars.keys(), &state.tokens, req.headers())?;
    // Over TCP (the connection holds a place of the listener): a session over the network. On
    // `run/leo.sock` it is a local one, as on `run/sidecar.sock`.
    let remote = match &slot {
        Some(_) => Some(state.sidecars.remote_slot(&bound.agent)?),
        None => None,
    };
    let door = state.sidecars.clone();
    let hold = (slot.map(|Extension(s)| s), remote);
    let via = piped.map(|f| f.via);
    let agent = bound.agent.clone();
    let switched = switch(&state, &mut req, UPGRADE_PROTOCOL, move |io| async move {
        door.admit_via(io, Some(bound), hold, via);
    })?;
    info!(agent = %agent, "IPC upgrade accepted");
    Ok(switched)
}

/// Whose session an IPC upgrade opens, decided before anything is upgraded or forwarded: the
/// one check of the leader's route and of a follower's front (`front`), which must not send
/// on what the leader would refuse. The upgrade's headers (`check_upgrade`), then the bearer
/// token: an agent's own token names its agent (`Leo-Agent`, if sent, must agree); the shared
/// agent token must name one with `Leo-Agent: NAME`, under the hello's rule (a name with its
/// own token refuses it); any other token of the table is `403`, no token or an unknown one
/// `401`.
pub fn who_upgrades(
    keys: &AgentKeys,
    tokens: &TokenBook,
    headers: &HeaderMap,
) -> Result<Bound, Refusal> {
    check_upgrade(headers)?;
    let token = super::auth::bearer(headers)
        .ok_or_else(|| Refusal::new(ErrorCode::Unauthorized, "missing Authorization: Bearer"))?;
    let named = super::auth::named_agent(headers)?;
    let agent = match keys.owner_of(token) {
        Some(name) => match named {
            Some(other) if other != name => {
                return Err(Refusal::new(
                    ErrorCode::Forbidden,
                    format!("this token is agent {name:?}'s; {AGENT_HEADER} names {other:?}"),
                ));
            }
            _ => name,
        },
        None => match tokens.lookup(token) {
            Some(Principal::Agent) => {
                let name = named.ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::InvalidParameter,
                        format!("the shared agent token must name its agent: {AGENT_HEADER}: NAME"),
                    )
                })?;
                keys.check_bearer(&name, token)?;
                name
            }
            Some(_) => {
                return Err(Refusal::new(
                    ErrorCode::Forbidden,
                    format!("this token may not GET {}", leo_protocol::ipc::UPGRADE_PATH),
                ));
            }
            None => return Err(Refusal::new(ErrorCode::Unauthorized, "unknown token")),
        },
    };
    Ok(Bound {
        agent,
        token: token.to_owned(),
    })
}

/// A follower's pipe for one sidecar on its `run/sidecar.sock`, as followers of a version
/// before links open it (during a rolling upgrade; this version's carry sessions on a
/// [`link`]): the session is admitted as on this instance's own socket, its hello's token
/// checked by the door.
fn piped_session(
    state: &AppState,
    forwarded: crate::cluster::gate::Forwarded,
    slot: Option<Extension<ConnSlot>>,
    req: &mut Request,
) -> Result<Response, Refusal> {
    let door = state.sidecars.clone();
    let hold = slot.map(|Extension(s)| s);
    info!(via = %forwarded.via, "sidecar connection piped from a follower");
    switch(state, req, UPGRADE_PROTOCOL, move |io| async move {
        door.admit_via(io, None, hold, Some(forwarded.via));
    })
}

/// A follower's link (`cluster::link`), which carries its agents' sessions: each stream on it
/// is admitted by [`carried`] as a session piped from that follower.
fn link(
    state: &AppState,
    forwarded: crate::cluster::gate::Forwarded,
    slot: Option<Extension<ConnSlot>>,
    req: &mut Request,
) -> Result<Response, Refusal> {
    let door = state.sidecars.clone();
    let tokens = state.tokens.clone();
    let hold = slot.map(|Extension(s)| s);
    let stop = state.broker.shutdown_token();
    let via = forwarded.via;
    switch(
        state,
        req,
        crate::cluster::link::UPGRADE,
        move |io| async move {
            let carried = |stream| {
                tokio::spawn(carried(stream, door.clone(), tokens.clone(), via.clone()));
            };
            crate::cluster::link::serve(io, carried, &via, hold, stop).await;
        },
    )
}

/// One stream of a follower's link: its preface says whose session it carries; the session is
/// then admitted as one of the follower's socket (its hello checked by the door), or, for one
/// that reached the follower over the network, checked first as [`upgrade`] checks one that
/// reaches this instance, and answered.
async fn carried(
    mut stream: crate::cluster::link::Carried,
    door: crate::ipc::Door,
    tokens: TokenBook,
    via: String,
) {
    use crate::cluster::link::{Answer, Preface, read_line, write_line};
    let line = tokio::time::timeout(crate::ipc::HELLO_TIMEOUT, read_line(&mut stream)).await;
    let preface = match line.map(|l| l.map(|l| serde_json::from_slice::<Preface>(&l))) {
        Ok(Ok(Ok(preface))) => preface,
        Ok(Ok(Err(e))) => return info!(via = %via, error = %e, "a link's stream: bad preface"),
        _ => return debug!(via = %via, "a link's stream ended before its preface"),
    };
    let (authorization, agent) = match preface {
        Preface::Socket => return door.admit_via(stream, None, (), Some(via)),
        Preface::Network {
            authorization,
            agent,
        } => (authorization, agent),
    };
    match network_session(&door, &tokens, &authorization, agent.as_deref()) {
        Ok((bound, remote)) => {
            let open = Answer {
                status: StatusCode::SWITCHING_PROTOCOLS.as_u16(),
                body: None,
            };
            if write_line(&mut stream, &open).await.is_ok() {
                info!(agent = %bound.agent, via = %via, "IPC upgrade accepted through a follower");
                door.admit_via(stream, Some(bound), remote, Some(via));
            }
        }
        Err(refusal) => {
            let response = refusal.into_response();
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
                .await
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let _ = write_line(&mut stream, &Answer { status, body }).await;
        }
    }
}

/// Whose session an upgrade that reached a follower over the network opens, and its place
/// among the sessions over the network: [`who_upgrades`] and the door's `remote_slot` on the
/// upgrade's own headers, as the follower received them.
fn network_session(
    door: &crate::ipc::Door,
    tokens: &TokenBook,
    authorization: &str,
    agent: Option<&str>,
) -> Result<(Bound, crate::ipc::RemoteSlot), Refusal> {
    let bad = |_| Refusal::new(ErrorCode::InvalidParameter, "a header of the upgrade");
    let mut headers = HeaderMap::new();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(UPGRADE_PROTOCOL));
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(authorization).map_err(bad)?,
    );
    if let Some(agent) = agent {
        headers.insert(AGENT_HEADER, HeaderValue::from_str(agent).map_err(bad)?);
    }
    let bound = who_upgrades(door.keys(), tokens, &headers)?;
    let remote = door.remote_slot(&bound.agent)?;
    Ok((bound, remote))
}

/// Whether `Upgrade` asks for `protocol` (and `Connection` says upgrade).
fn asks_for(headers: &HeaderMap, protocol: &str) -> bool {
    let connection = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection
        && headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case(protocol))
}

/// Answers `101 Switching Protocols` to `protocol` and, once hyper has switched the
/// connection, runs `then` on it among the broker's tasks: the one way each of this route's
/// upgrades (an agent's, a follower's pipe or link) leaves HTTP.
fn switch<Fut>(
    state: &AppState,
    req: &mut Request,
    protocol: &'static str,
    then: impl FnOnce(TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
) -> Result<Response, Refusal>
where
    Fut: std::future::Future<Output = ()> + Send,
{
    let pending = req
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or_else(|| Refusal::new(ErrorCode::Internal, "this connection cannot be upgraded"))?;
    state.broker.tasks().spawn(async move {
        match pending.await {
            Ok(upgraded) => then(TokioIo::new(upgraded)).await,
            Err(e) => debug!(error = %e, protocol, "an upgrade did not complete"),
        }
    });
    Ok(switching(protocol))
}

/// The request must ask for this upgrade: `Connection: Upgrade` and `Upgrade: leo-ipc`, and no
/// `Origin` (only a browser sends one, and no browser speaks for an agent).
fn check_upgrade(headers: &HeaderMap) -> Result<(), Refusal> {
    if headers.contains_key(header::ORIGIN) {
        return Err(Refusal::new(
            ErrorCode::Forbidden,
            "Origin: the IPC upgrade is not for browsers",
        ));
    }
    if asks_for(headers, UPGRADE_PROTOCOL) {
        Ok(())
    } else {
        Err(Refusal::new(
            ErrorCode::InvalidParameter,
            format!(
                "Upgrade: this route takes Connection: Upgrade and Upgrade: {UPGRADE_PROTOCOL}"
            ),
        ))
    }
}

/// `101 Switching Protocols` to `protocol`.
pub(crate) fn switching(protocol: &'static str) -> Response {
    let mut response = (StatusCode::SWITCHING_PROTOCOLS, Body::empty()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(protocol));
    response
}
