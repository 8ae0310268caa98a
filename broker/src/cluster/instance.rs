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
//! printed already; from then on the instance looks after itself, moving between the stages
//! of [`Stage`], each of which ends in the next:
//!
//! - **Waiting** for the database: it is tried at once, the listeners left idle (what connects
//!   waits in their backlog, see [`Doors`]). While it cannot be reached (down or unreachable
//!   at start) the front answers `503 store_unavailable` and closes sidecar connections, so
//!   nothing is accepted that could not be kept, and the database is tried every poll (`cluster.poll_ms`)
//!   until it answers, its schema is brought up to date (once, under a lock) and the cluster's
//!   tokens taken (`cluster_tokens`; at `prepare` already if it answered then). An error the
//!   database answers on purpose (a schema newer than this broker; a wrong role or password, a
//!   missing database, a role without rights: `PgError::at_start`) stops the instance.
//! - **Following**: it looks at the lease every poll (`cluster::election`); while another instance leads, the
//!   front forwards to the leader's advertised URL (`cluster.advertise_url`, or the one derived
//!   from the TCP listener). Once the lease is free it opens the store (taking the lease and
//!   restoring the live state), stops the front (closing what it forwarded: that leader is
//!   gone) and takes its listeners back.
//! - **Leading**: the core runs on the listeners as a single broker's does, until `stop`, or
//!   until the database says another instance took the lease (this one was cut off, or frozen,
//!   for longer than the lease). A deposed leader gives its core up as if it had been killed
//!   (`server::step_down`: its streams and sessions close, and its clients resume where the
//!   new leader serves) and follows again on the same listening sockets, kept for that (a
//!   `dup` of each, [`Kept`]).
//!
//! A `stop` in any stage ends the run: a follower says it left, a leader gives its lease up.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use leo_protocol::chain::error_chain;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::election::{Elector, Role, Timing};
use super::front::{Front, FrontConfig, Upstream};
use super::gate::ClusterKey;
use super::tokens::Shared as Tokens;
use crate::config::Config;
use crate::error::{BrokerError, Result};
use crate::home::Home;
use crate::http::health::FollowerView;
use crate::server::{Base, Ended, Kept, Leading, Listeners, Term};
use crate::state_file::EverRegistered;
use crate::store::postgres::lease::{self, Leader, Look, Me};
use crate::store::postgres::{self, Database, PgError};

/// What an instance joins its cluster with.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The instance's one handle on the database (see `store::postgres::Database`).
    db: Database,
    /// The store it opens when it leads (its `me.url` is set once the listener is bound).
    store: postgres::Settings,
    /// `cluster.advertise_url`, if set.
    advertise: Option<String>,
    /// `cluster.plain_http_on_loopback`: a leader may be forwarded to over http on loopback.
    plain_loopback: bool,
    /// How the leader's certificate is checked.
    connector: leo_protocol::tls::Connector,
    /// The election's clock (`cluster.heartbeat_ms`, `lease_ms`, `poll_ms`).
    timing: Timing,
}

