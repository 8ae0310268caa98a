//! Binding the listeners and running a core on them until it is told to stop (or, in a
//! cluster, until its instance is deposed).
//!
//! `serve` takes already-bound listeners, so tests pass port 0 and temporary socket paths. The
//! shutdown path is explicit: pending calls end as `cancelled` (reason `shutdown`), or, on a
//! cluster's leader, are handed over to the next leader in the database; the state file is
//! flushed, streams and sessions close, and the servers get a bounded time to drain.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tracing::{debug, info, warn};

use crate::agent_tokens::AgentKeys;
use crate::config::Config;
use crate::core::Broker;
use crate::error::{BrokerError, Result};
use crate::home::Home;
use crate::http::{AppState, HostCheck};
use crate::state_file::EverRegistered;
use crate::tokens::TokenBook;

/// How long servers get to finish after shutdown begins.
const DRAIN: Duration = Duration::from_secs(5);
/// How long background tasks (sessions, webhook deliveries) get after the servers.
const TASKS: Duration = Duration::from_secs(2);

/// What every core this process runs shares, loaded and checked at start: a single broker
/// runs one, a cluster's instance one for each term it leads (`cluster`).
pub struct Base {
    pub home: Home,
    /// This broker's hold on `home` (`run/broker.lock`), for the process's life.
    pub lock: crate::home::HomeLock,
    pub config: Arc<Config>,
    /// The tokens the doors accept: this home's files, or the cluster's (PostgreSQL).
    pub tokens: TokenBook,
    /// Which tokens open which agent's sidecar sessions.
    pub agent_keys: AgentKeys,
    /// What serves `/mcp` on the TCP listener: the `leo` binary mounts `leo-mcp`'s server here
    /// (see `mcp`); without it, `/mcp` answers that this broker serves none.
    pub mcp: Option<crate::mcp::MakeMount>,
    /// `web.tls`, loaded: the TCP listener's certificate and key.
    pub tls: Option<crate::http::ServerTls>,
}

/// What one core is started with and consumes: the store it writes, what that held, the
/// registrations remembered, its webhooks, and the cluster it leads, if any.
pub(crate) struct Term {
    pub store: crate::store::Store,
    pub restored: crate::store::Restored,
    /// `state/client-tools.json` as read at start; `None` for a later term of a cluster's
    /// leader, which reads the file again (what the last term remembered is there).
    pub ever: Option<EverRegistered>,
    /// `state/webhooks.json` and the webhooks it held, or the cluster's from the database.
    pub webhooks: (
        crate::webhooks::store::Store,
        Vec<crate::webhooks::store::Stored>,
    ),
    pub leading: Option<Leading>,
}

/// What a leader of a cluster serves with besides its store: its id and the cluster's key,
/// which its routers check on what followers forward (`cluster::gate`).
pub(crate) struct Leading {
    pub id: String,
    /// Where its peers reach it (`/readyz` says so).
    pub url: String,
    pub key: crate::cluster::gate::ClusterKey,
    /// The instance's one handle on the database, which its history writes through.
    pub db: crate::store::postgres::Database,
}

/// The bound listeners; the same four as descriptors (`Listeners<OwnedFd, OwnedFd>`) while
/// a cluster's leader keeps a second copy of each (see [`Listeners::dup`]).
pub struct Listeners<Tcp = TcpListener, Unix = UnixListener> {
    pub tcp: Option<Tcp>,
    pub api: Unix,
    pub sidecar: Unix,
    /// `metrics.bind`: `/metrics` without a token.
    pub metrics: Option<Tcp>,
}

/// The listening sockets as bare descriptors.
pub(crate) type Kept = Listeners<OwnedFd, OwnedFd>;

impl Listeners {
    /// The listening sockets a second time (a `dup` of each), kept while a core serves the
    /// first: when a deposed leader's servers close theirs, it follows on these, at the same
    /// addresses, and what connected meanwhile waits in their backlog.
    pub(crate) fn dup(&self) -> Result<Kept> {
        let dup = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .map_err(|e| BrokerError::io("duplicate", "a listening socket", e))
        };
        Ok(Listeners {
            tcp: self.tcp.as_ref().map(|t| dup(t.as_fd())).transpose()?,
            metrics: self.metrics.as_ref().map(|m| dup(m.as_fd())).transpose()?,
            api: dup(self.api.as_fd())?,
            sidecar: dup(self.sidecar.as_fd())?,
        })
    }
}

