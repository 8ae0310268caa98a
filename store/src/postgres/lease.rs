//! Who leads a database, by lease and epoch: the rule that keeps a call settled once while
//! several instances serve one PostgreSQL database.
//!
//! Every instance serves, but only one decides: the leader runs the only core (it alone
//! restores the live state, decides claims, results, timeouts and cancels, and writes them),
//! and every other instance forwards what it receives to it (`cluster`). The database says who
//! leads: the one row of `cluster` names the leader and its epoch, and the leader's row of
//! `instances` holds its lease, renewed every heartbeat and held for the lease's length
//! (`cluster.heartbeat_ms`, `cluster.lease_ms`; the rules of when are `cluster::election`'s,
//! and each function here that judges a lease fresh is given its length). An instance
//! that finds no fresh leader (none yet, the leader stopped, was killed or lost its host, or it
//! is the leader itself, restarted with the same `LEO_HOME`) takes the lease: the epoch goes
//! up by one, under a transaction-level advisory lock so two instances cannot both take it.
//!
//! **A dead leader is seen at once.** A lease lapses only after its length, which is what a
//! leader whose host vanished (its TCP silent) needs; a leader whose *process* died is seen
//! sooner. For as long as it leads, a leader holds a session-level advisory lock of its own
//! ([`ALIVE`], keyed by its id: [`hold_alive`]) on a connection of its own, and PostgreSQL
//! releases that lock the moment the connection closes, which a killed process's does at
//! once. So a lease whose holder no longer holds its lock is free ([`LEADER`] tries the lock:
//! taken, it is the dead leader's to take), and a follower takes over at its next look. A
//! leader that is merely frozen (stopped, or swapping) keeps its connection and its lock: its
//! lease lapses as a vanished host's does, and the fence below keeps it from committing when
//! it wakes. A clean stop also says so: `release` sends `NOTIFY leo_lease` ([`WAKE`]), which
//! the followers listen for, so they look at once instead of at their next poll.
//!
//! **Only an instance that knows the schema leads.** A take reads `leo_schema` under the lease
//! lock and refuses ([`PgError::NewerSchema`], which stops the instance as it would at
//! start) when another instance has migrated the database past what this one knows: during a
//! rolling upgrade an instance of the older version forwards, but never restores rows whose
//! newer columns it would ignore.
//!
//! **The fence.** A leader cut off from the database for longer than the lease may still be
//! running when another instance takes over. So every write batch of the leader runs
//! `leo_fence(me, epoch)` as its first statement, in its own transaction: it fails the
//! transaction unless `cluster` still names this instance in this epoch, and it holds the
//! `cluster` row `FOR SHARE` until the commit, so a take (which updates that row) waits for a
//! batch in flight and the new leader restores after the old one's last commit. A deposed
//! leader's commit therefore fails and is never acknowledged; its renewal finds the same and
//! it stops acknowledging anything.

use std::time::Duration;

use deadpool_postgres::Client;
use tracing::info;

use super::PgError;

/// The advisory lock the lease is checked and taken under (`leo` + 1).
const LEASE_LOCK: i64 = super::schema::SCHEMA_LOCK + 1;
/// The class of the advisory lock a leader holds while it leads: the two-key form, the
/// second key `hashtext` of its id, apart from the one-key locks above.
pub const ALIVE: i32 = 0x006c_656f;
/// The channel a leader giving its lease up notifies, and the followers listen on.
pub const WAKE: &str = "leo_lease";
/// The SQLSTATE `leo_fence` raises when the writer no longer leads.
pub const FENCED: &str = "LEO01";
/// The first statement of every write batch (see the module's doc).
pub const FENCE: &str = "SELECT leo_fence($1, $2)";

/// This instance, as its row of `instances` records it.
#[derive(Debug, Clone)]
pub struct Me {
    pub id: String,
    /// Where its peers reach it (`cluster.advertise_url`).
    pub url: String,
}

/// The instance that holds the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub id: String,
    pub url: Option<String>,
}

impl std::fmt::Display for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.url {
            Some(url) => write!(f, "{} at {url}", self.id),
            None => f.write_str(&self.id),
        }
    }
}

/// Who leads, as `look` finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// No fresh leader but this instance: it may take the lease.
    Free,
    Held(Leader),
}

