//! The live state in PostgreSQL (`store.url`, or `LEO_STORE_URL`), behind the same interface
//! as SQLite: the core queues [`Op`]s under its lock and waits for [`Store::committed`]
//! before it acknowledges work; this side writes each batch in one transaction.
//!
//! One thread of its own runs a current-thread tokio runtime, so the database's round trips
//! never take the broker's thread, as SQLite's writer thread keeps file I/O off it. The
//! connections come from a `deadpool-postgres` pool: a connection that died with the server is
//! dropped on its next use and a new one made, which is what resuming after an outage needs.
//!
//! **An outage is transient, unlike a failed SQLite commit.** When a batch cannot reach the
//! database (the server is down, restarting, or the network is cut), its changes stay queued
//! here, in order, and are written first when the database answers again; the batch's waiters
//! are answered [`Error::Unavailable`] (`503 store_unavailable`). From that moment the store
//! reports itself unavailable ([`Store::available`]) and the core refuses new work at the door
//! (a call, a claim, a result, a cancel, a message) without changing its memory. A probe every
//! [`RETRY`] finds the database back, writes what was queued, and the store is available
//! again. So work the broker acknowledged was committed before the outage; work refused at the
//! door changed nothing; and the few changes caught in flight (made before the outage was
//! known, answered 503) are recorded when the database is back, so memory and database agree
//! again. A refused operation may be retried: a claim or result posted again is then answered
//! as any repeated one is.
//!
//! **A change the database cannot hold is dropped, not the writer.** When the database refuses
//! one change's data (a data exception, SQLSTATE class 22, such as a U+0000 it cannot store:
//! the edges refuse such text, `leo_protocol::names::storable`, so this is a defence), that
//! change is dropped, logged, and the rest of the batch written; the batch's waiters are
//! answered an error (`500 internal`), since one of them waited for the dropped change and
//! which one is not known, and everything after is written and acknowledged as usual. So one
//! bad row costs one batch its answers, never the broker its store. Any other error the
//! database answers on purpose (a constraint, a bug) is not an outage: it is handled as
//! SQLite's failed commit, and nothing more is acknowledged.
//!
//! [`Op`]: super::Op
//! [`Store::committed`]: super::Store::committed
//! [`Store::available`]: super::Store::available
//! [`Error::Unavailable`]: super::Error::Unavailable

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::mpsc::{UnboundedReceiver, error::TryRecvError};
use tracing::{error, info, warn};

use super::writer::{BATCH, Batch, CANNOT_RECORD, Gate, LINGER, op_name};
use super::{Error, Job, Op, Restored};

pub use database::{Database, Lead, PgError, describe};
/// A pooled connection, as [`Database::run`] lends it.
pub use deadpool_postgres::Object;
/// A connection outside the pool (`Database::dedicated`).
pub use tokio_postgres::Client as Dedicated;

mod database;
pub mod lease;
mod read;
pub mod schema;
pub mod tls;
pub mod tokens;
mod write;

/// How often a store that lost its database tries again; also the heartbeat's check.
pub const RETRY: Duration = Duration::from_millis(500);

/// The instances sharing the database, as the writer last read them, for the status snapshot.
pub type Instances = Arc<std::sync::Mutex<Vec<leo_protocol::status::InstanceStatus>>>;

/// What the writer shares with the `Store` handle.
pub(crate) struct Shared {
    pub available: Arc<AtomicBool>,
    pub instances: Instances,
    pub deposed: tokio_util::sync::CancellationToken,
}

/// What the PostgreSQL store is opened with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This instance: its id (from `state/instance-id`) and where its peers reach it.
    pub me: lease::Me,
    /// The cluster's key, if this instance is the first to lead the database.
    pub key: String,
    /// How many ended requests are kept.
    pub remember: usize,
    /// How often the instances sharing the database are read again (`cluster.heartbeat_ms`).
    pub heartbeat: Duration,
    /// How long a lease lasts without renewal (`cluster.lease_ms`).
    pub lease: Duration,
}

#[cfg(test)]
impl Settings {
    /// An instance `i_test`, for the crate's tests.
    pub(crate) fn for_test() -> Settings {
        Settings {
            me: lease::Me {
                id: "i_test".into(),
                url: String::new(),
            },
            key: "k".repeat(64),
            remember: 4,
            heartbeat: Duration::from_secs(5),
            lease: Duration::from_secs(15),
        }
    }
}

