//! The broker's live state on disk: `$LEO_HOME/state/leo.db`, so a restart (a crash, a
//! `kill -9`, an upgrade) loses no accepted call and no unread message.
//!
//! SQLite (bundled, WAL): a real database a user can open with `sqlite3`, crash-safe by
//! design, one file. The core stays the one place that decides; the store only records what
//! it decided. Every change is an [`Op`], queued under the core's lock (a channel send, never a
//! wait) so the file sees changes in the order the core made them. One writer thread owns the
//! connection and commits whatever is queued as one transaction, so a burst of calls costs
//! one commit, not one per call.
//!
//! **Durability rule:** an operation that accepts work (a claim, a result, a cancel, a queued
//! message) is acknowledged only after [`Store::committed`] resolves, which waits for the
//! commit of everything queued before it. A parked call is queued before any app can see it,
//! so an app's acknowledged claim or result implies its call is on disk too. A commit that
//! fails answers every waiter of its batch with an error, and every later one too: what
//! failed is lost, so nothing after it may be acknowledged as if it had been recorded (see
//! `writer`). PostgreSQL's outages, and a change whose data it refuses, are the exceptions
//! (see `postgres`).
//!
//! This module is the store's interface to the core (`Op`, `Store::committed`, `Restored`,
//! `Store::available`) and names no database's type; `schema`, `read` and `writer` are its
//! SQLite side, on the shared layer in `crate::sqlite`, and `postgres` is the PostgreSQL store
//! (`store.url`), whose outages are transient (see there): the one difference the core sees
//! is [`Store::available`], false while the database cannot be reached.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use leo_protocol::ipc::{Message, RawOutcome};
use leo_protocol::names::{ClientId, RequestId};
use leo_protocol::outcome::CallOutcome;
use leo_protocol::requests::Request;
use tokio::sync::oneshot;
use tracing::{debug, error, info, warn};

mod error;
pub mod history;
pub mod oauth;
pub mod postgres;
mod read;
pub mod schema;
pub mod sqlite;
mod write;
mod writer;

pub use error::{DbError, Error};
pub use read::Restored;

/// The variable that names the PostgreSQL store, over `store.url`.
pub const STORE_URL_VAR: &str = "LEO_STORE_URL";

/// Where the PostgreSQL store's URL came from, as a fix names it: `LEO_STORE_URL` when it is
/// set, else `store.url`.
pub fn store_key() -> &'static str {
    if std::env::var_os(STORE_URL_VAR).is_some_and(|v| !v.is_empty()) {
        STORE_URL_VAR
    } else {
        "store.url"
    }
}

/// Transactions the live store committed in this process, both databases (`/metrics`'
/// `leo_store_commits`).
static COMMITS: AtomicU64 = AtomicU64::new(0);

/// How many transactions the live store has committed in this process.
pub fn commits() -> u64 {
    COMMITS.load(Ordering::Relaxed)
}

/// Counts one commit of the live store.
fn committed() {
    COMMITS.fetch_add(1, Ordering::Relaxed);
}

/// `store.synchronous`: how hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Synchronous {
    /// Survives the broker being killed (`kill -9`, a crash); a power loss may lose the last
    /// commits. SQLite's `synchronous=NORMAL` in WAL mode.
    #[default]
    Normal,
    /// Survives a power loss too: every commit waits for `fsync`.
    Full,
}

/// A live call as stored: its request (arguments as the text the broker checked; `owner` is
/// not stored, the owners table is), and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCall {
    pub request: Request,
    pub local_id: u64,
    /// When it times out, in milliseconds since 1970; time spent down counts.
    pub deadline_ms: Option<i64>,
    pub claimed_by: Option<ClientId>,
    /// Where the call stands with its approval, as the broker wrote it (its JSON; the store
    /// does not read it): `None` for a call that needs none.
    pub approval: Option<String>,
}

/// A request that ended, as stored; `outcome` until the sidecar has been sent it.
#[derive(Debug, Clone)]
pub struct StoredEnd {
    pub id: RequestId,
    pub how: CallOutcome,
    pub agent: String,
    pub session: String,
    pub local_id: u64,
    pub outcome: Option<String>,
}

/// A provider stream that may resume.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredClient {
    pub client_id: ClientId,
    pub resume_key: String,
    pub principal: String,
    pub name: Option<String>,
}