/// The leader, unless the lease is free (or this instance's own): a lease is fresh while it
/// was renewed within `$1` seconds and its holder's connection still holds its [`ALIVE`]
/// lock. The lock is tried, not read from `pg_locks`: a transaction-level try takes it only
/// when nobody holds it, and lets it go at once (at the statement's end, or the take's). A
/// lock missing counts only once the leader renewed since the server started: a restart of
/// PostgreSQL closes every connection, and a leader takes its lock again before its next
/// renewal (so until then, the lease alone says whether it lives).
const LEADER: &str = "SELECT c.leader, i.url,
            COALESCE(i.seen_at > now() - make_interval(secs => $1), false)
            AND (i.seen_at < pg_postmaster_start_time()
                 OR NOT COALESCE(pg_try_advisory_xact_lock($2, hashtext(c.leader)), true))
     FROM cluster c LEFT JOIN instances i ON i.id = c.leader";

fn read_leader(row: Option<tokio_postgres::Row>, me: &str) -> Look {
    let Some(row) = row else { return Look::Free };
    let id: Option<String> = row.get(0);
    let fresh: bool = row.get(2);
    match id {
        Some(id) if fresh && id != me => Look::Held(Leader {
            id,
            url: row.get(1),
        }),
        _ => Look::Free,
    }
}

/// Says who leads (a lease renewed within `lease` is fresh); a follower (`Held`) records
/// meanwhile that it is alive when `alive`.
pub async fn look(client: &Client, me: &Me, alive: bool, lease: Duration) -> Result<Look, PgError> {
    let row = client
        .query_opt(LEADER, &[&lease.as_secs_f64(), &ALIVE])
        .await
        .map_err(PgError::doing("read the lease"))?;
    let look = read_leader(row, &me.id);
    if alive && let Look::Held(_) = look {
        present(client, me, false).await?;
    }
    Ok(look)
}

/// Writes `me`'s row: its host, process, version and URL, seen now; `started` resets when it
/// started (a take).
async fn present(
    client: &impl deadpool_postgres::GenericClient,
    me: &Me,
    started: bool,
) -> Result<(), PgError> {
    let started_at = if started { ", started_at = now()" } else { "" };
    let sql = format!(
        "INSERT INTO instances (id, host, pid, version, url, started_at, seen_at)
         VALUES ($1, $2, $3, $4, $5, now(), now())
         ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
         version = EXCLUDED.version, url = EXCLUDED.url, seen_at = now(){started_at}"
    );
    client
        .execute(
            sql.as_str(),
            &[
                &me.id,
                &super::hostname(),
                &i64::from(std::process::id()),
                &env!("CARGO_PKG_VERSION"),
                &me.url,
            ],
        )
        .await
        .map(drop)
        .map_err(PgError::doing("record this instance"))
}

/// Takes the lease for `me` unless another instance holds a fresh one (renewed within
/// `lease`; `Err(holder)` then); `Ok(epoch)`, the epoch this instance leads in. `key` becomes
/// the cluster's key if it has none yet.
pub async fn try_take(
    client: &mut Client,
    me: &Me,
    key: &str,
    lease: Duration,
) -> Result<Result<i64, Leader>, PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::doing("begin taking the lease"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LEASE_LOCK])
        .await
        .map_err(PgError::doing("take the lease lock"))?;
    // An instance never leads a database migrated past what it knows: a newer broker may
    // keep what this one would not read (an approval it would not wait for), so during an
    // upgrade only upgraded instances take the lead.
    let found: i32 = tx
        .query_one("SELECT COALESCE(max(version), 0) FROM leo_schema", &[])
        .await
        .map_err(PgError::doing("read the schema version"))?
        .get(0);
    let known = super::schema::current();
    if found > known {
        return Err(PgError::NewerSchema { found, known });
    }
    tx.execute(
        "INSERT INTO cluster (one, key) VALUES (true, $1) ON CONFLICT DO NOTHING",
        &[&key],
    )
    .await
    .map_err(PgError::doing("make the cluster's key"))?;
    let row = tx
        .query_opt(LEADER, &[&lease.as_secs_f64(), &ALIVE])
        .await
        .map_err(PgError::doing("read the lease"))?;
    if let Look::Held(leader) = read_leader(row, &me.id) {
        return Ok(Err(leader));
    }
    // Waits for a batch of the previous leader in flight (its fence holds the row).
    let epoch: i64 = tx
        .query_one(
            "UPDATE cluster SET leader = $1, epoch = epoch + 1 RETURNING epoch",
            &[&me.id],
        )
        .await
        .map_err(PgError::doing("take the lease"))?
        .get(0);
    present(&tx, me, true).await?;
    tx.commit()
        .await
        .map_err(PgError::doing("take the lease"))?;
    info!(instance = %me.id, epoch, "took the database's lease: this instance leads");
    Ok(Ok(epoch))
}

