//! A follower's front: while another instance of the cluster leads the database, this one
//! serves its listeners as a reverse proxy to the leader, so apps and agents may connect to
//! any instance and see one broker.
//!
//! Why a proxy and not a second core: every claim, result, timeout and cancel is decided in
//! the leader's memory under its lock, exactly as with one broker (see `store::postgres::lease`
//! for who leads and the fence that keeps a deposed leader from committing). A follower decides
//! nothing; it checks locally what depends on how the client reached *it* (the Host check of
//! its TCP listener, with `serve::accept_until`, its limits and timeouts; the Origin rule of
//! `/mcp`), then sends the request on to the leader's URL with the cluster's key
//! (`Leo-Cluster-Key`) and its own id (`Leo-Via`), which the leader trusts instead of
//! checking Host and Origin again (`gate`). Tokens are checked by the leader, but for an
//! upgrade: that holds one of the leader's sessions for as long as it lives, so the follower
//! checks it first with the leader's own function (`ipc::who_upgrades`) and forwards only what
//! the leader would take.
//!
//! Bodies stream both ways (an SSE stream is a response that never ends), and an HTTP upgrade
//! (`/api/v1/ipc`, `Upgrade: leo-ipc`) is proxied as a byte pipe once both sides switched. A
//! local `leo-mcp` on `run/sidecar.sock` is piped to the leader the same way: the front opens
//! the upgrade with the cluster's key, no token and its mark (`Leo-Sidecar-Pipe`, which no
//! client's request keeps), and the leader's `ipc::Door` checks the
//! hello's token as it does on its own socket. A sidecar's pipe (either way in) ends with a
//! line saying the sidecar left (`pipe`), so that the leader tells a `leo-mcp` that stopped
//! (its calls end) from this instance lost (its calls wait for the `leo-mcp` to resume
//! elsewhere). `/metrics` is answered here: it is per instance, and so are the probes
//! (`/healthz`, `/readyz`, see `health`).
//!
//! With no reachable leader (it was just killed; the lease has not lapsed yet), HTTP is
//! answered `503 store_unavailable` and sidecar connections are closed: apps and `leo-mcp`
//! retry by their own reconnect rules. A request that already carries the cluster's key came
//! from a peer's front; it is never forwarded again (no loop while two instances disagree for
//! a moment on who leads). When this instance takes the lease, [`Front::stop`] ends every
//! connection it was forwarding (their upstream was the old leader anyway) and gives the
//! listeners back to the broker that now runs on them.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use leo_protocol::ErrorCode;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::gate::{CLUSTER_KEY, PIPE, VIA};
use crate::agent_tokens::AgentKeys;
use crate::http::health::{FollowerView, follower_probe};
use crate::http::rules::HostCheck;
use crate::http::serve::{TcpBudget, accept_until};
use crate::http::tls::ServerTls;
use crate::refusal::Refusal;
use crate::server::Listeners;
use crate::tokens::{Principal, TokenBook};

/// How long connecting to the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections to the leader kept open for the next requests, at most.
const POOL: usize = 32;
/// How long a stopped front keeps the connections it had accepted, answering each request
/// still on its way `503 store_unavailable` with `Connection: close`, before it cuts them. A
/// client whose request was in flight as this instance began to lead (or stopped) hears
/// "retry in a moment" instead of a reset connection; the listeners go to the core at once.
const DRAIN: Duration = Duration::from_secs(2);

/// The leader, as a follower forwards to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    https: bool,
    host: String,
    port: u16,
    /// `host:port`, the Host of what the front opens itself (the sidecar pipe).
    authority: String,
    key: HeaderValue,
}