impl Kept {
    /// The listeners again, registered with the runtime.
    pub(crate) fn listen(self) -> Result<Listeners> {
        let failed = |e| BrokerError::io("listen again on", "a kept socket", e);
        let tcp = |fd: OwnedFd| {
            let l = std::net::TcpListener::from(fd);
            l.set_nonblocking(true)?;
            TcpListener::from_std(l)
        };
        let unix = |fd: OwnedFd| {
            let l = std::os::unix::net::UnixListener::from(fd);
            l.set_nonblocking(true)?;
            UnixListener::from_std(l)
        };
        Ok(Listeners {
            tcp: self.tcp.map(tcp).transpose().map_err(failed)?,
            metrics: self.metrics.map(tcp).transpose().map_err(failed)?,
            api: unix(self.api).map_err(failed)?,
            sidecar: unix(self.sidecar).map_err(failed)?,
        })
    }
}

/// Binds a unix socket with mode 0600, replacing a stale socket file but never a live broker.
pub async fn bind_unix(path: &Path) -> Result<UnixListener> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(BrokerError::Bind {
                what: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another broker is listening there",
                ),
            });
        }
        std::fs::remove_file(path).map_err(|e| BrokerError::io("remove stale socket", path, e))?;
    }
    let listener = UnixListener::bind(path).map_err(|source| BrokerError::Bind {
        what: path.display().to_string(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| BrokerError::io("set permissions of", path, e))?;
    Ok(listener)
}

/// Binds every listener the config asks for. (With PostgreSQL, `prepare` reached the
/// database already if it answers, so that a schema newer than this broker stops the start
/// before anything listens; one that does not answer is waited for while the listeners
/// answer `503`, see `cluster`.)
pub async fn bind(p: &Base) -> Result<Listeners> {
    let tcp = if p.config.web.enabled {
        let addr = SocketAddr::new(p.config.web.bind, p.config.web.port);
        Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| BrokerError::Bind {
                    what: addr.to_string(),
                    source,
                })?,
        )
    } else {
        None
    };
    let metrics = match p.config.metrics.bind {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| BrokerError::Bind {
                    what: addr.to_string(),
                    source,
                })?,
        ),
        None => None,
    };
    let api = bind_unix(&p.home.api_socket()).await?;
    p.lock.bound(&p.home.api_socket())?;
    let sidecar = bind_unix(&p.home.sidecar_socket()).await?;
    p.lock.bound(&p.home.sidecar_socket())?;
    let tcp_addr = tcp.as_ref().and_then(|t| t.local_addr().ok());
    p.lock.listening(tcp_addr, p.tls.is_some());
    Ok(Listeners {
        metrics,
        tcp,
        api,
        sidecar,
    })
}

/// The one connection budget of every TCP listener, from `web:`.
pub(crate) fn tcp_budget(config: &Config) -> crate::http::TcpBudget {
    let limits = tcp_limits(&config.web);
    info!(
        max_connections = limits.max_connections,
        header_timeout_s = limits.header_timeout.as_secs(),
        idle_timeout_s = limits.idle_timeout.as_secs(),
        "TCP limits (all TCP listeners together)"
    );
    crate::http::TcpBudget::new(limits)
}