/// A tool definition agents were offered, kept across restarts and takeovers so that
/// `client_tools.pin_definitions` still holds a changed one back afterwards (`Registry::seen`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDefinition {
    pub name: String,
    /// The group that registered it (a definition is compiled under a group).
    pub group: String,
    /// `sha256:` of the definition (`registry::digest_of`), for whoever reads the table.
    pub digest: String,
    /// The definition's JSON, as registered.
    pub definition: String,
}

/// One change the core made.
#[derive(Debug)]
pub enum Op {
    Park(StoredCall),
    Claim {
        id: String,
        by: String,
    },
    /// A claim given back: the call is parked again.
    Unclaim {
        id: String,
    },
    /// The approval of live call `id` changed (`approval`, its JSON as for `StoredCall`);
    /// `arguments`, when given, are the approver's edit, which replace the call's.
    Approval {
        id: String,
        approval: String,
        arguments: Option<String>,
    },
    End {
        id: RequestId,
        how: CallOutcome,
        agent: String,
        session: String,
        local_id: u64,
        outcome: Option<RawOutcome>,
    },
    /// The outcome of `id` was written to its sidecar; it need not be kept.
    Delivered {
        id: String,
    },
    Mail {
        agent: String,
        message: Message,
    },
    /// `agent` read its mailbox.
    MailTaken {
        agent: String,
    },
    /// Only the newest `keep` messages of `agent` stay.
    MailTrim {
        agent: String,
        keep: usize,
    },
    Client(StoredClient),
    ClientGone {
        client_id: String,
    },
    Owner {
        agent: String,
        group: String,
        client_id: String,
    },
    /// What `client_id` owns (of `group` only, if given) is released.
    OwnersReleased {
        client_id: String,
        group: Option<String>,
    },
    /// Agents were offered this definition under its name.
    Seen(StoredDefinition),
    /// The definition offered under `name` is no longer remembered.
    Unseen {
        name: String,
    },
    /// `client_id` serves `group` with `tools` (a JSON array of names), connected through the
    /// instance `via` (`None`: the leader itself). A mirror for operators (`SELECT * FROM
    /// registrations`): a registration lives with its connection, so none is restored.
    Registered {
        client_id: String,
        group: String,
        tools: String,
        via: Option<String>,
    },
    /// `client_id` no longer serves `group` (every group, if `None`).
    Unregistered {
        client_id: String,
        group: Option<String>,
    },
    /// At start: the registrations of the connections before it are gone with them.
    RegistrationsCleared,
}

/// An `Op::End` as both stores write it into `ended`: the outcome serialized once.
pub(crate) struct EndRow<'a> {
    pub id: &'a str,
    pub how: &'static str,
    pub agent: &'a str,
    pub session: &'a str,
    pub local_id: i64,
    pub outcome: Option<String>,
}

impl Op {
    /// What the change does, for logs and errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Park(_) => "record a parked call",
            Op::Claim { .. } => "record a claim",
            Op::Unclaim { .. } => "record a claim given back",
            Op::Approval { .. } => "record an approval",
            Op::End { .. } => "record an ending",
            Op::Delivered { .. } => "record a delivered outcome",
            Op::Mail { .. } => "record a message",
            Op::MailTaken { .. } => "record a mailbox read",
            Op::MailTrim { .. } => "trim a mailbox",
            Op::Client(_) => "record a client",
            Op::ClientGone { .. } => "record a client gone",
            Op::Owner { .. } => "record an owner",
            Op::OwnersReleased { .. } => "release owners",
            Op::Seen(_) => "record an offered definition",
            Op::Unseen { .. } => "forget an offered definition",
            Op::Registered { .. } => "record a registration",
            Op::Unregistered { .. } => "forget a registration",
            Op::RegistrationsCleared => "forget the registrations before the start",
        }
    }

    /// The row an ending writes; `None` for any other change.
    pub(crate) fn end_row(&self) -> Option<EndRow<'_>> {
        let Op::End {
            id,
            how,
            agent,
            session,
            local_id,
            outcome,
        } = self
        else {
            return None;
        };
        Some(EndRow {
            id: id.as_str(),
            how: how.as_str(),
            agent,
            session,
            local_id: *local_id as i64,
            outcome: outcome
                .as_ref()
                .map(|o| serde_json::to_string(o).unwrap_or_default()),
        })
    }
}

/// The calls a batch both parks and ends (a burst's parks and endings share a commit when the
/// writer is behind): the ending removes the `live` row the park would write, so neither the
/// park nor a claim of such a call is written, and its ending has no row to delete. The file
/// is left as if each change had been written; the batch writes the `ended` row only. Both
/// stores write batches through this.
pub(crate) struct Coalesced<'a> {
    parked_and_ended: std::collections::HashSet<&'a str>,
}