/// Why the front may not forward to a leader's URL, or could not reach the leader; logged
/// with its chain (`error_chain`), answered `503` to the client.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("the leader's URL {url:?}")]
    Url {
        url: String,
        #[source]
        source: axum::http::uri::InvalidUri,
    },
    #[error("the leader's URL {url:?} is not http:// or https://")]
    Scheme { url: String },
    #[error("the leader's URL {url:?} names no host")]
    NoHost { url: String },
    #[error(
        "the leader's URL {url:?} is plain http, which would carry the clients' tokens and the \
         cluster's key unchecked: {allowed}"
    )]
    Plain { url: String, allowed: &'static str },
    #[error("the cluster's key cannot be sent in a header")]
    Key,
    #[error("connecting to {0} timed out")]
    ConnectTimeout(String),
    #[error("cannot connect to {authority}")]
    Connect {
        authority: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS with {authority}")]
    Tls {
        authority: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP with {authority}")]
    Http {
        authority: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the request's target")]
    Target(#[source] axum::http::uri::InvalidUri),
    #[error("cannot build the request")]
    Request(#[source] axum::http::Error),
    #[error("the leader did not answer")]
    NoAnswer(#[source] hyper::Error),
    #[error("the leader answered {0}")]
    Status(StatusCode),
    #[error("the upgrade did not complete")]
    Upgrade(#[source] hyper::Error),
}

impl Upstream {
    /// The leader at `url` (`https://`, a host and a port), forwarded to with `key`; an
    /// `http://` URL only when `plain_loopback` (`cluster.plain_http_on_loopback`) and its
    /// host is a loopback address: secrets go to no leader whose certificate was not checked,
    /// but on this very host.
    pub fn new(url: &str, key: &str, plain_loopback: bool) -> Result<Upstream, LeaderError> {
        let url_ = || url.to_owned();
        let uri: Uri = url.parse().map_err(|source| LeaderError::Url {
            url: url_(),
            source,
        })?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(LeaderError::Scheme { url: url_() }),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| LeaderError::NoHost { url: url_() })?;
        if !(https || plain_loopback && is_loopback(authority.host())) {
            let allowed = if plain_loopback {
                "cluster.plain_http_on_loopback allows a loopback address only"
            } else {
                "instances speak https to each other (web.tls); for instances on one host, \
                 cluster.plain_http_on_loopback: true allows http on loopback"
            };
            return Err(LeaderError::Plain {
                url: url_(),
                allowed,
            });
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let key = HeaderValue::from_str(key).map_err(|_| LeaderError::Key)?;
        Ok(Upstream {
            https,
            host: authority.host().to_owned(),
            port,
            authority: authority.as_str().to_owned(),
            key,
        })
    }
}

/// Whether `host` (of a URL, IPv6 in brackets) is this host's loopback.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What a front serves with, besides its listeners.
pub struct FrontConfig {
    /// This instance's id (`Leo-Via`, and the `instance` label of its metrics).
    pub me: String,
    /// The token table, for `/metrics` (the operator's alone, as on the leader) and the IPC
    /// upgrade's check.
    pub tokens: TokenBook,
    /// Which tokens open which agent's sessions: an IPC upgrade is checked here before it is
    /// forwarded (`ipc::who_upgrades`).
    pub keys: AgentKeys,
    /// The Host check of the TCP listener (and of `metrics.bind`'s).
    pub host: Option<Arc<HostCheck>>,
    pub metrics_host: Option<Arc<HostCheck>>,
    /// `web.tls`: the TCP listener serves HTTPS, as it will when this instance leads.
    pub tls: Option<ServerTls>,
    pub budget: TcpBudget,
    /// `web.max_body_bytes`: each route's body limit is applied here too (`limit_body`).
    pub max_body: usize,
    /// How the leader's certificate is checked (`cluster.ca_file`, `LEO_CA_FILE`).
    pub connector: leo_protocol::tls::Connector,
}

/// What every connection of a front shares.
struct Shared {
    me: HeaderValue,
    me_text: String,
    tokens: TokenBook,
    keys: AgentKeys,
    /// The TCP listener serves HTTPS (`web.tls`): a browser's own origin is then `https://`.
    https: bool,
    max_body: usize,
    connector: leo_protocol::tls::Connector,
    leader: RwLock<Option<Arc<Upstream>>>,
    /// The links that carry the sidecar sessions of `run/sidecar.sock` to the leader.
    links: super::link::Links,
    /// Connections to the current leader, kept for reuse: a forwarded claim or result costs no
    /// new TCP (and TLS) handshake. A connection whose response is still streaming is kept
    /// too, and used once it is ready again.
    pool: std::sync::Mutex<Vec<Sender>>,
    /// Whether the leader's last failure was logged as a warning (once per outage).
    warned: AtomicBool,
    /// What `/readyz` answers, as `cluster` last saw the database and the lease.
    view: RwLock<FollowerView>,
    stop: CancellationToken,
}

type Sender = hyper::client::conn::http1::SendRequest<Body>;

impl Shared {
    fn leader(&self) -> Option<Arc<Upstream>> {
        self.leader.read().ok().and_then(|l| l.clone())
    }

    /// A pooled connection ready for a request, if one is.
    fn pooled(&self) -> Option<Sender> {
        let mut pool = self.pool.lock().ok()?;
        pool.retain(|s| !s.is_closed());
        let ready = pool.iter().position(Sender::is_ready)?;
        Some(pool.swap_remove(ready))
    }

    /// Keeps `sender` for a later request, while the pool has room.
    fn keep(&self, sender: Sender) {
        if let Ok(mut pool) = self.pool.lock()
            && pool.len() < POOL
        {
            pool.push(sender);
        }
    }
}

type Served<L> = JoinHandle<(L, JoinSet<()>)>;

/// A running front: its accept loops, each of which gives its listener back at the stop.
pub struct Front {
    shared: Arc<Shared>,
    tcp: Option<Served<TcpListener>>,
    metrics: Option<Served<TcpListener>>,
    api: Served<UnixListener>,
    sidecar: Served<UnixListener>,
}

impl Front {
    /// Serves `listeners` as a front; nothing is forwarded until [`Front::follow`] names the
    /// leader.
    pub fn start(config: FrontConfig, listeners: Listeners) -> Front {
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            me: HeaderValue::from_str(&config.me).unwrap_or(HeaderValue::from_static("?")),
            me_text: config.me,
            https: config.tls.is_some(),
            tokens: config.tokens,
            keys: config.keys,
            max_body: config.max_body,
            connector: config.connector,
            leader: RwLock::new(None),
            links: super::link::Links::default(),
            pool: std::sync::Mutex::new(Vec::new()),
            warned: AtomicBool::new(false),
            view: RwLock::default(),
            stop: stop.clone(),
        });
        let app = |door: Door, host: Option<Arc<HostCheck>>| {
            let router = Router::new()
                .fallback(proxy)
                .with_state((shared.clone(), door));
            match host {
                Some(host) => router.layer(axum::middleware::from_fn_with_state(
                    host,
                    crate::http::auth::check_host,
                )),
                None => router,
            }
        };
        if let Some(tls) = config.tls.clone() {
            // The certificate is reloaded on change or SIGHUP while following too.
            tokio::spawn(tls.watch(stop.clone()));
        }
        let tcp = listeners.tcp.map(|l| {
            let app = app(Door::Tcp, config.host.clone());
            let (budget, tls) = (config.budget.clone(), config.tls.clone());
            tokio::spawn(accept_until("TCP", l, app, budget, tls, stop.clone()))
        });
        let metrics = listeners.metrics.map(|l| {
            let app = app(Door::Metrics, config.metrics_host.clone());
            tokio::spawn(accept_until(
                "metrics",
                l,
                app,
                config.budget.clone(),
                None,
                stop.clone(),
            ))
        });
        let api = tokio::spawn(serve_unix(
            listeners.api,
            app(Door::Unix, None),
            stop.clone(),
        ));
        let sidecar = tokio::spawn(serve_sidecar(listeners.sidecar, shared.clone()));
        Front {
            shared,
            tcp,
            metrics,
            api,
            sidecar,
        }
    }

    /// Forwards to `leader` from now on (`None`: no leader can be reached). The links to the
    /// one before are dropped unless it is the same leader, URL and key.
    pub fn follow(&self, leader: Option<Upstream>) {
        if let Ok(mut l) = self.shared.leader.write() {
            if l.as_deref() != leader.as_ref() {
                self.shared.links.clear();
            }
            *l = leader.map(Arc::new);
        }
        if let Ok(mut pool) = self.shared.pool.lock() {
            pool.clear();
        }
    }

    /// What `/readyz` answers from now on.
    pub fn view(&self, view: FollowerView) {
        if let Ok(mut v) = self.shared.view.write() {
            *v = view;
        }
    }

    /// Stops accepting, gives the connections it had accepted [`DRAIN`] to end, and the listeners
    /// back; `None` if an accept loop ended abnormally (a panic), when they cannot be had.
    pub async fn stop(self) -> Option<Listeners> {
        self.shared.stop.cancel();
        async fn back<L>(served: Served<L>) -> Option<L> {
            let (listener, connections) = served.await.ok()?;
            tokio::spawn(drain(connections));
            Some(listener)
        }
        let tcp = match self.tcp {
            Some(t) => Some(back(t).await?),
            None => None,
        };
        let metrics = match self.metrics {
            Some(m) => Some(back(m).await?),
            None => None,
        };
        Some(Listeners {
            tcp,
            metrics,
            api: back(self.api).await?,
            sidecar: back(self.sidecar).await?,
        })
    }
}

/// Lets a stopped front's connections end on their own within [`DRAIN`], then cuts the rest.
async fn drain(mut connections: JoinSet<()>) {
    let ended = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN, ended).await.is_err() {
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    Tcp,
    Metrics,
    Unix,
}

/// Every request of a front: answered here (the probes, `/metrics`, a refusal) or forwarded.
async fn proxy(State((shared, door)): State<(Arc<Shared>, Door)>, req: Request<Body>) -> Response {
    if shared.stop.is_cancelled() {
        // Stopped while this request was on its way (`DRAIN`): the client retries, on a
        // new connection, whichever stage serves the listeners by then.
        let mut answer = no_leader("this instance is changing its role; retry in a moment");
        answer
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return answer;
    }
    let path = req.uri().path();
    if let Ok(view) = shared.view.read()
        && let Some(answer) = follower_probe(req.method().as_str(), path, &shared.me_text, &view)
    {
        return answer;
    }
    let epoch = shared.links.epoch();
    let leader = shared.leader();
    if let (Some(presented), Some(up)) = (req.headers().get(CLUSTER_KEY), &leader)
        && crate::agent_tokens::ct_eq_bytes(presented.as_bytes(), up.key.as_bytes())
    {
        // A peer forwarded it, believing this instance leads: never forwarded twice.
        return no_leader("this instance does not lead the database; retry in a moment");
    }
    if door == Door::Metrics || path == "/metrics" {
        return metrics(&shared, door, &req);
    }
    if door == Door::Unix && crate::http::rules::tcp_only_path(path) {
        return Refusal::new(
            ErrorCode::NotFound,
            format!("no route {path} on this socket"),
        )
        .into_response();
    }
    if path == "/mcp"
        && let Err(e) = crate::http::console::guard::check_origin(req.headers(), shared.https)
    {
        return e.into_response();
    }
    if req.headers().contains_key(header::UPGRADE)
        && let Err(e) = crate::http::ipc::who_upgrades(&shared.keys, &shared.tokens, req.headers())
    {
        // Checked as the leader checks it, before anything is upgraded or forwarded: a
        // refused upgrade never takes one of the leader's sessions.
        return e.into_response();
    }
    let Some(leader) = leader else {
        return no_leader("no instance leads the database now; retry in a moment");
    };
    let ipc_upgrade = req.uri().path() == leo_protocol::ipc::UPGRADE_PATH
        && req.headers().contains_key(header::UPGRADE);
    let req = if ipc_upgrade {
        match upgrade_on_link(&shared, epoch, &leader, req).await {
            Ok(answer) => return answer,
            Err(req) => req,
        }
    } else {
        req
    };
    let (req, cap) = match limit_body(&shared, req) {
        Ok(limited) => limited,
        Err(cap) => return cap.refusal(),
    };
    let forwarded = forward(&shared, &leader, req).await;
    if cap.exceeded() {
        // Cut here: whatever the leader made of a body cut short, the client sent too much.
        return cap.refusal();
    }
    match forwarded {
        Ok(response) => {
            shared.warned.store(false, Ordering::Relaxed);
            response
        }
        Err(e) => {
            if shared.warned.swap(true, Ordering::Relaxed) {
                debug!(error = %leo_protocol::chain::error_chain(&e), "the leader cannot be reached");
            } else {
                let e = leo_protocol::chain::error_chain(&e);
                warn!(error = %e, "the leader cannot be reached; answering 503 until it can");
            }
            no_leader("the instance that leads the database cannot be reached; retry in a moment")
        }
    }
}

/// A request's body limit, as the follower applies it (`limit_body`).
struct BodyCap {
    limit: usize,
    /// The route is `/mcp`, whose refusals are JSON-RPC.
    mcp: bool,
    /// Set once the body turned out larger than `limit`.
    over: Arc<AtomicBool>,
}

impl BodyCap {
    fn exceeded(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// The `413`, as the leader words it.
    fn refusal(&self) -> Response {
        let refusal = crate::http::reply::too_large(self.limit);
        if self.mcp {
            crate::http::mcp::refusal(refusal)
        } else {
            refusal.into_response()
        }
    }
}

/// The request with its route's body limit applied as the body streams to the leader, as the
/// leader applies it: a body that says it is larger is answered `413` here, and one that turns
/// out larger is cut before its first byte past the limit and answered `413` here too (the
/// leader, which saw a body cut short, cannot tell the client why).
/// `Err`: the body says it is larger; answer the cap's refusal.
fn limit_body(shared: &Shared, req: Request<Body>) -> Result<(Request<Body>, BodyCap), BodyCap> {
    use http_body_util::BodyExt;
    let path = req.uri().path();
    let cap = BodyCap {
        limit: crate::http::rules::Route::of_path(req.method().as_str(), path)
            .map_or(shared.max_body, |r| r.body_limit(shared.max_body)),
        mcp: path == crate::http::rules::MCP_PATH,
        over: Arc::default(),
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap.limit as u64) {
        return Err(cap);
    }
    if req.headers().contains_key(header::UPGRADE) {
        return Ok((req, cap));
    }
    let (parts, body) = req.into_parts();
    let over = cap.over.clone();
    let limited = http_body_util::Limited::new(body, cap.limit).map_err(move |e| {
        if e.is::<http_body_util::LengthLimitError>() {
            over.store(true, Ordering::Relaxed);
        }
        e
    });
    Ok((Request::from_parts(parts, Body::new(limited)), cap))
}

fn no_leader(message: &str) -> Response {
    Refusal::new(ErrorCode::StoreUnavailable, message).into_response()
}

/// `/metrics` of this instance: on `metrics.bind` without a token, else the operator's.
fn metrics(shared: &Shared, door: Door, req: &Request<Body>) -> Response {
    if door != Door::Metrics {
        let who = crate::http::auth::bearer(req.headers()).and_then(|t| shared.tokens.lookup(t));
        match who {
            Some(Principal::Operator) => {}
            Some(_) => {
                return Refusal::new(ErrorCode::Forbidden, "this token may not GET /metrics")
                    .into_response();
            }
            None => {
                return Refusal::new(
                    ErrorCode::Unauthorized,
                    "missing Authorization: Bearer <token>",
                )
                .into_response();
            }
        }
    }
    let body = crate::metrics::global().render_follower(&shared.me_text, shared.links.counts());
    (
        [(header::CONTENT_TYPE, crate::http::history::METRICS_TYPE)],
        body,
    )
        .into_response()
}

/// A byte stream to the leader: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

async fn connect(shared: &Shared, up: &Upstream) -> Result<Box<dyn Io>, LeaderError> {
    let authority = || up.authority.clone();
    let tcp = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((up.host.trim_matches(['[', ']']), up.port)),
    )
    .await
    .map_err(|_| LeaderError::ConnectTimeout(authority()))?
    .map_err(|source| LeaderError::Connect {
        authority: authority(),
        source,
    })?;
    let _ = tcp.set_nodelay(true);
    // A leader whose host vanished ends what this instance pipes to it within DEAD_PEER.
    crate::http::serve::watch_peer(&tcp);
    if !up.https {
        return Ok(Box::new(tcp));
    }
    let tls = shared
        .connector
        .connect(&up.host, tcp)
        .await
        .map_err(|source| LeaderError::Tls {
            authority: authority(),
            source,
        })?;
    Ok(Box::new(tls))
}

/// One HTTP/1 connection to the leader, driven until the front stops.
async fn open(
    shared: &Shared,
    up: &Upstream,
) -> Result<hyper::client::conn::http1::SendRequest<Body>, LeaderError> {
    let io = connect(shared, up).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|source| LeaderError::Http {
            authority: up.authority.clone(),
            source,
        })?;
    let stop = shared.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            ended = conn.with_upgrades() => {
                if let Err(e) = ended {
                    debug!(error = %e, "connection to the leader ended");
                }
            }
        }
    });
    Ok(sender)
}

/// Sends `req` to the leader and streams its answer back; an upgrade (the one there is, the
/// sidecar IPC's) becomes a sidecar's pipe.
async fn forward(
    shared: &Shared,
    up: &Upstream,
    mut req: Request<Body>,
) -> Result<Response, LeaderError> {
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let downstream = upgrade.then(|| hyper::upgrade::on(&mut req));
    let target = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse::<Uri>()
        .map_err(LeaderError::Target)?;
    *req.uri_mut() = target;
    headers_for_leader(req.headers_mut(), upgrade, &up.key, &shared.me);
    let (mut response, sender) = send(shared, up, req, upgrade).await?;
    if !upgrade {
        shared.keep(sender);
    }
    let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switched && let Some(downstream) = downstream {
        let upstream = hyper::upgrade::on(&mut response);
        let stop = shared.stop.clone();
        tokio::spawn(async move {
            let (Ok(down), Ok(up)) = tokio::join!(downstream, upstream) else {
                return;
            };
            pipe(TokioIo::new(down), TokioIo::new(up), &[], stop).await;
        });
    }
    if !switched {
        strip_hop_by_hop(response.headers_mut());
    }
    Ok(response.map(Body::new))
}

/// Sends `req` on a pooled connection (unless it is an `upgrade`), or a new one when none is
/// ready or the pooled one closed before the request went out (the leader ends idle
/// connections): a request is never sent twice.
async fn send(
    shared: &Shared,
    up: &Upstream,
    req: Request<Body>,
    upgrade: bool,
) -> Result<(hyper::Response<hyper::body::Incoming>, Sender), LeaderError> {
    let mut req = req;
    if !upgrade && let Some(mut sender) = shared.pooled() {
        match sender.try_send_request(req).await {
            Ok(response) => return Ok((response, sender)),
            Err(mut e) => match e.take_message() {
                Some(unsent) => req = unsent,
                None => return Err(LeaderError::NoAnswer(e.into_error())),
            },
        }
    }
    let mut sender = open(shared, up).await?;
    let response = sender
        .send_request(req)
        .await
        .map_err(LeaderError::NoAnswer)?;
    Ok((response, sender))
}

/// Pipes a sidecar's connection (`local`) to its session on the leader (`upstream`), both
/// ways, until both directions ended or the front stops. When the sidecar's connection ends
/// (it closed, or it was killed, maybe in the middle of a line), the leader is told so in band
/// before the upstream closes: a newline ending a torn line, then `ipc::SIDECAR_LEFT`. An
/// upstream that ends without that line was lost with this instance, and the leader keeps the
/// session's calls for the sidecar's return (see `ipc::session`). `first`: what the sidecar
/// sent before the upstream was opened, sent first.
async fn pipe(
    local: impl AsyncRead + AsyncWrite + Unpin,
    upstream: impl AsyncRead + AsyncWrite + Unpin,
    first: &[u8],
    stop: CancellationToken,
) {
    use tokio::io::AsyncWriteExt;
    let (mut local_r, mut local_w) = tokio::io::split(local);
    let (mut up_r, mut up_w) = tokio::io::split(upstream);
    let up = async {
        let sent = async {
            up_w.write_all(first).await?;
            up_w.flush().await?;
            let whole = first.last().is_none_or(|b| *b == b'\n');
            copy_lines(&mut local_r, &mut up_w, whole).await
        };
        if let Ok(whole) = sent.await {
            let mut last = Vec::with_capacity(crate::ipc::SIDECAR_LEFT.len() + 2);
            if !whole {
                last.push(b'\n');
            }
            last.extend_from_slice(crate::ipc::SIDECAR_LEFT);
            last.push(b'\n');
            let _ = up_w.write_all(&last).await;
        }
        let _ = up_w.shutdown().await;
    };
    let down = async {
        if let Err(e) = tokio::io::copy(&mut up_r, &mut local_w).await {
            debug!(error = %e, "a piped session's upstream ended");
        }
        let _ = local_w.shutdown().await;
    };
    tokio::select! {
        () = stop.cancelled() => {}
        _ = async { tokio::join!(up, down) } => {}
    }
}

/// Copies `from` into `to` until `from` ends (or fails: the sidecar's connection is over all
/// the same); `Ok` says whether the last byte copied ended a line (`whole`: whether the last
/// one before did), `Err` that `to` failed.
async fn copy_lines(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    mut whole: bool,
) -> std::io::Result<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(whole),
            Ok(n) => n,
        };
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
        whole = buf[n - 1] == b'\n';
    }
}

