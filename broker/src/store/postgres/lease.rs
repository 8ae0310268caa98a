//! One live instance per database, by lease: the rule that keeps a call settled once while
//! the state lives in PostgreSQL.
//!
//! Each broker holds the live state it restored in its own memory and decides claims and
//! results there, so two brokers serving one database at once would each decide for the same
//! calls. An instance therefore takes the database's lease before it reads the state: the row
//! of `instances` with the freshest `seen_at`, renewed every [`HEARTBEAT`] and held for
//! [`LEASE`]. A broker that starts while another instance's lease is fresh waits (logging who
//! holds it) and takes over once that lease lapses: the holder stopped, was killed, or lost
//! its host. It then restores everything the holder had committed: parked and claimed calls,
//! resume keys, owners, unread messages; apps resume on it with their keys, and `leo-mcp`
//! sessions given its address re-attach their calls. The same instance id (the same
//! `LEO_HOME`) takes its own lease back at once after a restart.
//!
//! The lease is checked and taken under a transaction-level advisory lock, so two brokers
//! starting together cannot both take it. A holder that finds a newer lease than its own when
//! it renews (it was cut off from the database longer than [`LEASE`] and another instance
//! took over meanwhile) stops acknowledging anything.

use std::time::Duration;

use deadpool_postgres::Client;
use tracing::{info, warn};

use super::PgError;

/// How often the holder renews its lease.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long a lease lasts without renewal: three heartbeats.
pub const LEASE: Duration = Duration::from_secs(15);
/// How often a waiting broker looks at the lease again.
const POLL: Duration = Duration::from_secs(1);
/// The advisory lock the lease is checked and taken under (`leo` + 1).
const LEASE_LOCK: i64 = super::schema::SCHEMA_LOCK + 1;

/// Waits until no other instance holds a fresh lease, then takes it for `instance`.
pub async fn take(client: &mut Client, instance: &str) -> Result<(), PgError> {
    let mut waiting = false;
    loop {
        match try_take(client, instance).await? {
            None => {
                if waiting {
                    info!(instance, "took over the database's lease");
                }
                return Ok(());
            }
            Some(holder) => {
                if !waiting {
                    warn!(
                        holder = %holder,
                        lease_s = LEASE.as_secs(),
                        "another instance holds this database; waiting for its lease to lapse"
                    );
                    waiting = true;
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Takes the lease unless another instance holds a fresh one; `Some(holder)` then.
async fn try_take(client: &mut Client, instance: &str) -> Result<Option<String>, PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::doing("begin taking the lease"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LEASE_LOCK])
        .await
        .map_err(PgError::doing("take the lease lock"))?;
    let holder = tx
        .query_opt(
            "SELECT id || ' (host ' || host || ', pid ' || pid || ')' FROM instances
             WHERE id <> $1 AND seen_at > now() - make_interval(secs => $2)
             ORDER BY seen_at DESC LIMIT 1",
            &[&instance, &LEASE.as_secs_f64()],
        )
        .await
        .map_err(PgError::doing("read the lease"))?;
    if let Some(row) = holder {
        return Ok(Some(row.get(0)));
    }
    tx.execute(
        "INSERT INTO instances (id, host, pid, version, started_at, seen_at)
         VALUES ($1, $2, $3, $4, now(), now())
         ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
         version = EXCLUDED.version, started_at = now(), seen_at = now()",
        &[
            &instance,
            &super::hostname(),
            &i64::from(std::process::id()),
            &env!("CARGO_PKG_VERSION"),
        ],
    )
    .await
    .map_err(PgError::doing("record this instance"))?;
    tx.commit()
        .await
        .map_err(PgError::doing("take the lease"))
        .map(|()| None)
}

/// Renews `instance`'s lease; `LeaseLost` when another instance started since it took it.
pub async fn renew(client: &Client, instance: &str) -> Result<(), PgError> {
    let newer = client
        .query_opt(
            "UPDATE instances SET seen_at = now() WHERE id = $1
             RETURNING (SELECT o.id FROM instances o WHERE o.id <> $1
                        AND o.started_at > instances.started_at
                        AND o.seen_at > now() - make_interval(secs => $2) LIMIT 1)",
            &[&instance, &LEASE.as_secs_f64()],
        )
        .await
        .map_err(PgError::doing("renew the lease"))?;
    match newer.and_then(|row| row.get::<_, Option<String>>(0)) {
        Some(holder) => Err(PgError::LeaseLost { holder }),
        None => Ok(()),
    }
}

/// Gives the lease up at a clean stop, so a waiting instance takes over at its next look
/// instead of after [`LEASE`].
pub async fn release(client: &Client, instance: &str) -> Result<(), PgError> {
    client
        .execute(
            "UPDATE instances SET seen_at = now() - make_interval(secs => $2) WHERE id = $1",
            &[&instance, &LEASE.as_secs_f64()],
        )
        .await
        .map(drop)
        .map_err(PgError::doing("release the lease"))
}