impl<'a> Coalesced<'a> {
    pub(crate) fn new<I>(ops: I) -> Coalesced<'a>
    where
        I: Iterator<Item = &'a Op> + Clone,
    {
        let parked: std::collections::HashSet<&str> = ops
            .clone()
            .filter_map(|op| match op {
                Op::Park(c) => Some(c.request.id.as_str()),
                _ => None,
            })
            .collect();
        let parked_and_ended = if parked.is_empty() {
            parked
        } else {
            ops.filter_map(|op| match op {
                Op::End { id, .. } if parked.contains(id.as_str()) => Some(id.as_str()),
                _ => None,
            })
            .collect()
        };
        Coalesced { parked_and_ended }
    }

    /// Whether `op` is left unwritten: the park or a claim of a call the batch also ends.
    pub(crate) fn skips(&self, op: &Op) -> bool {
        match op {
            Op::Park(c) => self.parked_and_ended.contains(c.request.id.as_str()),
            Op::Claim { id, .. } | Op::Unclaim { id } | Op::Approval { id, .. } => {
                self.parked_and_ended.contains(id.as_str())
            }
            _ => false,
        }
    }

    /// Whether the ending of `id` has a `live` row to delete (one an earlier batch wrote).
    pub(crate) fn has_live_row(&self, id: &str) -> bool {
        !self.parked_and_ended.contains(id)
    }
}

/// What the writer thread is given: changes, a wait for their commit, or the close.
pub enum Job {
    Ops(Vec<Op>),
    Sync(oneshot::Sender<Result<(), Error>>),
    /// Commit what is queued, checkpoint, close the file, then answer.
    Close(oneshot::Sender<Result<(), Error>>),
}

/// How often the WAL of `state/leo.db` is checkpointed into the main file and truncated
/// (when anything was written since): the longest an ended call's contents stay on disk.
pub const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The handle the broker holds: queue changes, wait for their commit.
pub struct Store {
    /// Where jobs go: the one writer (`writer`), over either database.
    tx: Option<tokio::sync::mpsc::UnboundedSender<Job>>,
    closed: std::sync::atomic::AtomicBool,
    /// False while the database cannot be reached (PostgreSQL only).
    available: Arc<std::sync::atomic::AtomicBool>,
    /// The instances sharing the database, as the writer last read them (PostgreSQL only).
    instances: postgres::Instances,
    /// Cancelled when the database says another instance leads now (PostgreSQL only).
    deposed: tokio_util::sync::CancellationToken,
    /// The epoch this instance leads the database in (PostgreSQL only).
    epoch: Option<i64>,
}

impl Store {
    /// Opens (or creates, mode 0600) the database at `path`, migrates it, reads what was
    /// live, and starts the writer. `remember` bounds the ended requests kept.
    /// The file is checked page by page first (`PRAGMA quick_check`): a damaged one is
    /// refused rather than found out by the first write that touches the damage.
    pub fn open(
        path: &Path,
        sync: Synchronous,
        remember: usize,
    ) -> Result<(Store, Restored), Error> {
        // The page size stays SQLite's default, 4,096 bytes. Measured against 1,024, 2,048 and
        // 8,192 (bench/results.md, 2026-12-05 22:30 UTC, a call's writes replayed on this
        // schema): 1,024 saves 28,000 instructions and about 12 µs per small call (fewer and
        // smaller WAL frames to checksum and write, less for secure_delete to zero), but a
        // call with 64 KiB of arguments then spans four times as many overflow pages and its
        // two commits take about 200 µs more at p50, 2,048 about 70 µs more; 8,192 is slower
        // for small calls. The default is the one no payload pays for.
        let options = sqlite::Options {
            full_sync: sync == Synchronous::Full,
            check: true,
        };
        let conn = sqlite::open(path, options, schema::MIGRATIONS)?;
        let restored = read::restore(&mut read::Sqlite(&conn))
            .map_err(sqlite::Error::doing("read the state"))?;
        info!(
            path = %path.display(),
            live = restored.live.len(),
            messages = restored.mail.len(),
            "state database opened"
        );
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let store = Store::with(Some(tx));
        write::spawn(conn, remember, store.shared(), rx)?;
        Ok((store, restored))
    }