/// The request's headers as the leader gets them: the client's cluster headers removed (a
/// client never speaks for the cluster), ours added, and the hop-by-hop ones dropped except
/// those of an upgrade.
fn headers_for_leader(headers: &mut HeaderMap, upgrade: bool, key: &HeaderValue, me: &HeaderValue) {
    headers.remove(CLUSTER_KEY);
    headers.remove(VIA);
    headers.remove(PIPE);
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        strip_hop_by_hop(headers);
    }
    headers.remove(header::TE);
    headers.remove(header::TRAILER);
    headers.insert(CLUSTER_KEY, key.clone());
    headers.insert(VIA, me.clone());
}

/// Drops the headers that describe one connection, not the message.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in [
        header::CONNECTION,
        header::UPGRADE,
        header::TRANSFER_ENCODING,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
}

/// The API socket's accept loop, until the front stops; gives the listener back.
async fn serve_unix(
    listener: UnixListener,
    app: Router,
    stop: CancellationToken,
) -> (UnixListener, JoinSet<()>) {
    let mut connections = JoinSet::new();
    let http = hyper::server::conn::http1::Builder::new();
    while let Some(stream) = crate::accept::next(&stop, "API socket", || listener.accept()).await {
        while connections.try_join_next().is_some() {}
        let service = TowerToHyperService::new(app.clone());
        let conn = http
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        connections.spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, "API socket connection ended");
            }
        });
    }
    (listener, connections)
}