/// The TCP bounds from `web:`, with the connection cap held under half the descriptors the
/// process may open. Every TCP listener draws on this one cap, so that a flood of any of them
/// leaves the unix sockets (apps, agents' sidecars) and the state files the other half.
fn tcp_limits(web: &crate::config::Web) -> crate::http::TcpLimits {
    let descriptors = raise_fd_limit();
    let budget = usize::try_from(descriptors / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    if web.max_connections > budget {
        warn!(
            max_connections = web.max_connections,
            budget, "web.max_connections is over half the file-descriptor limit; using {budget}"
        );
    }
    crate::http::TcpLimits {
        max_connections: web.max_connections.min(budget),
        header_timeout: Duration::from_secs(web.header_timeout_s),
        idle_timeout: Duration::from_secs(web.idle_timeout_s),
    }
}

/// `web:` with `max_sessions` held under half the descriptors the process may open, as
/// `tcp_limits` holds the TCP connections under the other half: every session holds one
/// (its unix connection, its TCP connection, or the pipe of a follower's session).
fn session_limits(web: &crate::config::Web) -> crate::config::Web {
    let budget = usize::try_from(raise_fd_limit() / 2)
        .unwrap_or(usize::MAX)
        .max(4);
    let mut web = web.clone();
    if web.max_sessions > budget {
        warn!(
            max_sessions = web.max_sessions,
            budget, "web.max_sessions is over half the file-descriptor limit; using {budget}"
        );
        web.max_sessions = budget;
    }
    web
}

/// Raises the soft limit on open files to the hard limit; returns the limit now in force.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// How a core's run on the listeners ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// `stop` resolved: the broker shut down in order and removed its sockets.
    Stopped,
    /// Another instance took the database over: the core is gone, the sockets stay (the
    /// cluster serves them again as a follower, see `cluster`).
    Deposed,
}