/// Takes `me`'s [`ALIVE`] lock on `client`, a connection of this instance's own that it keeps
/// for as long as it leads (see the module's doc). It waits rather than tries: the only
/// other holder can be a follower's look, for one statement.
pub async fn hold_alive(client: &tokio_postgres::Client, me: &str) -> Result<(), PgError> {
    client
        .execute("SELECT pg_advisory_lock($1, hashtext($2))", &[&ALIVE, &me])
        .await
        .map(drop)
        .map_err(PgError::doing("take this instance's alive lock"))
}

/// Listens on `client`, a connection of its own, for a lease given up ([`WAKE`]).
pub async fn listen(client: &tokio_postgres::Client) -> Result<(), PgError> {
    client
        .batch_execute(&format!("LISTEN {WAKE}"))
        .await
        .map_err(PgError::doing("listen for a lease given up"))
}

/// Renews `me`'s lease in `epoch`; `LeaseLost` when another instance took it since.
pub async fn renew(client: &Client, me: &str, epoch: i64) -> Result<(), PgError> {
    let deposed = client
        .query_opt(
            "UPDATE instances SET seen_at = now() WHERE id = $1
             RETURNING (SELECT COALESCE(leader, '(none)') FROM cluster
                        WHERE leader IS DISTINCT FROM $1 OR epoch <> $2)",
            &[&me, &epoch],
        )
        .await
        .map_err(PgError::doing("renew the lease"))?;
    match deposed.and_then(|row| row.get::<_, Option<String>>(0)) {
        Some(holder) => Err(PgError::LeaseLost {
            holder: format!("the leader now is {holder}"),
        }),
        None => Ok(()),
    }
}

/// Gives the lease up at a clean stop (or says a follower left), and wakes the followers
/// ([`WAKE`]), so one takes over at once instead of after the `lease`.
pub async fn release(client: &Client, me: &str, lease: Duration) -> Result<(), PgError> {
    client
        .execute(
            "WITH gone AS (UPDATE cluster SET leader = NULL WHERE leader = $1)
             UPDATE instances SET seen_at = now() - make_interval(secs => $2) WHERE id = $1",
            &[&me, &lease.as_secs_f64()],
        )
        .await
        .map_err(PgError::doing("release the lease"))?;
    // A follower leaving wakes the others too: they look, and find the same leader.
    client
        .execute("SELECT pg_notify($1, $2)", &[&WAKE, &me])
        .await
        .map(drop)
        .map_err(PgError::doing("wake the followers"))
}

/// The key instances of this database forward requests with, and the one it replaced while
/// that one's grace lasts (a leader accepts both); `None` before any instance led.
pub async fn cluster_keys(client: &Client) -> Result<Option<(String, Option<String>)>, PgError> {
    Ok(client
        .query_opt(
            "SELECT key, CASE WHEN previous_until > now() THEN previous_key END FROM cluster",
            &[],
        )
        .await
        .map_err(PgError::doing("read the cluster's keys"))?
        .map(|row| (row.get(0), row.get(1))))
}

/// Replaces the cluster's key with `new`; the old one is still accepted for `grace`. False
/// when no instance has led yet (there is no key to replace: the first leader makes one).
pub async fn rotate_key(
    client: &Client,
    new: &str,
    grace: std::time::Duration,
) -> Result<bool, PgError> {
    client
        .execute(
            "UPDATE cluster SET previous_key = key, key = $1,
                 previous_until = now() + make_interval(secs => $2)",
            &[&new, &grace.as_secs_f64()],
        )
        .await
        .map(|n| n == 1)
        .map_err(PgError::doing("replace the cluster's key"))
}

/// Every instance that has used the database, in the order they started, with its role (one
/// not seen within `lease` is gone).
pub async fn instances(
    client: &Client,
    lease: Duration,
) -> Result<Vec<leo_protocol::status::InstanceStatus>, PgError> {
    let rows = client
        .query(
            "SELECT i.id, i.host, i.url,
                    CASE WHEN i.seen_at <= now() - make_interval(secs => $1) THEN 'gone'
                         WHEN i.id = c.leader THEN 'leader' ELSE 'follower' END,
                    to_char(i.seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
             FROM instances i LEFT JOIN cluster c ON true ORDER BY i.started_at",
            &[&lease.as_secs_f64()],
        )
        .await
        .map_err(PgError::doing("read the instances"))?;
    Ok(rows
        .iter()
        .map(|r| leo_protocol::status::InstanceStatus {
            id: r.get(0),
            host: r.get(1),
            url: r.get(2),
            role: r.get(3),
            last_seen: r.get(4),
        })
        .collect())
}
