//! Several instances on one PostgreSQL database, all serving at once: the leader runs the one
//! core, every other instance forwards to it.
//!
//! Why one leader rather than several cores: a claim, a result, a timeout or a cancel is
//! decided once, in the core's memory under its lock, in both stores; a second core would have
//! to move that decision into SQL for PostgreSQL only, and the two stores would no longer be
//! checked by the same tests. So the database says who leads (`store::postgres::lease`: the
//! lease, taken under an advisory lock, and the fence that keeps a deposed leader from
//! committing), and the others are fronts (`http::front`): they bind every listener at once
//! and forward what they receive, so apps and agents may connect to any instance.
//!
//! `run` is the PostgreSQL side of `server::run`. Its listeners are bound and the banner
//! printed already; it then looks at the lease every [`POLL`]: while another instance leads it
//! serves the front, forwarding to the leader's advertised URL (`cluster.advertise_url`, or
//! the one derived from the TCP listener); once the lease is free it opens the store (taking
//! the lease and restoring the live state), stops the front (closing what it forwarded: that
//! leader is gone), takes its listeners back and runs the core on them as a single broker
//! does.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;

use deadpool_postgres::Pool;
use tracing::{info, warn};

use crate::config::Config;
use crate::error::{BrokerError, Result};
use crate::home::Home;
use crate::http::front::{ClusterKey, Front, FrontConfig, FrontListeners, Upstream};
use crate::server::{Leading, Listeners, Prepared};
use crate::store::postgres::lease::{self, Leader, Look, Me, POLL};
use crate::store::postgres::{self, PgError};

/// What an instance joins its cluster with.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The store it opens when it leads (its `me.url` is set once the listener is bound).
    store: postgres::Settings,
    /// `cluster.advertise_url`, if set.
    advertise: Option<String>,
    /// How the leader's certificate is checked.
    connector: leo_protocol::tls::Connector,
}