/// Runs a core on `listeners` with `term` until `stop` resolves (it then shuts down in
/// order) or, in a cluster, until another instance takes the database over (it then steps
/// down). `p` serves every term of a cluster's leader.
pub(crate) async fn serve(
    p: &Base,
    term: Term,
    listeners: Listeners,
    stop: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<Ended> {
    let Term {
        store,
        restored,
        ever,
        webhooks: (hooks, stored_hooks),
        leading,
    } = term;
    // What reads the database comes first: a cluster's leader whose database goes away here
    // fails before any task holds its core, and follows until it can lead again (`cluster`).
    let db = leading.as_ref().map(|l| &l.db);
    let history = crate::history::History::start(&p.home, &p.config, db)?;
    let ever = match ever {
        Some(ever) => ever,
        None => EverRegistered::load(&p.home.client_tools())?,
    };
    let broker = Broker::new(p.config.clone(), ever, store, history);
    broker.restore(restored);
    if let Some(leading) = &leading {
        crate::metrics::global().set_instance(&leading.id);
    }
    if p.config.console.ask_human {
        // Nothing is registered yet, so the name cannot conflict.
        if let Err(e) = broker.set_ask_human(true) {
            warn!(error = %e, "cannot switch ask_human on at start");
        }
    }
    let webhooks = crate::webhooks::Webhooks::start(broker.clone(), hooks, stored_hooks);
    let oauth = start_oauth(p, db).await?;
    let issuer = outside_issuer(&p.config.auth);
    let keys = match (&oauth, &issuer) {
        (Some(o), _) => p.agent_keys.clone().with_oauth(o.clone()),
        (None, Some(i)) => p.agent_keys.clone().with_oauth(i.clone()),
        (None, None) => p.agent_keys.clone(),
    };
    let sidecars = crate::ipc::Door::new(broker.clone(), keys, &session_limits(&p.config.web));
    let mcp = p.mcp.as_ref().map(|make| {
        make(
            crate::mcp::Pipe::new(sidecars.clone()),
            broker.shutdown_token(),
        )
    });
    let state = Arc::new(AppState {
        broker: broker.clone(),
        sidecars: sidecars.clone(),
        mcp,
        https: p.tls.is_some(),
        instance: leading.as_ref().map(|l| crate::http::health::Instance {
            id: l.id.clone(),
            url: l.url.clone(),
        }),
        webhooks,
        oauth,
        issuer,
        public_url: p.config.auth.public_url.clone(),
        tokens: p.tokens.clone(),
        max_body: p.config.web.max_body_bytes,
        sessions: crate::http::console::session::Sessions::new(Duration::from_secs(
            p.config.console.session_ttl_s,
        ))
        .over_https(p.tls.is_some()),
    });
    if let Some(tls) = p.tls.clone() {
        broker.tasks().spawn(tls.watch(broker.shutdown_token()));
    }
    let hand_over = leading.is_some();
    let key = leading.map(|l| l.key);
    let servers = spawn_servers(&p.config, p.tls.clone(), &state, listeners, key.clone())?;
    let ended = tokio::select! {
        () = stop => Ended::Stopped,
        () = broker.store().deposed() => Ended::Deposed,
    };
    match ended {
        Ended::Stopped => shut_down(&broker, servers, &p.lock, hand_over).await,
        Ended::Deposed => step_down(&broker, servers).await,
    }
    Ok(ended)
}

/// The outside authorization server (`auth.issuer`), whose JWTs open `/mcp`.
fn outside_issuer(auth: &crate::config::AuthConfig) -> Option<Arc<crate::issuer::Issuer>> {
    let issuer = auth.issuer.clone()?;
    // The config check made `public_url` required with `issuer`.
    let base = auth.public_url.as_deref().unwrap_or_default();
    Some(Arc::new(crate::issuer::Issuer::new(
        issuer,
        format!(
            "{}{}",
            base.trim_end_matches('/'),
            crate::http::rules::MCP_PATH
        ),
        auth.agent_claim.clone(),
        auth.jwks_uri.clone(),
    )))
}

/// The OAuth book of this core (`auth.oauth`), read from where the store keeps it: the
/// cluster's database, or `state/leo.db`.
async fn start_oauth(
    p: &Base,
    db: Option<&crate::store::postgres::Database>,
) -> Result<Option<Arc<crate::oauth::OAuth>>> {
    let auth = &p.config.auth;
    if !auth.oauth || auth.issuer.is_some() {
        return Ok(None);
    }
    let settings = crate::oauth::Settings {
        dynamic_registration: auth.dynamic_registration,
        metadata_documents: auth.metadata_documents,
        allow_private_fetch: auth.allow_private_fetch,
        access_ttl: Duration::from_secs(auth.access_ttl_s),
        refresh_ttl: Duration::from_secs(auth.refresh_ttl_s),
    };
    let persist = match db {
        Some(db) => crate::oauth::Persist::Postgres(db.clone()),
        None => {
            let path = p.home.database();
            let db = crate::store::oauth::Sqlite::open(&path).map_err(|e| BrokerError::State {
                path: path.clone(),
                message: format!("cannot open the OAuth tables: {e}"),
            })?;
            crate::oauth::Persist::Sqlite(Arc::new(db))
        }
    };
    let oauth = crate::oauth::OAuth::load(settings, persist)
        .await
        .map_err(|e| match e {
            crate::oauth::LoadError::Postgres(e) => BrokerError::from(e),
            crate::oauth::LoadError::Sqlite(message) => BrokerError::State {
                path: p.home.database(),
                message: format!("cannot read the OAuth grants: {message}"),
            },
        })?;
    Ok(Some(Arc::new(oauth)))
}

/// The HTTP servers: TCP and `metrics.bind`, both through the one bounded accept loop with
/// one shared connection budget and the Host check, and the API socket. `web.tls` is the main
/// TCP listener's only: `metrics.bind` is loopback, where nothing crosses a network.
fn spawn_servers(
    config: &Config,
    tls: Option<crate::http::ServerTls>,
    state: &Arc<AppState>,
    listeners: Listeners,
    key: Option<crate::cluster::gate::ClusterKey>,
) -> Result<tokio::task::JoinSet<()>> {
    let Listeners {
        tcp,
        api,
        sidecar,
        metrics,
    } = listeners;
    state
        .broker
        .tasks()
        .spawn(crate::ipc::serve(sidecar, state.sidecars.clone()));
    let token = state.broker.shutdown_token();
    let mut servers = tokio::task::JoinSet::new();
    if let Some(tcp) = &tcp {
        warn_if_clear(tcp, tls.is_some());
    }
    let budget = tcp_budget(config);
    if let Some(tcp) = tcp {
        let app = crate::http::tcp_router(state.clone(), host_check(&tcp, config)?);
        let app = crate::http::with_gate(app, key.clone());
        let serve = crate::http::serve_tcp("TCP", tcp, app, budget.clone(), tls, token.clone());
        servers.spawn(serve);
    }
    if let Some(listener) = metrics {
        let app = crate::http::metrics_router(state.clone(), host_check(&listener, config)?);
        let serve = crate::http::serve_tcp("metrics", listener, app, budget, None, token.clone());
        servers.spawn(serve);
    }
    let app = crate::http::with_gate(crate::http::router(state.clone()), key);
    servers.spawn(async move {
        if let Err(e) = axum::serve(api, app)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
        {
            warn!(error = %e, "the API socket server ended with an error");
        }
    });
    Ok(servers)
}

/// Says loudly that tokens cross the network in clear when the TCP listener is reachable from
/// other hosts without TLS. It is a warning, not a refusal: a container's published port
/// (`web.bind: 0.0.0.0` behind Docker's own network) is a setup that works and is documented.
pub(crate) fn warn_if_clear(tcp: &TcpListener, tls: bool) {
    let Ok(addr) = tcp.local_addr() else { return };
    if !tls && !addr.ip().is_loopback() {
        warn!(
            %addr,
            "web.bind is not loopback and web.tls is not set: tokens and every call cross the network in clear; set web.tls (`leo tls init`) unless this network is private"
        );
    }
}

/// The Host check of a TCP listener: loopback names, its bind address when specific, and
/// `web.allowed_hosts`, each with the listener's own port.
pub(crate) fn host_check(listener: &TcpListener, config: &Config) -> Result<Arc<HostCheck>> {
    let addr = listener
        .local_addr()
        .map_err(|e| BrokerError::io("read address of", "tcp listener", e))?;
    Ok(Arc::new(HostCheck::new(
        addr.port(),
        addr.ip(),
        &config.web.allowed_hosts,
    )))
}

/// The shutdown path: pending calls end (or, on a cluster's leader, `hand_over`, stay in the
/// database for the next leader), servers drain (at most `DRAIN`), background tasks
/// finish (at most `TASKS`), history and the live state are flushed, and the sockets are
/// removed. Each stream, session and timer ends on the shutdown token, so a stop with apps and
/// agents connected takes milliseconds; what is still running when a bound runs out is named.
async fn shut_down(
    broker: &Broker,
    mut servers: tokio::task::JoinSet<()>,
    lock: &crate::home::HomeLock,
    hand_over: bool,
) {
    lock.stopping();
    let started = std::time::Instant::now();
    if hand_over {
        info!("shutting down; the calls in flight stay in the database for the next leader");
        broker.begin_handover();
    } else {
        info!("shutting down");
        broker.begin_shutdown();
    }
    let drained = tokio::time::timeout(DRAIN, async {
        while servers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            servers = servers.len(),
            "HTTP servers still had connections open after {} s (requests in flight, streams that did not end); closing them",
            DRAIN.as_secs()
        );
        servers.abort_all();
    }
    broker.tasks().close();
    if tokio::time::timeout(TASKS, broker.tasks().wait())
        .await
        .is_err()
    {
        warn!(
            tasks = broker.tasks().len(),
            "background tasks (agent sessions, webhook deliveries, timers) still ran after {} s; stopping without them",
            TASKS.as_secs()
        );
    }
    debug!(
        took_ms = started.elapsed().as_millis(),
        "streams, sessions and servers ended"
    );
    // Every call has ended (or is handed over) by now; its row is written before the broker
    // says it stopped, and the store writes every change before it gives the lease up.
    broker.history().close();
    broker.store().close().await;
    crate::telemetry::shutdown().await;
    lock.remove_sockets();
    info!("stopped");
}

/// A deposed leader's end, as if it had been killed but for the process: nothing more is
/// written or answered (the fence refuses it anyway), pending calls are not ended (the new
/// leader restored every call this one committed, and ends them), and every stream, session
/// and connection it served closes now, so that its clients reconnect and resume where the
/// new leader serves. The sockets stay: the listening sockets are the cluster's (`cluster`
/// serves them again as a follower).
async fn step_down(broker: &Broker, mut servers: tokio::task::JoinSet<()>) {
    tracing::error!(
        "another instance took over the database; this one gives its core up and follows it"
    );
    broker.shutdown_token().cancel();
    servers.abort_all();
    while servers.join_next().await.is_some() {}
    // Sessions and streams end on the token; what may be left are timers, which hold the
    // core weakly and do nothing once it is gone.
    broker.tasks().close();
    let _ = tokio::time::timeout(Duration::from_millis(500), broker.tasks().wait()).await;
    broker.history().close();
    broker.store().close().await;
}

/// Installs the SIGINT and SIGTERM handlers now (before the banner is printed, so a signal
/// sent as soon as the broker says it listens is never lost), and resolves on either.
pub fn signals() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            _ => {
                warn!("cannot install signal handlers; waiting for ctrl-c");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