/// `run/sidecar.sock`'s accept loop: each connection piped to the leader, on a link.
async fn serve_sidecar(listener: UnixListener, shared: Arc<Shared>) -> (UnixListener, JoinSet<()>) {
    let mut connections = JoinSet::new();
    let stop = shared.stop.clone();
    while let Some(stream) = crate::accept::next(&stop, "sidecar", || listener.accept()).await {
        while connections.try_join_next().is_some() {}
        connections.spawn(pipe_sidecar(stream, shared.clone()));
    }
    (listener, connections)
}

/// How long a sidecar's connection may stay silent before its first bytes (its hello): a
/// session takes a stream on a link only once it spoke, so that connections that never say
/// anything hold nothing of the leader's (the leader's own door gives the hello as long).
const FIRST_BYTES: Duration = Duration::from_secs(10);

/// Pipes one sidecar connection of this instance's socket to the leader.
async fn pipe_sidecar(mut stream: tokio::net::UnixStream, shared: Arc<Shared>) {
    use tokio::io::AsyncReadExt;
    if shared.leader().is_none() {
        debug!("no leader; a sidecar connection is closed");
        return;
    }
    let mut first = vec![0u8; 16 * 1024];
    let n = match tokio::time::timeout(FIRST_BYTES, stream.read(&mut first)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return,
    };
    // Kept for as long as the session lives: its own size, not the read buffer's.
    first.truncate(n);
    first.shrink_to_fit();
    // The leader as of now: it may have changed while the sidecar was silent, and a link
    // opened to the one before would outlive the change.
    let epoch = shared.links.epoch();
    let Some(leader) = shared.leader() else {
        return;
    };
    match carry(&shared, epoch, &leader).await {
        Ok(upstream) => {
            let _counted = shared.links.carrying();
            pipe(stream, upstream, &first, shared.stop.clone()).await;
        }
        Err(e) => {
            info!(error = %leo_protocol::chain::error_chain(&*e), "a sidecar connection is closed: no leader reached");
        }
    }
}