impl Settings {
    /// The cluster of the database at `url`, checked now: it needs the TCP listener (peers
    /// reach the leader there), a readable CA file if one is named, and a well-formed
    /// advertised URL.
    pub fn new(home: &Home, config: &Config, url: String) -> Result<Settings> {
        let refuse = |message: String| BrokerError::Config {
            path: home.config(),
            message,
        };
        if !config.web.enabled {
            return Err(refuse(
                "store.url: a broker on PostgreSQL is an instance of a cluster, whose \
                 instances reach each other over the TCP listener; set web.enabled: true"
                    .into(),
            ));
        }
        if let Some(advertised) = &config.cluster.advertise_url {
            Upstream::new(advertised, "-")
                .map_err(|e| refuse(format!("cluster.advertise_url: {e}")))?;
        }
        let ca: Option<PathBuf> = match &config.cluster.ca_file {
            Some(path) => Some(home.root.join(path)),
            None => std::env::var_os(leo_protocol::tls::CA_FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        };
        let connector = leo_protocol::tls::Connector::new(ca.as_deref())
            .map_err(|e| refuse(format!("cluster.ca_file: {e}")))?;
        Ok(Settings {
            store: postgres::Settings {
                url,
                me: Me {
                    id: crate::home::instance_id(home)?,
                    url: String::new(),
                },
                key: crate::tokens::generate()?,
                remember: config.client_tools.remember_settled,
            },
            advertise: config.cluster.advertise_url.clone(),
            connector,
        })
    }
}

impl Settings {
    /// Reaches the database and brings its schema up to date.
    pub async fn check_database(&self) -> Result<()> {
        watch(&self.store.url).await.map(drop)
    }
}

/// Serves `listeners` as an instance of the cluster until `stop` resolves: as a front while
/// another instance leads, then as the leader.
pub(crate) async fn run(
    p: Prepared,
    mut settings: Settings,
    listeners: Listeners,
    stop: impl Future<Output = ()>,
) -> Result<()> {
    settings.store.me.url = advertised_url(&p, &settings, &listeners)?;
    info!(instance = %settings.store.me.id, url = %settings.store.me.url, "joining the cluster");
    let pool = watch(&settings.store.url).await?;
    let mut stop = std::pin::pin!(stop);
    let Some((listeners, store, restored)) =
        follow(&p, &settings, &pool, listeners, stop.as_mut()).await?
    else {
        if let Ok(client) = pool.get().await {
            let _ = lease::release(&client, &settings.store.me.id).await;
        }
        crate::server::remove_sockets(&p.home);
        info!("stopped");
        return Ok(());
    };
    let key = cluster_key(&pool).await?;
    drop(pool);
    let leading = Leading {
        id: settings.store.me.id.clone(),
        key: ClusterKey(key.into()),
    };
    crate::server::serve(p, (store, restored, Some(leading)), listeners, stop).await
}

fn database_error(e: PgError) -> BrokerError {
    BrokerError::Database {
        path: "store.url (PostgreSQL)".into(),
        source: crate::store::Error::Postgres(std::sync::Arc::new(e)).into(),
    }
}

/// A connection to the database for looking at the lease, on a schema brought up to date.
async fn watch(url: &str) -> Result<Pool> {
    let config = tokio_postgres::Config::from_str(url)
        .map_err(PgError::Url)
        .map_err(database_error)?;
    let pool = postgres::pool(config).map_err(database_error)?;
    let mut client = pool
        .get()
        .await
        .map_err(PgError::Connect)
        .map_err(database_error)?;
    postgres::schema::migrate(&mut client)
        .await
        .map_err(database_error)?;
    drop(client);
    Ok(pool)
}

async fn cluster_key(pool: &Pool) -> Result<String> {
    let client = pool
        .get()
        .await
        .map_err(PgError::Connect)
        .map_err(database_error)?;
    lease::cluster_key(&client)
        .await
        .map_err(database_error)?
        .ok_or_else(|| database_error(PgError::Unreadable("the cluster has no key".into())))
}

/// Where peers reach this instance: `cluster.advertise_url`, or the TCP listener's address
/// (`127.0.0.1` when it binds every address) with `https` under `web.tls`.
fn advertised_url(p: &Prepared, settings: &Settings, listeners: &Listeners) -> Result<String> {
    if let Some(url) = &settings.advertise {
        return Ok(url.trim_end_matches('/').to_owned());
    }
    let addr = listeners
        .tcp
        .as_ref()
        .map(|l| l.local_addr())
        .transpose()
        .map_err(|e| BrokerError::io("read address of", "tcp listener", e))?
        .ok_or_else(|| BrokerError::Config {
            path: p.home.config(),
            message: "the cluster needs the TCP listener (web.enabled)".into(),
        })?;
    let ip = if addr.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        addr.ip()
    };
    let scheme = if p.tls.is_some() { "https" } else { "http" };
    Ok(format!(
        "{scheme}://{}",
        std::net::SocketAddr::new(ip, addr.port())
    ))
}

/// What `follow` ends with: the listeners back, and the store this instance now leads.
type Led = (Listeners, crate::store::Store, crate::store::Restored);