/// Takes the lease (the schema migrated at the database's first connection), records this
/// instance and reads what was live; then the writer runs on the database's runtime until the
/// store closes. Blocks until the state is read: what it held, and the epoch this instance
/// leads in. Call it off the broker's runtime.
pub(crate) fn open(
    db: &Database,
    settings: Settings,
    rx: UnboundedReceiver<Job>,
    shared: Shared,
) -> Result<(Restored, i64), PgError> {
    let (ready, opened) = std::sync::mpsc::sync_channel(1);
    let db = db.clone();
    db.clone().spawn(async move {
        match start(&db, &settings).await {
            Ok((epoch, restored)) => {
                let _ = ready.send(Ok((restored, epoch)));
                let mut writer = Writer::new(db.pool(), settings, epoch, shared.available);
                writer.instances = shared.instances;
                writer.deposed = shared.deposed;
                writer.look_around().await;
                writer.run(rx).await;
            }
            Err(e) => {
                let _ = ready.send(Err(e));
            }
        }
    });
    opened.recv().unwrap_or(Err(PgError::Stopped))
}

/// Connects (migrating once), takes the lease (`Held` when another instance leads) and
/// restores.
async fn start(db: &Database, settings: &Settings) -> Result<(i64, Restored), PgError> {
    let mut client = db.client().await?;
    let epoch = lease::try_take(&mut client, &settings.me, &settings.key, settings.lease)
        .await?
        .map_err(PgError::Held)?;
    db.set_lead(Lead {
        me: settings.me.id.clone(),
        epoch,
    });
    let restored = read::restore(&client).await?;
    info!(
        database = %db.describe(),
        instance = %settings.me.id,
        epoch,
        live = restored.live.len(),
        messages = restored.mail.len(),
        "state database opened"
    );
    Ok((epoch, restored))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The writer's state between batches.
struct Writer {
    pool: Pool,
    settings: Settings,
    /// The epoch this instance leads in: every batch is fenced by it (see `lease`).
    epoch: i64,
    /// Changes not yet committed, in the order they were made (kept across an outage).
    pending: Vec<Op>,
    available: Arc<AtomicBool>,
    /// Shut by the first error the database answered on purpose, or the lease lost.
    gate: Gate,
    last_beat: tokio::time::Instant,
    /// Where each heartbeat puts the instances it read.
    instances: Instances,
    /// Cancelled when the fence or the renewal finds another instance leads.
    deposed: tokio_util::sync::CancellationToken,
    /// When the oldest change in `pending` that nobody waits for was queued: it is written
    /// with the next batch somebody waits for, or alone `LINGER` after this.
    lingering: Option<tokio::time::Instant>,
}

impl Writer {
    fn new(pool: Pool, settings: Settings, epoch: i64, available: Arc<AtomicBool>) -> Writer {
        Writer {
            pool,
            settings,
            epoch,
            pending: Vec::new(),
            available,
            gate: Gate::default(),
            last_beat: tokio::time::Instant::now(),
            instances: Instances::default(),
            deposed: tokio_util::sync::CancellationToken::new(),
            lingering: None,
        }
    }

    async fn run(mut self, mut rx: UnboundedReceiver<Job>) {
        loop {
            let mut wait = if self.available.load(Ordering::Relaxed) {
                self.settings
                    .heartbeat
                    .saturating_sub(self.last_beat.elapsed())
            } else {
                RETRY
            };
            if let Some(since) = self.lingering {
                wait = wait.min(LINGER.saturating_sub(since.elapsed()));
            }
            let first = match tokio::time::timeout(wait, rx.recv()).await {
                Ok(Some(job)) => Some(job),
                Ok(None) => break,
                Err(_) => None,
            };
            let Some(first) = first else {
                self.tick().await;
                continue;
            };
            let mut jobs = vec![first];
            while jobs.len() < BATCH {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if self.batch(jobs).await {
                break;
            }
        }
    }

    /// Writes the batch's changes after what is pending and answers its waiters; true when
    /// the batch asked the store to close.
    async fn batch(&mut self, jobs: Vec<Job>) -> bool {
        let mut batch = Batch::of(jobs);
        let urgent = batch.urgent();
        self.pending.append(&mut batch.ops);
        if !urgent && self.pending.len() < BATCH {
            // Nobody waits for these changes (a delivered outcome): they go with the next
            // batch somebody waits for, one round trip for both (see `LINGER`).
            self.lingering.get_or_insert_with(tokio::time::Instant::now);
            return false;
        }
        let result = self.flush().await;
        batch.answer(&result);
        match batch.close {
            Some(done) => {
                self.release().await;
                let _ = done.send(result);
                true
            }
            None => false,
        }
    }

    /// Commits what is pending; `Ok` when nothing is left pending.
    async fn flush(&mut self) -> Result<(), Error> {
        // Whatever lingered is written now, or kept for the outage's retries (`RETRY`).
        self.lingering = None;
        self.gate.open()?;
        if self.pending.is_empty() && self.available.load(Ordering::Relaxed) {
            return Ok(());
        }
        let result = self.write_pending().await.map_err(|e| self.deposed(e));
        match result {
            Ok(dropped) => {
                self.gate.committed(self.pending.len());
                self.pending.clear();
                if !self.available.swap(true, Ordering::Relaxed) {
                    info!("the database answers again; the broker accepts work again");
                }
                dropped.map_or(Ok(()), |e| Err(Error::Database(e.into())))
            }
            Err(e) if e.is_outage() => {
                if self.available.swap(false, Ordering::Relaxed) {
                    error!(
                        error = %leo_protocol::chain::error_chain(&e),
                        "the database is unreachable; the broker refuses new work \
                         (store_unavailable) until it is back"
                    );
                }
                Err(Error::Unavailable(e.into()))
            }
            Err(e) => {
                self.pending.clear();
                Err(self.gate.shut(e.into(), CANNOT_RECORD))
            }
        }
    }

    /// Commits what is pending, after dropping each change whose data the database refuses
    /// (`PgError::is_data`); the last such refusal, if any, for the batch's waiters.
    async fn write_pending(&mut self) -> Result<Option<PgError>, PgError> {
        let mut dropped = None;
        // Ends: every round commits, fails for good, or drops one pending change.
        loop {
            let result = async {
                let client = self.pool.get().await.map_err(PgError::Connect)?;
                let fence = (self.settings.me.id.as_str(), self.epoch);
                write::commit(&client, fence, &self.pending, self.settings.remember).await
            }
            .await;
            match result {
                Ok(()) => return Ok(dropped),
                Err(write::Failed { error, op: Some(i) })
                    if error.is_data() && i < self.pending.len() =>
                {
                    let op = self.pending.remove(i);
                    error!(
                        change = op_name(&op),
                        error = %leo_protocol::chain::error_chain(&error),
                        "the database cannot hold this change; it is dropped and the rest \
                         written (the waiters of its batch are refused)"
                    );
                    dropped = Some(error);
                }
                Err(failed) => return Err(failed.error),
            }
        }
    }

    /// With no job for a while: retry what is pending (or probe) while the database is away,
    /// and read the instances again.
    async fn tick(&mut self) {
        if self.gate.is_shut() {
            return;
        }
        if !self.pending.is_empty() || !self.available.load(Ordering::Relaxed) {
            let _ = self.flush().await;
        }
        if self.last_beat.elapsed() >= self.settings.heartbeat
            || !self.available.load(Ordering::Relaxed)
        {
            self.look_around().await;
        }
    }

    /// At a clean stop, once everything is written: the lease goes to whoever waits.
    async fn release(&self) {
        if self.gate.is_shut() || !self.pending.is_empty() {
            return;
        }
        let released = async {
            let client = self.pool.get().await.map_err(PgError::Connect)?;
            lease::release(&client, &self.settings.me.id, self.settings.lease).await
        }
        .await;
        if let Err(e) = released {
            warn!(error = %leo_protocol::chain::error_chain(&e), "the lease was not given up");
        }
    }

    /// A batch the fence refused is the lost lease it means.
    fn deposed(&self, e: PgError) -> PgError {
        if !e.is_fenced() {
            return e;
        }
        self.deposed.cancel();
        match e {
            PgError::LeaseLost { .. } => e,
            _ => PgError::LeaseLost {
                holder: "the fence refused a write".into(),
            },
        }
    }

    /// Reads the instances sharing the database, for the status snapshot, and notices an
    /// outage while nothing is written. (The lease is renewed by the election, see
    /// `cluster::election`; a write of a deposed leader is refused by its fence.)
    async fn look_around(&mut self) {
        let found = async {
            let client = self.pool.get().await.map_err(PgError::Connect)?;
            lease::instances(&client, self.settings.lease).await
        }
        .await;
        self.last_beat = tokio::time::Instant::now();
        match found {
            Ok(found) => {
                if let Ok(mut instances) = self.instances.lock() {
                    *instances = found;
                }
            }
            Err(e) if e.is_outage() && self.available.swap(false, Ordering::Relaxed) => {
                warn!(
                    error = %leo_protocol::chain::error_chain(&e),
                    "the database is unreachable; the broker refuses new work until it is back"
                );
            }
            Err(_) => {}
        }
    }
}