impl Settings {
    /// The cluster of the database `db`, checked now: it needs the TCP listener (peers
    /// reach the leader there), a readable CA file if one is named, and a well-formed
    /// advertised URL.
    pub fn new(home: &Home, config: &Config, db: Database) -> Result<Settings> {
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
        let plain_loopback = config.cluster.plain_http_on_loopback;
        if let Some(advertised) = &config.cluster.advertise_url {
            Upstream::new(advertised, "-", plain_loopback)
                .map_err(|e| refuse(format!("cluster.advertise_url: {}", error_chain(&e))))?;
        }
        let ca: Option<PathBuf> = match &config.cluster.ca_file {
            Some(path) => Some(home.root.join(path)),
            None => std::env::var_os(leo_protocol::tls::CA_FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        };
        let connector = leo_protocol::tls::Connector::new(ca.as_deref())
            .map_err(|e| refuse(format!("cluster.ca_file: {e}")))?;
        let timing = Timing::of(&config.cluster);
        Ok(Settings {
            db,
            store: postgres::Settings {
                me: Me {
                    id: crate::home::instance_id(home)?,
                    url: String::new(),
                },
                key: crate::tokens::generate()?,
                remember: config.client_tools.remember_settled,
                heartbeat: timing.heartbeat,
                lease: timing.lease,
            },
            advertise: config.cluster.advertise_url.clone(),
            plain_loopback,
            connector,
            timing,
        })
    }
}

/// Where an instance stands in its cluster (see the module's doc); each stage of `run` ends
/// in the next.
enum Stage {
    /// The database has not answered yet: the front answers `503 store_unavailable`.
    Waiting(Doors, Tokens),
    /// The database answers: the front forwards to the leader, if another instance leads.
    Following(Doors),
    /// This instance took the lease: its core runs on the listeners.
    Leading(Led),
    /// `stop` resolved, and the stage that saw it closed what it held.
    Stopped,
}

/// The listeners while this instance does not lead.
struct Doors {
    /// Not served yet: at start, until the database says whether this instance leads, so
    /// that its first clients wait in the backlog for its core rather than get a `503`.
    idle: Option<Listeners>,
    /// Served by the front.
    front: Option<Front>,
}

impl Doors {
    /// The front, started now if it was not.
    fn front(&mut self, p: &Base, settings: &Settings) -> Result<&Front> {
        if let Some(listeners) = self.idle.take() {
            self.front = Some(start_front(p, settings, listeners)?);
        }
        self.front.as_ref().ok_or_else(lost_listeners)
    }

    /// The listeners back, for the core.
    async fn listeners(self) -> Result<Listeners> {
        match (self.front, self.idle) {
            (Some(front), _) => front.stop().await.ok_or_else(lost_listeners),
            (None, Some(listeners)) => Ok(listeners),
            (None, None) => Err(lost_listeners()),
        }
    }

    async fn close(self) {
        if let Some(front) = self.front {
            front.stop().await;
        }
    }
}

/// What `follow` ends with: the listeners back, and the store this instance now leads.
type Led = (Listeners, Opened);

/// The store this instance opened as it took the lease, and what it held.
type Opened = (crate::store::Store, crate::store::Restored);

/// The database's lease, as the election sees it (`store::postgres::lease`). Taking it opens
/// the store, which takes the lease and restores the live state under it.
struct PgLease {
    db: Database,
    store: postgres::Settings,
    /// The connection of its own this instance holds its alive lock on (`lease::hold_alive`)
    /// from its first take on: not a pooled one, which would be lent to other work and keep
    /// the lock after this instance dropped it, or drop it while it leads. Its process's
    /// death closes it, and frees the lease at once.
    alive: tokio::sync::Mutex<Option<postgres::Dedicated>>,
}

impl PgLease {
    /// Holds this instance's alive lock, on a new connection if the last one closed.
    async fn keep_alive(&self) -> std::result::Result<(), PgError> {
        let mut alive = self.alive.lock().await;
        if alive.as_ref().is_some_and(|client| !client.is_closed()) {
            return Ok(());
        }
        *alive = None;
        let client = self.db.dedicated(None).await?;
        lease::hold_alive(&client, &self.store.me.id).await?;
        *alive = Some(client);
        Ok(())
    }
}

/// Why the lease could not be looked at or taken.
#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error(transparent)]
    Look(#[from] PgError),
    #[error(transparent)]
    Take(crate::store::Error),
}

impl LeaseError {
    /// Whether the instance may wait it out: only a store it could not open stops it, when
    /// the database answered on purpose (a schema newer than this broker, a row it cannot
    /// read).
    fn is_fatal(&self) -> bool {
        match self {
            LeaseError::Look(_) => false,
            LeaseError::Take(e) => !e.is_outage(),
        }
    }
}

impl super::election::Lease for PgLease {
    type Error = LeaseError;
    type Taken = Opened;

    async fn look(&self, alive: bool) -> std::result::Result<Look, LeaseError> {
        let (me, lease) = (self.store.me.clone(), self.store.lease);
        Ok(self
            .db
            .run(move |client| async move { lease::look(&client, &me, alive, lease).await })
            .await?)
    }