/// Forwards to the leader until this instance takes the lease (`Some`) or `stop` resolves.
async fn follow(
    p: &Prepared,
    settings: &Settings,
    pool: &Pool,
    listeners: Listeners,
    mut stop: Pin<&mut impl Future<Output = ()>>,
) -> Result<Option<Led>> {
    let mut idle = Some(listeners);
    let mut front: Option<Front> = None;
    let mut following: Option<Leader> = None;
    let mut unreachable = false;
    let mut said_alive: Option<tokio::time::Instant> = None;
    loop {
        // A follower says it is alive every heartbeat, as the leader does.
        let alive = said_alive.is_none_or(|t| t.elapsed() >= lease::HEARTBEAT);
        let looked = async {
            let client = pool.get().await.map_err(PgError::Connect)?;
            lease::look(&client, &settings.store.me, alive).await
        }
        .await;
        if alive && looked.is_ok() {
            said_alive = Some(tokio::time::Instant::now());
        }
        match looked {
            Ok(Look::Free) => {
                if let Some((store, restored)) = try_lead(settings).await? {
                    let listeners = match (front.take(), idle.take()) {
                        (Some(front), _) => take_back(front).await?,
                        (None, Some(listeners)) => listeners,
                        (None, None) => return Err(lost_listeners()),
                    };
                    return Ok(Some((listeners, store, restored)));
                }
            }
            Ok(Look::Held(leader)) => {
                if let Some(listeners) = idle.take() {
                    front = Some(start_front(p, settings, listeners)?);
                }
                if following.as_ref() != Some(&leader)
                    && let Some(front) = &front
                {
                    let up = upstream(pool, &leader).await;
                    let found = up.is_some();
                    front.follow(up);
                    if found {
                        info!(leader = %leader, "another instance leads the database; forwarding to it");
                        following = Some(leader);
                    }
                }
                unreachable = false;
            }
            Err(e) => {
                if let Some(listeners) = idle.take() {
                    front = Some(start_front(p, settings, listeners)?);
                }
                if !unreachable {
                    warn!(error = %leo_protocol::chain::error_chain(&e), "cannot look at the lease; still forwarding to the last leader known");
                    unreachable = true;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = stop.as_mut() => {
                if let Some(front) = front {
                    front.stop().await;
                }
                return Ok(None);
            }
        }
    }
}

/// The leader as the front forwards to it; `None` (answered `503`) when its row names no URL
/// or the cluster has no key yet.
async fn upstream(pool: &Pool, leader: &Leader) -> Option<Upstream> {
    let client = pool.get().await.ok()?;
    let key = lease::cluster_key(&client).await.ok().flatten()?;
    let Some(url) = &leader.url else {
        warn!(leader = %leader, "the leader advertises no URL; nothing can be forwarded");
        return None;
    };
    Upstream::new(url, &key)
        .map_err(|e| warn!(leader = %leader, error = %e, "cannot forward to the leader"))
        .ok()
}

/// Opens the store, which takes the lease: `None` when another instance took it first.
async fn try_lead(
    settings: &Settings,
) -> Result<Option<(crate::store::Store, crate::store::Restored)>> {
    let store_settings = settings.store.clone();
    let opened =
        tokio::task::spawn_blocking(move || crate::store::Store::open_postgres(store_settings))
            .await
            .map_err(|e| BrokerError::State {
                path: "store.url (PostgreSQL)".into(),
                message: format!("opening the store stopped: {e}"),
            })?;
    match opened {
        Ok(opened) => Ok(Some(opened)),
        Err(crate::store::Error::Postgres(e)) if matches!(*e, PgError::Held(_)) => Ok(None),
        Err(crate::store::Error::Postgres(e)) if e.is_outage() => {
            // The database went away between the look and the take: look again later.
            warn!(error = %leo_protocol::chain::error_chain(&*e), "cannot take the lease now");
            Ok(None)
        }
        Err(e) => Err(BrokerError::Database {
            path: "store.url (PostgreSQL)".into(),
            source: e.into(),
        }),
    }
}

fn start_front(p: &Prepared, settings: &Settings, listeners: Listeners) -> Result<Front> {
    let host = match &listeners.tcp {
        Some(tcp) => {
            crate::server::warn_if_clear(tcp, p.tls.is_some());
            Some(crate::server::host_check(tcp, &p.config)?)
        }
        None => None,
    };
    let metrics_host = match &listeners.metrics {
        Some(m) => Some(crate::server::host_check(m, &p.config)?),
        None => None,
    };
    let config = FrontConfig {
        me: settings.store.me.id.clone(),
        tokens: p.tokens.clone(),
        host,
        metrics_host,
        tls: p.tls.clone(),
        budget: crate::server::tcp_budget(&p.config),
        connector: settings.connector.clone(),
    };
    let listeners = FrontListeners {
        tcp: listeners.tcp,
        metrics: listeners.metrics,
        api: listeners.api,
        sidecar: listeners.sidecar,
    };
    Ok(Front::start(config, listeners))
}

async fn take_back(front: Front) -> Result<Listeners> {
    let l = front.stop().await.ok_or_else(lost_listeners)?;
    Ok(Listeners {
        tcp: l.tcp,
        metrics: l.metrics,
        api: l.api,
        sidecar: l.sidecar,
    })
}

fn lost_listeners() -> BrokerError {
    BrokerError::State {
        path: "listeners".into(),
        message: "the front's listeners could not be taken back".into(),
    }
}