    /// Opens the PostgreSQL store (`store.url`): connects, migrates under the schema lock,
    /// records the instance and reads what was live (see `postgres`).
    pub fn open_postgres(
        db: &postgres::Database,
        settings: postgres::Settings,
    ) -> Result<(Store, Restored), Error> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let store = Store::with(Some(tx));
        let (restored, epoch) =
            postgres::open(db, settings, rx, store.shared(), store.instances.clone())?;
        let mut store = store;
        store.epoch = Some(epoch);
        Ok((store, restored))
    }

    /// What the writer shares with this handle.
    fn shared(&self) -> writer::Shared {
        writer::Shared {
            available: self.available.clone(),
            deposed: self.deposed.clone(),
        }
    }

    fn with(tx: Option<tokio::sync::mpsc::UnboundedSender<Job>>) -> Store {
        Store {
            tx,
            closed: std::sync::atomic::AtomicBool::new(false),
            available: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            instances: postgres::Instances::default(),
            deposed: tokio_util::sync::CancellationToken::new(),
            epoch: None,
        }
    }

    /// The epoch this instance leads the database in (see `postgres::lease`); `None` for
    /// SQLite.
    pub fn epoch(&self) -> Option<i64> {
        self.epoch
    }

    /// Resolves once another instance took the database's lease from this one (see
    /// `postgres::lease`); never for SQLite.
    pub async fn deposed(&self) {
        self.deposed.cancelled().await;
    }

    /// Whether another instance took the database's lease from this one (see [`Store::deposed`]).
    pub fn is_deposed(&self) -> bool {
        self.deposed.is_cancelled()
    }

    /// Cancelled once another instance took the database's lease from this one: nothing more
    /// is committed (the history then records no more endings). Never for SQLite.
    pub fn deposition(&self) -> tokio_util::sync::CancellationToken {
        self.deposed.clone()
    }

    /// The instances sharing the database, as last read (every heartbeat); empty for SQLite.
    pub fn instances(&self) -> Vec<leo_protocol::status::InstanceStatus> {
        self.instances.lock().map(|i| i.clone()).unwrap_or_default()
    }

    /// Whether the database can be reached, as last seen: false while PostgreSQL is away,
    /// when operations that accept work are refused (`store_unavailable`) before they change
    /// anything. Always true for SQLite, whose failures are not transient.
    pub fn available(&self) -> bool {
        self.available.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A store that records nothing (unit tests of the core).
    pub fn disabled() -> Store {
        Store::with(None)
    }

    /// Queues `ops`, in order after everything queued before. Never waits.
    pub fn send(&self, ops: Vec<Op>) {
        if ops.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx
            && tx.send(Job::Ops(ops)).is_err()
        {
            if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
                warn!("a change made after the store closed was not recorded");
            } else {
                error!("the store's writer has stopped; a change was not recorded");
            }
        }
    }

    /// Resolves once everything queued so far is committed; an error if that commit, or
    /// any before it, failed.
    pub fn committed(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        self.ask(Job::Sync)
    }

    /// [`Store::committed`], waited for on a thread of its own (never on the runtime): the
    /// history's writer, before it records endings.
    pub fn committed_blocking(&self) {
        if let Some(tx) = &self.tx {
            let (done, rx) = oneshot::channel();
            if tx.send(Job::Sync(done)).is_ok() {
                let _ = rx.blocking_recv();
            }
        }
    }

    fn ask(
        &self,
        job: fn(oneshot::Sender<Result<(), Error>>) -> Job,
    ) -> impl Future<Output = Result<(), Error>> + use<> {
        let rx = self.tx.as_ref().map(|tx| {
            let (done, rx) = oneshot::channel();
            let _ = tx.send(job(done));
            rx
        });
        async move {
            match rx {
                None => Ok(()),
                Some(rx) => rx.await.unwrap_or(Err(Error::Stopped)),
            }
        }
    }

    /// At shutdown: commits what is queued, checkpoints the WAL into the main file and
    /// truncates it, and closes the file; errors are logged. Later changes are not recorded.
    /// A deposed leader's store closes too, its changes refused by the fence as expected.
    pub async fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        match self.ask(Job::Close).await {
            Err(e) if self.deposed.is_cancelled() => {
                debug!(error = %leo_protocol::chain::error_chain(&e), "deposed: the last changes are not recorded");
            }
            Err(e) => {
                error!(error = %leo_protocol::chain::error_chain(&e), "the last changes could not be recorded");
            }
            Ok(()) => {}
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("enabled", &self.tx.is_some())
            .field("closed", &self.closed)
            .finish()
    }
}

/// Milliseconds since 1970, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