    async fn take(&self) -> std::result::Result<std::result::Result<Opened, Leader>, LeaseError> {
        // Held before the take: a lease taken without it would look free to the others.
        self.keep_alive().await?;
        let (db, settings) = (self.db.clone(), self.store.clone());
        // The opening waits for the restore; it runs on the database's runtime, waited for
        // here on a blocking thread.
        let opened =
            tokio::task::spawn_blocking(move || crate::store::Store::open_postgres(&db, settings))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        match opened {
            Ok(opened) => Ok(Ok(opened)),
            Err(crate::store::Error::Database(e)) if e.is_held() => match e.postgres() {
                Some(PgError::Held(leader)) => Ok(Err(leader.clone())),
                _ => unreachable!("is_held is PostgreSQL's Held"),
            },
            Err(e) => Err(LeaseError::Take(e)),
        }
    }

    async fn renew(&self, epoch: i64) -> std::result::Result<Option<String>, LeaseError> {
        self.keep_alive().await?;
        let me = self.store.me.id.clone();
        let renewed = self
            .db
            .run(move |client| async move { lease::renew(&client, &me, epoch).await })
            .await;
        match renewed {
            Ok(()) => Ok(None),
            Err(PgError::LeaseLost { holder }) => Ok(Some(holder)),
            Err(e) => Err(e.into()),
        }
    }

