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
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::{info, warn};

use super::writer::{Backend, Refused, Shared, Writer};
use super::{DbError, Job, Op, Restored};

pub use database::{Database, Lead, PgError, describe};
/// A pooled connection, as [`Database::run`] lends it.
pub use deadpool_postgres::Object;
pub use fence::{Fenced, Tx, Unfenced};
/// A connection outside the pool (`Database::dedicated`).
pub use tokio_postgres::Client as Dedicated;

mod database;
pub(crate) mod fence;
pub mod lease;
mod read;
pub mod schema;
pub mod tls;
pub mod tokens;
mod write;

/// How often a store that lost its database tries again.
pub use super::writer::RETRY;

/// The instances sharing the database, as the writer last read them, for the status snapshot.
pub type Instances = Arc<std::sync::Mutex<Vec<leo_protocol::status::InstanceStatus>>>;

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
/// instance and reads what was live; then the one writer runs over [`Pg`] on the database's
/// runtime until the store closes. Blocks until the state is read: what it held, and the epoch
/// this instance leads in. Call it off the broker's runtime.
pub(crate) fn open(
    db: &Database,
    settings: Settings,
    rx: UnboundedReceiver<Job>,
    shared: Shared,
    instances: Instances,
) -> Result<(Restored, i64), PgError> {
    let (ready, opened) = std::sync::mpsc::sync_channel(1);
    let db = db.clone();
    db.clone().spawn(async move {
        match start(&db, &settings).await {
            Ok((epoch, restored)) => {
                let _ = ready.send(Ok((restored, epoch)));
                let mut pg = Pg {
                    pool: db.pool(),
                    settings,
                    epoch,
                    instances,
                };
                let _ = pg.tick().await;
                Writer::new(pg, shared).run(rx).await;
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

/// PostgreSQL's backend of the one writer: a batch is one fenced transaction (`write`), its
/// failure judged by the database's answer; the upkeep reads the instances sharing the
/// database, and a clean close gives the lease to whoever waits.
struct Pg {
    pool: Pool,
    settings: Settings,
    /// The epoch this instance leads in: every batch is fenced by it (see `lease`).
    epoch: i64,
    /// Where each upkeep puts the instances it read.
    instances: Instances,
}

impl Backend for Pg {
    async fn commit(&mut self, ops: &[Op]) -> Result<usize, Refused> {
        let written = async {
            let client = self.pool.get().await.map_err(PgError::Connect)?;
            let fence = (self.settings.me.id.as_str(), self.epoch);
            write::commit(&client, fence, ops, self.settings.remember).await
        };
        match written.await {
            Ok(()) => Ok(ops.len()),
            Err(failed) => Err(judge(failed)),
        }
    }

    fn every(&self) -> Duration {
        self.settings.heartbeat
    }

    /// Reads the instances sharing the database, for the status snapshot, and notices an
    /// outage while nothing is written. (The lease is renewed by the election, see
    /// `cluster::election`; a write of a deposed leader is refused by its fence.)
    async fn tick(&mut self) -> Result<(), DbError> {
        let found = async {
            let client = self.pool.get().await.map_err(PgError::Connect)?;
            lease::instances(&client, self.settings.lease).await
        };
        match found.await {
            Ok(found) => {
                if let Ok(mut instances) = self.instances.lock() {
                    *instances = found;
                }
                Ok(())
            }
            Err(e) if e.is_outage() => Err(e.into()),
            Err(_) => Ok(()),
        }
    }

    /// At a clean stop, once everything is written: the lease goes to whoever waits.
    async fn close(self, clean: bool) {
        if !clean {
            return;
        }
        let released = async {
            let client = self.pool.get().await.map_err(PgError::Connect)?;
            lease::release(&client, &self.settings.me.id, self.settings.lease).await
        };
        if let Err(e) = released.await {
            warn!(error = %leo_protocol::chain::error_chain(&e), "the lease was not given up");
        }
    }
}

/// What a batch the database did not commit means, as the writer is told: out of reach, the
/// fence (the lost lease it means), one change's data it cannot hold (`PgError::is_data`), or
/// any other refusal.
fn judge(failed: write::Failed) -> Refused {
    let write::Failed { error, op } = failed;
    if error.is_outage() {
        return Refused::Away(error.into());
    }
    if error.is_fenced() {
        let lost = match error {
            PgError::LeaseLost { .. } => error,
            _ => PgError::LeaseLost {
                holder: "the fence refused a write".into(),
            },
        };
        return Refused::Fenced(lost.into());
    }
    match op {
        Some(op) if error.is_data() => Refused::Data {
            op,
            error: error.into(),
        },
        _ => Refused::Failed(error.into()),
    }
}