/// A byte stream to the leader `up` for one sidecar session: a stream on one of the links
/// (for the leader `epoch` names, read before `up`), or, with a leader that predates links,
/// an IPC upgrade of its own.
async fn carry(
    shared: &Shared,
    epoch: usize,
    up: &Upstream,
) -> Result<Box<dyn Io>, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(mut stream) = link_stream(shared, epoch, up).await? {
        super::link::write_line(&mut stream, &super::link::Preface::Socket).await?;
        return Ok(Box::new(stream));
    }
    let upgraded = open_upgrade(shared, up, leo_protocol::ipc::UPGRADE_PROTOCOL).await?;
    Ok(Box::new(upgraded))
}

/// A stream on one of the links to the leader `up` (see [`carry`] for `epoch`); `None` once
/// the leader turned out to predate links: it answers the link's upgrade `400`, as it answers
/// any upgrade but `leo-ipc`, and is not asked again until the leader changes. Another refusal
/// (`401`: a key this instance has not taken up yet) is no reason to stop asking for links.
async fn link_stream(
    shared: &Shared,
    epoch: usize,
    up: &Upstream,
) -> Result<Option<super::link::Carried>, super::link::Opened<LeaderError>> {
    if shared.links.legacy() {
        return Ok(None);
    }
    let connect = || open_upgrade(shared, up, super::link::UPGRADE);
    match shared.links.open(epoch, &shared.stop, connect).await {
        Ok(stream) => Ok(Some(stream)),
        Err(super::link::Opened::Connect(LeaderError::Status(StatusCode::BAD_REQUEST))) => {
            shared.links.set_legacy();
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// An IPC upgrade that reached this instance over the network (checked already, as the leader
/// checks it), carried on a link: the leader is sent the upgrade's credentials in the stream's
/// preface and answers as it answers such an upgrade; on `101` the client's connection is piped
/// to the stream. `Err` gives the request back when the leader predates links, to be forwarded
/// as it is.
async fn upgrade_on_link(
    shared: &Arc<Shared>,
    epoch: usize,
    up: &Upstream,
    mut req: Request<Body>,
) -> Result<Response, Request<Body>> {
    use super::link::{Answer, Preface, read_line, write_line};
    let mut stream = match link_stream(shared, epoch, up).await {
        Ok(Some(stream)) => stream,
        Ok(None) => return Err(req),
        Err(e) => {
            info!(error = %leo_protocol::chain::error_chain(&e), "an IPC upgrade is refused: no leader reached");
            return Ok(no_leader(
                "the instance that leads the database cannot be reached; retry in a moment",
            ));
        }
    };
    let header = |headers: &HeaderMap, name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let preface = Preface::Network {
        authorization: header(req.headers(), header::AUTHORIZATION.as_str()).unwrap_or_default(),
        agent: header(req.headers(), leo_protocol::ipc::AGENT_HEADER),
    };
    let asked = async {
        write_line(&mut stream, &preface).await?;
        let line = read_line(&mut stream).await?;
        serde_json::from_slice::<Answer>(&line).map_err(std::io::Error::other)
    };
    let answer = match tokio::time::timeout(CONNECT_TIMEOUT * 5, asked).await {
        Ok(Ok(answer)) => answer,
        _ => {
            return Ok(no_leader(
                "the leader did not answer the upgrade; retry in a moment",
            ));
        }
    };
    if answer.status != StatusCode::SWITCHING_PROTOCOLS.as_u16() {
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let body = answer.body.unwrap_or_default();
        return Ok((status, axum::Json(body)).into_response());
    }
    let pending = hyper::upgrade::on(&mut req);
    let stop = shared.stop.clone();
    let counted = shared.links.carrying();
    tokio::spawn(async move {
        if let Ok(client) = pending.await {
            pipe(TokioIo::new(client), stream, &[], stop).await;
        }
        drop(counted);
    });
    Ok(crate::http::ipc::switching(
        leo_protocol::ipc::UPGRADE_PROTOCOL,
    ))
}

/// The leader's `GET /api/v1/ipc` upgrade to `protocol`, opened for this instance's sidecars
/// with the cluster's key and the pipe's mark: a link ([`super::link::UPGRADE`]), or one
/// session's pipe (`leo-ipc`) whose hello the leader then reads and checks.
async fn open_upgrade(
    shared: &Shared,
    up: &Upstream,
    protocol: &'static str,
) -> Result<TokioIo<hyper::upgrade::Upgraded>, LeaderError> {
    let mut sender = open(shared, up).await?;
    let request = Request::get("/api/v1/ipc")
        .header(header::HOST, &up.authority)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, protocol)
        .header(CLUSTER_KEY, up.key.clone())
        .header(VIA, shared.me.clone())
        .header(PIPE, HeaderValue::from_static("1"))
        .body(Body::empty())
        .map_err(LeaderError::Request)?;
    let mut response = sender
        .send_request(request)
        .await
        .map_err(LeaderError::NoAnswer)?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(LeaderError::Status(response.status()));
    }
    let upgraded = hyper::upgrade::on(&mut response)
        .await
        .map_err(LeaderError::Upgrade)?;
    Ok(TokioIo::new(upgraded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaders_url_is_read_once() {
        let up = Upstream::new("https://leo-a.internal:8443", "k", false).unwrap();
        assert!(up.https);
        assert_eq!((up.host.as_str(), up.port), ("leo-a.internal", 8443));
        let up = Upstream::new("http://[::1]:8370", "k", true).unwrap();
        assert_eq!(up.authority, "[::1]:8370");
        assert!(Upstream::new("ftp://h:1", "k", true).is_err());
        assert!(Upstream::new("not a url", "k", true).is_err());
    }

    #[test]
    fn secrets_go_over_plain_http_to_loopback_only_when_allowed() {
        for url in [
            "http://127.0.0.1:8370",
            "http://localhost:1",
            "http://[::1]:2",
        ] {
            let refused = Upstream::new(url, "k", false).unwrap_err().to_string();
            assert!(refused.contains("plain_http_on_loopback"), "{refused}");
            assert!(Upstream::new(url, "k", true).is_ok(), "{url}");
        }
        for url in [
            "http://10.0.0.2:8370",
            "http://leo-a.internal:1",
            "http://127.0.0.1.evil:1",
        ] {
            assert!(Upstream::new(url, "k", true).is_err(), "{url}");
        }
        assert!(Upstream::new("https://10.0.0.2:8370", "k", false).is_ok());
    }

    /// What the leader reads from a pipe whose sidecar wrote `sent` and then went away.
    async fn piped(sent: &[u8]) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut sidecar, local) = tokio::io::duplex(64);
        let (upstream, mut leader) = tokio::io::duplex(64);
        let piping =
            tokio::spawn(async move { pipe(local, upstream, &[], CancellationToken::new()).await });
        sidecar.write_all(sent).await.unwrap();
        drop(sidecar);
        let mut got = Vec::new();
        leader.read_to_end(&mut got).await.unwrap();
        drop(leader);
        piping.await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_sidecar_that_goes_away_is_said_gone_to_the_leader_after_its_last_line() {
        let left = crate::ipc::SIDECAR_LEFT;
        assert_eq!(
            piped(b"{\"a\":1}\n").await,
            [b"{\"a\":1}\n", left, b"\n"].concat()
        );
        // Killed in the middle of a line: the line is ended, so the marker is a line of its own.
        assert_eq!(
            piped(b"{\"torn").await,
            [b"{\"torn\n", left, b"\n"].concat()
        );
        assert_eq!(piped(b"").await, [left, b"\n"].concat());
    }

    /// A leader of a version before links: it refuses `Upgrade: leo-mux` with `400` (counted)
    /// and takes each session's own `leo-ipc` upgrade, echoing what the session sends.
    async fn a_leader_before_links() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use hyper::service::service_fn;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = refused.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let counted = counted.clone();
                let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    let counted = counted.clone();
                    async move {
                        let asked = req.headers().get(header::UPGRADE).cloned();
                        let mut answer =
                            hyper::Response::new(http_body_util::Empty::<bytes::Bytes>::new());
                        if asked.as_ref().is_some_and(|p| p == "leo-ipc") {
                            let pending = hyper::upgrade::on(&mut req);
                            tokio::spawn(async move {
                                let io = TokioIo::new(pending.await.unwrap());
                                let (mut r, mut w) = tokio::io::split(io);
                                let _ = tokio::io::copy(&mut r, &mut w).await;
                            });
                            *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                            answer
                                .headers_mut()
                                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
                            answer
                                .headers_mut()
                                .insert(header::UPGRADE, HeaderValue::from_static("leo-ipc"));
                        } else {
                            counted.fetch_add(1, Ordering::Relaxed);
                            *answer.status_mut() = StatusCode::BAD_REQUEST;
                        }
                        Ok::<_, std::convert::Infallible>(answer)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .with_upgrades(),
                );
            }
        });
        (port, refused)
    }

    #[tokio::test]
    async fn a_leader_before_links_gets_a_connection_per_session() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let (port, refused) = a_leader_before_links().await;
        let dir = tempfile::tempdir().unwrap();
        let sidecar_path = dir.path().join("sidecar.sock");
        let listeners = Listeners {
            tcp: None,
            metrics: None,
            api: UnixListener::bind(dir.path().join("leo.sock")).unwrap(),
            sidecar: UnixListener::bind(&sidecar_path).unwrap(),
        };
        let config = FrontConfig {
            me: "i_test".into(),
            tokens: TokenBook::live(crate::tokens::Tokens::from_entries(&[])),
            keys: AgentKeys::new("shared".into(), dir.path().to_owned()),
            host: None,
            metrics_host: None,
            tls: None,
            budget: TcpBudget::new(crate::http::serve::TcpLimits {
                max_connections: 16,
                header_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(5),
            }),
            max_body: 1 << 20,
            connector: leo_protocol::tls::Connector::new(None).unwrap(),
        };
        let front = Front::start(config, listeners);
        let leader = Upstream::new(&format!("http://127.0.0.1:{port}"), "key", true).unwrap();
        front.follow(Some(leader));
        for n in 0..3 {
            let stream = tokio::net::UnixStream::connect(&sidecar_path)
                .await
                .unwrap();
            let (r, mut w) = tokio::io::split(stream);
            let line = format!("{{\"session\":{n}}}\n");
            w.write_all(line.as_bytes()).await.unwrap();
            let mut echoed = String::new();
            let mut r = tokio::io::BufReader::new(r);
            let read = r.read_line(&mut echoed);
            tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .expect("the session was not piped")
                .unwrap();
            assert_eq!(echoed, line);
        }
        // Asked once, then remembered until the leader changes.
        assert_eq!(refused.load(Ordering::Relaxed), 1);
        front.stop().await.unwrap();
    }

    #[test]
    fn a_client_never_speaks_for_the_cluster() {
        let mut h = HeaderMap::new();
        h.insert(CLUSTER_KEY, HeaderValue::from_static("forged"));
        h.append(VIA, HeaderValue::from_static("i_forged"));
        h.insert(PIPE, HeaderValue::from_static("1"));
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        let key = HeaderValue::from_static("real");
        headers_for_leader(&mut h, false, &key, &HeaderValue::from_static("i_me"));
        assert_eq!(h.get_all(CLUSTER_KEY).iter().count(), 1);
        assert_eq!(h[CLUSTER_KEY], "real");
        assert_eq!(h.get_all(VIA).iter().collect::<Vec<_>>(), ["i_me"]);
        assert!(!h.contains_key(header::CONNECTION));
        assert!(!h.contains_key(PIPE));
    }
}