    async fn release(&self) -> std::result::Result<(), LeaseError> {
        let (me, lease) = (self.store.me.id.clone(), self.store.lease);
        self.db
            .run(move |client| async move { lease::release(&client, &me, lease).await })
            .await?;
        *self.alive.lock().await = None;
        Ok(())
    }
}

/// What an instance is prepared with: how it joins, the cluster's tokens (taken from the
/// database at start if it answered), and `state/client-tools.json` as read at start.
pub(crate) struct Joining {
    settings: Settings,
    pub tokens: Tokens,
    ever: EverRegistered,
}

impl Joining {
    /// The cluster of the database at `url` (see [`Settings::new`]), on the instance's one
    /// handle on it (`Database`, opened here), and its tokens (`tokens::prepare`).
    pub fn prepare(
        home: &Home,
        config: &Config,
        url: String,
        ever: EverRegistered,
    ) -> Result<Joining> {
        let db = Database::open(&url)?;
        let tokens = super::tokens::prepare(home, config, &db)?;
        let settings = Settings::new(home, config, db)?;
        Ok(Joining {
            settings,
            tokens,
            ever,
        })
    }
}

/// What every stage of an instance's run shares.
struct Instance {
    p: Base,
    /// What the first term serves with; later terms read the file again.
    ever: Option<EverRegistered>,
    settings: Settings,
    /// This instance's side of the election, on the instance's database handle.
    elector: Elector<PgLease>,
    /// Cancelled when the run ends: what follows the cluster's tokens stops with it.
    done: CancellationToken,
    /// Notified when an instance gives the lease up (`listen`): a follower looks at once.
    wake: std::sync::Arc<tokio::sync::Notify>,
}

/// Serves `listeners` as an instance of the cluster until `stop` resolves: waiting for the
/// database, following the leader, leading (see the module's doc).
pub(crate) async fn run(
    p: Base,
    joining: Joining,
    listeners: Listeners,
    stop: impl Future<Output = ()>,
) -> Result<()> {
    let Joining {
        mut settings,
        tokens,
        ever,
    } = joining;
    settings.store.me.url = advertised_url(&p, &settings, &listeners)?;
    if let Err(e) = Upstream::new(&settings.store.me.url, "-", settings.plain_loopback) {
        warn!(
            "no other instance will forward to this one while it leads: {}",
            error_chain(&e)
        );
    }
    info!(instance = %settings.store.me.id, url = %settings.store.me.url, "joining the cluster");
    let doors = Doors {
        idle: Some(listeners),
        front: None,
    };
    let done = CancellationToken::new();
    let _end = done.clone().drop_guard();
    let lease = PgLease {
        db: settings.db.clone(),
        store: settings.store.clone(),
        alive: tokio::sync::Mutex::new(None),
    };
    let wake = std::sync::Arc::new(tokio::sync::Notify::new());
    tokio::spawn(listen(
        settings.db.clone(),
        wake.clone(),
        settings.timing.poll,
        done.clone(),
    ));
    let mut me = Instance {
        p,
        ever: Some(ever),
        elector: Elector::new(lease, settings.timing),
        settings,
        done,
        wake,
    };
    let mut stop = std::pin::pin!(stop);
    let mut stage = Stage::Waiting(doors, tokens);
    loop {
        stage = match stage {
            Stage::Waiting(doors, tokens) => me.wait(doors, tokens, stop.as_mut()).await?,
            Stage::Following(doors) => me.follow(doors, stop.as_mut()).await?,
            Stage::Leading(led) => me.lead(led, stop.as_mut()).await?,
            Stage::Stopped => return Ok(()),
        };
    }
}

/// Connects and brings the schema up to date (`Database::client`, once, under its lock).
async fn reach(db: &Database) -> std::result::Result<(), PgError> {
    db.run(|_client| async { Ok(()) }).await
}

impl Instance {
    /// Waits until the database answers (see [`Stage::Waiting`]), trying it every poll.
    async fn wait(
        &mut self,
        mut doors: Doors,
        mut tokens: Tokens,
        mut stop: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Stage> {
        let mut said = false;
        loop {
            let reached = if tokens.joined() {
                reach(&self.settings.db).await
            } else {
                tokens.join(&self.p.home).await
            };
            match reached.map_err(PgError::at_start) {
                Ok(()) => {
                    tokens.spawn_refresh(self.p.home.clone(), self.done.clone());
                    return Ok(Stage::Following(doors));
                }
                Err(e) if e.is_outage() => {
                    doors
                        .front(&self.p, &self.settings)?
                        .view(unreachable_view(None));
                    if !said {
                        warn!(error = %leo_protocol::chain::error_chain(&e), "waiting for the database: this instance answers 503 store_unavailable until it can reach it");
                        said = true;
                    }
                }
                Err(e) => return Err(e.into()),
            }
            tokio::select! {
                () = tokio::time::sleep(self.elector.timing().poll) => {}
                () = stop.as_mut() => return Ok(self.leave(doors, false).await),
            }
        }
    }

    /// Forwards to the leader until this instance takes the lease (`Elector::look`) or `stop`
    /// resolves.
    async fn follow(
        &mut self,
        mut doors: Doors,
        mut stop: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Stage> {
        let mut following: Option<(Leader, String)> = None;
        let mut unreachable = false;
        loop {
            match self.elector.look().await {
                Ok(Role::Leads(opened)) => {
                    let listeners = doors.listeners().await?;
                    return Ok(Stage::Leading((listeners, opened)));
                }
                Ok(Role::Follows(leader)) => {
                    let front = doors.front(&self.p, &self.settings)?;
                    if unreachable {
                        // Pointed again: its `/readyz` said the database was away.
                        following = None;
                    }
                    // The key too: a rotated one is taken up within a poll.
                    if let Ok((key, _)) = cluster_keys(&self.settings.db).await {
                        // Pointed once per leader, URL and key: a URL it may not forward to (said
                        // once) stays refused until one of them changes.
                        let target = (leader, key);
                        if following.as_ref() != Some(&target) {
                            self.point(front, &target);
                            following = Some(target);
                        }
                    }
                    unreachable = false;
                }
                Err(e) if e.is_fatal() => {
                    let path = crate::config::store_label().into();
                    return Err(match e {
                        LeaseError::Take(e) => BrokerError::store(path, e),
                        LeaseError::Look(e) => BrokerError::Postgres(std::sync::Arc::new(e)),
                    });
                }
                Err(e) => {
                    let front = doors.front(&self.p, &self.settings)?;
                    front.view(unreachable_view(following.as_ref().map(|(l, _)| l)));
                    if !unreachable {
                        warn!(error = %leo_protocol::chain::error_chain(&e), "cannot look at the lease; still forwarding to the last leader known");
                        unreachable = true;
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.elector.timing().poll) => {}
                () = self.wake.notified() => {}
                () = stop.as_mut() => return Ok(self.leave(doors, true).await),
            }
        }
    }

    /// Points the front at `leader` with the cluster's `key`, or at nobody (`503`) when it may
    /// not be forwarded to.
    fn point(&self, front: &Front, (leader, key): &(Leader, String)) {
        let up = upstream(leader, key, self.settings.plain_loopback);
        if up.is_some() {
            info!(leader = %leader, "another instance leads the database; forwarding to it");
        }
        front.view(FollowerView {
            leader: Some(probe_leader(leader)),
            reason: up
                .is_none()
                .then(|| "the leader's URL cannot be forwarded to (the log says why)".to_owned()),
        });
        front.follow(up);
    }

    /// Runs the core on the listeners until `stop` resolves, or follows again, on the same
    /// listening sockets, once another instance took the lease, or when the database went
    /// away before the core could start (its lease then lapses, or is taken again by this
    /// instance once the database is back: `lease::look` calls a lease of its own free).
    async fn lead(&mut self, led: Led, stop: Pin<&mut impl Future<Output = ()>>) -> Result<Stage> {
        let (listeners, (store, restored)) = led;
        let (epoch, deposed) = (store.epoch().unwrap_or_default(), store.deposition());
        let kept = listeners.dup()?;
        let key = match cluster_keys(&self.settings.db).await {
            Ok((key, previous)) => ClusterKey::new(&key, previous.as_deref()),
            Err(e) if e.is_outage() => return self.lead_later(kept, &e),
            Err(e) => return Err(e),
        };
        let webhooks = match crate::webhooks::store::Store::load_cluster(
            &self.settings.db,
            &self.p.home.webhooks(),
        )
        .await
        {
            Ok(webhooks) => webhooks,
            Err(e) if e.is_outage() => return self.lead_later(kept, &e),
            Err(e) => return Err(e),
        };
        let watching = CancellationToken::new();
        let poll = self.elector.timing().poll;
        tokio::spawn(watch_keys(
            self.settings.db.clone(),
            key.clone(),
            poll,
            watching.clone(),
        ));
        let term = Term {
            store,
            restored,
            ever: self.ever.take(),
            webhooks,
            leading: Some(Leading {
                id: self.settings.store.me.id.clone(),
                url: self.settings.store.me.url.clone(),
                key,
                db: self.settings.db.clone(),
            }),
        };
        // The lease is renewed while the core serves; once another instance holds it, the
        // core gives up as a fenced write would have made it (`Store::deposition`).
        let holding = async {
            let holder = self.elector.hold(epoch).await;
            warn!(%holder, "another instance took the lease");
            deposed.cancel();
            std::future::pending::<()>().await;
        };
        let served = tokio::select! {
            served = crate::server::serve(&self.p, term, listeners, stop) => served,
            () = holding => unreachable!("holding the lease ends only with the core"),
        };
        watching.cancel();
        match served {
            Ok(Ended::Stopped) => Ok(Stage::Stopped),
            Ok(Ended::Deposed) => self.follow_on(kept),
            Err(e) if e.is_outage() => self.lead_later(kept, &e),
            Err(e) => Err(e),
        }
    }

    /// The database went away while this instance started to lead: it follows (answering
    /// `503 store_unavailable` meanwhile) instead of exiting, and leads once it can.
    fn lead_later(&self, kept: Kept, e: &BrokerError) -> Result<Stage> {
        warn!(error = %leo_protocol::chain::error_chain(e), "the database went away as this instance started to lead; it waits for it");
        self.follow_on(kept)
    }

    /// Follows on the kept listening sockets (the core is gone).
    fn follow_on(&self, kept: Kept) -> Result<Stage> {
        let listeners = kept.listen()?;
        let front = start_front(&self.p, &self.settings, listeners)?;
        Ok(Stage::Following(Doors {
            idle: None,
            front: Some(front),
        }))
    }

    /// Ends a stage that is not leading: the front stops, a follower says it left (`joined`),
    /// and the sockets are removed.
    async fn leave(&self, doors: Doors, joined: bool) -> Stage {
        self.p.lock.stopping();
        doors.close().await;
        if joined {
            let _ = self.elector.release().await;
        }
        self.p.lock.remove_sockets();
        info!("stopped");
        Stage::Stopped
    }
}

/// Listens for a lease given up (`lease::listen`) until `done`, notifying `wake` at each, on
/// a connection of its own (a pooled one would be lent to other work and hear nothing), made
/// again every `poll` while the database is away.
async fn listen(
    db: Database,
    wake: std::sync::Arc<tokio::sync::Notify>,
    poll: Duration,
    done: CancellationToken,
) {
    loop {
        let (heard, mut notifications) = tokio::sync::mpsc::unbounded_channel();
        let listening = async {
            let client = db.dedicated(Some(heard)).await?;
            lease::listen(&client).await?;
            Ok::<_, PgError>(client)
        };
        if let Ok(_client) = listening.await {
            // The channel ends with the connection, which holds its sender.
            loop {
                tokio::select! {
                    heard = notifications.recv() => match heard {
                        Some(_) => wake.notify_one(),
                        None => break,
                    },
                    () = done.cancelled() => return,
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = done.cancelled() => return,
        }
    }
}

/// `leader` as `/readyz` names it.
fn probe_leader(leader: &Leader) -> leo_protocol::health::Leader {
    leo_protocol::health::Leader {
        instance: leader.id.clone(),
        url: leader.url.clone(),
    }
}

/// What a follower's `/readyz` says while the database cannot be reached: the leader it
/// last knew, if any.
fn unreachable_view(last: Option<&Leader>) -> FollowerView {
    FollowerView {
        leader: last.map(probe_leader),
        reason: Some(crate::http::health::UNREACHABLE.to_owned()),
    }
}

/// The cluster's key, and the one it replaced while that one's grace lasts.
async fn cluster_keys(db: &Database) -> Result<(String, Option<String>)> {
    let keys = db
        .run(|client| async move { lease::cluster_keys(&client).await })
        .await?;
    keys.ok_or_else(|| PgError::Unreadable("the cluster has no key".into()).into())
}

/// Keeps a leader's `key` as the database has it, every `poll`, until `done`: a key
/// rotated by `leo cluster rotate-key` is accepted at once, and the old one no longer once its
/// grace ended. A database away keeps the keys last read.
async fn watch_keys(db: Database, key: ClusterKey, poll: Duration, done: CancellationToken) {
    loop {
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(poll) => {}
        }
        if let Ok((current, previous)) = cluster_keys(&db).await {
            key.set(&current, previous.as_deref());
        }
    }
}

/// Where peers reach this instance: `cluster.advertise_url`, or the TCP listener's address
/// (`127.0.0.1` when it binds every address) with `https` under `web.tls`.
fn advertised_url(p: &Base, settings: &Settings, listeners: &Listeners) -> Result<String> {
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

/// The leader as the front forwards to it with `key`; `None` (answered `503`) when its row
/// names no URL, or one it may not be sent secrets at.
fn upstream(leader: &Leader, key: &str, plain_loopback: bool) -> Option<Upstream> {
    let Some(url) = &leader.url else {
        warn!(leader = %leader, "the leader advertises no URL; nothing can be forwarded");
        return None;
    };
    Upstream::new(url, key, plain_loopback)
        .map_err(
            |e| warn!(leader = %leader, error = %error_chain(&e), "cannot forward to the leader"),
        )
        .ok()
}

fn start_front(p: &Base, settings: &Settings, listeners: Listeners) -> Result<Front> {
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
        keys: p.agent_keys.clone(),
        host,
        metrics_host,
        tls: p.tls.clone(),
        budget: crate::server::tcp_budget(&p.config),
        max_body: p.config.web.max_body_bytes,
        connector: settings.connector.clone(),
    };
    Ok(Front::start(config, listeners))
}

fn lost_listeners() -> BrokerError {
    BrokerError::State {
        path: "listeners".into(),
        message: "the front's listeners could not be taken back".into(),
    }
}
