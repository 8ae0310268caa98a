//! The history of ended calls and the audit trail: in `state/history.db` (SQLite), or, with a
//! PostgreSQL store, in the database's tables `history` and `audit`, shared by every instance
//! on it.
//!
//! History is an append-only log, kept apart from the live state: the operator may prune or
//! delete it without touching live work, and its writes never slow or endanger the queue. The
//! core hands each record to this module with one call made under its lock; that call only puts
//! a message on a bounded channel (`try_send`, never waiting). One writer thread owns the
//! database, takes whatever has queued up and writes it in one transaction. When the channel is
//! full (the disk or the database cannot keep up), records are dropped and counted, never the
//! call.
//!
//! A call's row is written once its terminal outcome is decided (`settled` or `failed`) and
//! the live store has committed it: before a batch with an ending, the writer waits for the
//! store's commit of everything decided so far (`History::after_commits`), so a broker killed
//! in between leaves no row for an ending the restart does not know (which, in a cluster,
//! another leader would end again). The claim that came before is remembered by the writer
//! (`claimed`) to give the row its app and claim time. Reads go through the same thread, after the writes queued before them, so a
//! caller that saw its call end sees it in the history.
//!
//! **The rules are written once, the SQL once per database.** [`Writer`] decides what a batch
//! writes, when old rows are pruned (`history.keep_days`, `history.max_rows`) and how pages are
//! cut; it speaks to the database through [`Log`], whose two implementations are only
//! statements, in `leo_store::history`: `db` (SQLite, on the store's shared layer, which keeps
//! the file, the thread and the checkpoints) and `postgres` (its own connection pool, run by
//! this module's `postgres` thread).
//!
//! **History is best effort, in both.** A row that cannot be written is logged and dropped; the
//! call it records was answered already and is never held back or failed for it. One case is
//! kept rather than dropped: PostgreSQL out of reach (the server restarting, the network cut)
//! is transient, so the rows of that time are held, up to [`QUEUE`] of them, and written first
//! when the database answers again; past that they are dropped and counted as a full channel's
//! are. Reads meanwhile are answered `store_unavailable`.

mod postgres;

pub use leo_store::history::Error;
pub use leo_store::history::db;
use leo_store::history::{Log, MinuteCount, chain};

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::store::sqlite::Connection;
use leo_protocol::console::{CHART_MINUTES, MinuteCalls};
use leo_protocol::content::{AppError, Posted, content_size};
use leo_protocol::events::CancelReason;
use leo_protocol::history::{AuditList, CallOutcome, EndedList};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::config::{Config, HistoryConfig};
use crate::error::BrokerError;
use crate::home::Home;
use crate::requests::{Call, EndedCall};
use crate::store::postgres::Database;
use crate::tokens::Principal;
use db::{AuditRow, CallQuery, CallRow, Table};
use leo_store::sqlite;

/// Records that may wait for the writer (and rows held while PostgreSQL is away); past this
/// they are dropped and counted.
pub const QUEUE: usize = 65_536;
/// Records written in one transaction at most.
const BATCH: usize = 1024;
/// How often old rows are pruned (and the WAL checkpointed after).
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// How long records may wait for more before they are written: a call's history record is
/// read by nobody at once (a read takes the records queued before it), and written one call
/// at a time it cost a transaction per call, about 89,000 instructions of the broker's
/// 342,000 per relayed call (bench/callgrind.sh, 2026-12-04); lingering, a burst of calls
/// shares one. `/metrics`' call counters, counted here, lag by at most this.
const LINGER: Duration = Duration::from_millis(100);

/// A posted result's size, and its content when `history.store_content` keeps it.
#[derive(Debug, Clone)]
pub struct Posting {
    pub bytes: u64,
    pub content: Option<serde_json::Value>,
    /// `result`, or `error` with the app's code.
    pub outcome: CallOutcome,
    pub error_code: Option<String>,
}

pub(crate) struct Ended {
    id: String,
    call: Call,
    outcome: CallOutcome,
    /// With `error`: the app's code.
    error_code: Option<String>,
    /// When the broker ended it.
    reason: Option<CancelReason>,
    /// The answering app, for results (a claim may have come with the result).
    by: Option<(String, Option<String>)>,
    at: SystemTime,
    mono: Instant,
    result_bytes: Option<u64>,
    result: Option<serde_json::Value>,
}

pub(crate) struct Claim {
    client_id: String,
    name: Option<String>,
    at: SystemTime,
    mono: Instant,
}

pub(crate) enum Msg {
    Claimed(String, Claim),
    Ended(Box<Ended>),
    Audit(AuditRow),
    Calls(CallQuery, bool, oneshot::Sender<Result<EndedList, Error>>),
    Audits(u32, Option<u64>, oneshot::Sender<Result<AuditList, Error>>),
    PerMinute(i64, oneshot::Sender<Result<Vec<MinuteCount>, Error>>),
    Stop(std::sync::mpsc::Sender<()>),
}

/// What the writer runs before a batch that ends calls: returns once the live store has
/// committed (or failed to commit) every change decided before it was called.
/// Waits for the live store's commits; false when this broker may no longer record endings
/// (another instance took its database's lease: its store commits nothing more).
type Barrier = Box<dyn Fn() -> bool + Send + Sync>;

/// The handle the broker holds; cheap to clone.
#[derive(Clone)]
pub struct History {
    tx: SyncSender<Msg>,
    barrier: Arc<std::sync::OnceLock<Barrier>>,
    store_content: bool,
    dropped: Arc<AtomicU64>,
    thread: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

/// The principal and token kind of an audit entry.
pub fn who(p: &Principal) -> (String, &'static str) {
    match p {
        Principal::Operator => ("operator".into(), "operator"),
        Principal::Device(name) => (format!("device:{name}"), "device"),
        Principal::Agent => ("agent".into(), "agent"),
        Principal::ApiClient(name) => (format!("client:{name}"), "api_client"),
    }
}

/// Writes one audit entry for the commands that change `$LEO_HOME` without the broker (`leo
/// client`, `leo device`, `leo agent`): principal `cli:USER`, token kind `local`. It goes where
/// `home`'s broker keeps the trail: `state/history.db` (SQLite's locking lets it write beside a
/// running broker's writer), or, when the store is PostgreSQL, the database's `audit` under this
/// home's instance id, so every instance's trail shows it.
pub fn record_local(
    home: &Home,
    action: &str,
    target: &str,
    detail: Option<String>,
) -> Result<(), BrokerError> {
    let at = SystemTime::now();
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let row = AuditRow {
        at: leo_protocol::time::rfc3339(at),
        at_ms: millis(at),
        principal: format!("cli:{user}"),
        token_kind: "local".into(),
        action: action.to_owned(),
        target: Some(target.to_owned()),
        detail,
    };
    let url = crate::config::store_of(&home.config())?.postgres_url(&home.config())?;
    let Some(url) = url else {
        let path = home.history_db();
        let written = db::open(&path).and_then(|conn| {
            db::append_audit(&conn, &row).map_err(sqlite::Error::doing("write the audit entry"))
        });
        return written.map(drop).map_err(|e| BrokerError::Database {
            path,
            source: e.into(),
        });
    };
    let instance = crate::home::instance_id(home)?;
    let db = Database::open(&url)?;
    Ok(leo_store::history::postgres::record(&db, instance, row)?)
}

/// Walks `home`'s audit trail where its broker keeps it (as [`record_local`] writes it) and
/// reports the first entry that does not chain (`leo audit verify`). It only reads, so the
/// broker may be running or stopped.
pub fn verify_local(home: &Home) -> Result<chain::Verdict, BrokerError> {
    let url = crate::config::store_of(&home.config())?.postgres_url(&home.config())?;
    let Some(url) = url else {
        let path = home.history_db();
        let verdict = db::open(&path)
            .map_err(Error::from)
            .and_then(|conn| chain::verify(&mut db::Sqlite(&conn)));
        return verdict.map_err(|e| BrokerError::Database {
            path,
            source: e.into(),
        });
    };
    let instance = crate::home::instance_id(home)?;
    let db = Database::open(&url)?;
    chain::verify(&mut leo_store::history::postgres::Pg::open(&db, instance)).map_err(|e| match e {
        Error::Database(crate::store::DbError::Postgres(e)) => BrokerError::Postgres(e),
        e => BrokerError::State {
            path: crate::config::store_label().into(),
            message: e.to_string(),
        },
    })
}

/// The token kind of a stream's principal as `ClientInfo` names it (`operator`,
/// `device:NAME`, `console`).
pub fn kind_of(principal: &str) -> &'static str {
    match principal {
        "operator" => "operator",
        "console" => "session",
        p if p.starts_with("device:") => "device",
        _ => "unknown",
    }
}

/// Counts `n` records dropped; the first drop is logged.
fn count_dropped(dropped: &AtomicU64, n: u64) {
    if dropped.fetch_add(n, Ordering::Relaxed) == 0 {
        warn!("the history writer is behind; history records are being dropped");
    }
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl History {
    /// The history of `home`'s broker: PostgreSQL's tables when its store is PostgreSQL (rows
    /// under its instance id), else `state/history.db`.
    pub fn start(
        home: &Home,
        config: &Config,
        db: Option<&Database>,
    ) -> Result<History, BrokerError> {
        let Some(db) = db else {
            return History::open(&home.history_db(), &config.history).map_err(|e| {
                BrokerError::Database {
                    path: home.history_db(),
                    source: e.into(),
                }
            });
        };
        let instance = crate::home::instance_id(home)?;
        History::open_postgres(db, instance, &config.history).map_err(|e| match e {
            Error::Database(crate::store::DbError::Postgres(e)) => BrokerError::Postgres(e),
            e => BrokerError::State {
                path: crate::config::store_label().into(),
                message: e.to_string(),
            },
        })
    }

    /// Opens `path` (creating and migrating it) and starts the writer thread.
    pub fn open(path: &Path, config: &HistoryConfig) -> Result<History, Error> {
        let conn = db::open(path)?;
        let (tx, rx) = sync_channel(QUEUE);
        let barrier = Arc::new(std::sync::OnceLock::new());
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer::new(config, dropped.clone(), barrier.clone());
        let settings = sqlite::writer::Settings {
            name: "leo-history",
            batch: BATCH,
            every: PRUNE_EVERY,
            linger: LINGER,
            checkpoint_gap: sqlite::writer::CHECKPOINT_GAP,
        };
        let thread = sqlite::writer::spawn(settings, conn, rx, writer)?;
        Ok(History::with(tx, barrier, config, dropped, thread))
    }

    /// Starts the writer on the PostgreSQL database `db`; rows are written as `instance`'s,
    /// fenced by its lead. It connects when it first writes, so a database away at this moment
    /// delays the history, never the start.
    pub fn open_postgres(
        db: &Database,
        instance: String,
        config: &HistoryConfig,
    ) -> Result<History, Error> {
        let (tx, rx) = sync_channel(QUEUE);
        let barrier = Arc::new(std::sync::OnceLock::new());
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer::new(config, dropped.clone(), barrier.clone());
        let settings = postgres::Settings {
            instance,
            batch: BATCH,
            every: PRUNE_EVERY,
        };
        let thread = postgres::spawn(settings, db, rx, writer)?;
        Ok(History::with(tx, barrier, config, dropped, thread))
    }

    fn with(
        tx: SyncSender<Msg>,
        barrier: Arc<std::sync::OnceLock<Barrier>>,
        config: &HistoryConfig,
        dropped: Arc<AtomicU64>,
        thread: std::thread::JoinHandle<()>,
    ) -> History {
        History {
            tx,
            barrier,
            store_content: config.store_content,
            dropped,
            thread: Arc::new(std::sync::Mutex::new(Some(thread))),
        }
    }

    fn send(&self, msg: Msg) {
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => count_dropped(&self.dropped, 1),
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Records dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// An app claimed `id`.
    pub fn claimed(&self, id: &str, client_id: &str, name: Option<String>) {
        let claim = Claim {
            client_id: client_id.to_owned(),
            name,
            at: SystemTime::now(),
            mono: Instant::now(),
        };
        self.send(Msg::Claimed(id.to_owned(), claim));
    }

    /// What is kept of a posted result, measured before the post is consumed.
    pub fn posting(&self, posted: &Posted) -> Posting {
        let (bytes, error_code) = match posted {
            Posted::Content(blocks) => (content_size(blocks), None),
            Posted::Structured(blocks, s) => (
                content_size(blocks) + serde_json::to_vec(s).map_or(0, |v| v.len()),
                None,
            ),
            Posted::Error(e) => (
                serde_json::to_vec(e).map_or(0, |v| v.len()),
                Some(e.code.clone()),
            ),
        };
        let content = self.store_content.then(|| stored_result(posted));
        Posting {
            bytes: bytes as u64,
            content,
            outcome: match error_code {
                Some(_) => CallOutcome::Error,
                None => CallOutcome::Result,
            },
            error_code,
        }
    }

    /// `id` was settled by `client_id` (an app's result or error).
    pub fn settled(&self, id: &str, call: Call, by: (String, Option<String>), posting: Posting) {
        crate::telemetry::ended(
            id,
            crate::telemetry::Ending {
                outcome: posting.outcome,
                error: posting.error_code.as_deref(),
                by: Some(&by.0),
            },
        );
        let ended = Ended {
            id: id.to_owned(),
            call,
            outcome: posting.outcome,
            error_code: posting.error_code,
            reason: None,
            by: Some(by),
            at: SystemTime::now(),
            mono: Instant::now(),
            result_bytes: Some(posting.bytes),
            result: posting.content,
        };
        self.send(Msg::Ended(Box::new(ended)));
    }

    /// The broker ended calls (timeout, cancel, no client).
    pub fn failed(&self, ended: &[EndedCall]) {
        let (at, mono) = (SystemTime::now(), Instant::now());
        for e in ended {
            crate::telemetry::ended(
                &e.id,
                crate::telemetry::Ending {
                    outcome: CallOutcome::of_reason(e.reason),
                    error: Some(e.reason.as_str()),
                    by: None,
                },
            );
            self.send(Msg::Ended(Box::new(Ended {
                id: e.id.to_string(),
                call: e.call.clone(),
                outcome: CallOutcome::of_reason(e.reason),
                error_code: None,
                reason: Some(e.reason),
                by: None,
                at,
                mono,
                result_bytes: None,
                result: None,
            })));
        }
    }

    /// An authenticated change.
    pub fn audit(
        &self,
        (principal, kind): (String, &str),
        action: &str,
        target: Option<&str>,
        detail: Option<String>,
    ) {
        let at = SystemTime::now();
        self.send(Msg::Audit(AuditRow {
            at: leo_protocol::time::rfc3339(at),
            at_ms: millis(at),
            principal,
            token_kind: kind.to_owned(),
            action: action.to_owned(),
            target: target.map(str::to_owned),
            detail,
        }));
    }

    /// Ended calls, newest first, after every record queued before this call.
    pub async fn calls(&self, q: CallQuery, contents: bool) -> Result<EndedList, Error> {
        let (tx, rx) = oneshot::channel();
        self.ask(Msg::Calls(q, contents, tx))?;
        rx.await.map_err(|_| Error::Stopped)?
    }

    /// The calls that ended in each of the last `CHART_MINUTES` minutes before `now`, by
    /// outcome, oldest first, after every record queued before this call.
    pub async fn per_minute(&self, now: SystemTime) -> Result<Vec<MinuteCalls>, Error> {
        let first = millis(now) / MINUTE_MS - (CHART_MINUTES as i64 - 1);
        let (tx, rx) = oneshot::channel();
        self.ask(Msg::PerMinute(first * MINUTE_MS, tx))?;
        let counts = rx.await.map_err(|_| Error::Stopped)??;
        Ok(minutes(first, &counts))
    }

    /// Audit entries, newest first.
    pub async fn audits(&self, limit: u32, before: Option<u64>) -> Result<AuditList, Error> {
        let (tx, rx) = oneshot::channel();
        self.ask(Msg::Audits(limit, before, tx))?;
        rx.await.map_err(|_| Error::Stopped)?
    }

    fn ask(&self, msg: Msg) -> Result<(), Error> {
        self.tx.try_send(msg).map_err(|e| match e {
            TrySendError::Full(_) => Error::Busy,
            TrySendError::Disconnected(_) => Error::Stopped,
        })
    }

    /// Runs `barrier` (once the broker exists: it waits for the live store) before writing a
    /// batch that ends calls, and drops the batch's endings when it says so; set once.
    pub fn after_commits(&self, barrier: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.barrier.set(Box::new(barrier));
    }

    /// Writes what is queued, checkpoints and stops the writer; later records are ignored.
    pub fn close(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.tx.send(Msg::Stop(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// The body's `content` and `structured_content`, or its `error`, as stored.
fn stored_result(posted: &Posted) -> serde_json::Value {
    let blocks = |b: &[Box<serde_json::value::RawValue>]| {
        b.iter()
            .filter_map(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok())
            .collect::<Vec<_>>()
    };
    match posted {
        Posted::Content(b) => serde_json::json!({ "content": blocks(b) }),
        Posted::Structured(b, s) => {
            serde_json::json!({ "content": blocks(b), "structured_content": s })
        }
        Posted::Error(AppError { code, message }) => {
            serde_json::json!({ "error": { "code": code, "message": message } })
        }
    }
}

/// A minute in milliseconds, the width of the console chart's bars.
pub(crate) const MINUTE_MS: i64 = 60_000;

/// The `CHART_MINUTES` minutes from minute number `first` on, each with its counts.
fn minutes(first: i64, counts: &[MinuteCount]) -> Vec<MinuteCalls> {
    let mut out: Vec<MinuteCalls> = (0..CHART_MINUTES as i64)
        .map(|n| {
            let start = UNIX_EPOCH + Duration::from_millis(((first + n) * MINUTE_MS) as u64);
            MinuteCalls {
                at: leo_protocol::time::rfc3339(start),
                ..MinuteCalls::default()
            }
        })
        .collect();
    for &(minute, outcome, n) in counts {
        let slot = usize::try_from(minute - first).ok();
        if let Some(m) = slot.and_then(|i| out.get_mut(i)) {
            *m.of(outcome) += n;
        }
    }
    out
}

/// The history's side of the writer thread: the rules both databases follow.
pub(crate) struct Writer {
    barrier: Arc<std::sync::OnceLock<Barrier>>,
    keep: HistoryConfig,
    claims: HashMap<String, Claim>,
    /// Rows in `calls`, for `max_rows`.
    rows: u64,
    /// Rows not yet written: those of the batch at hand, and those an outage held back.
    calls: Vec<CallRow>,
    audits: Vec<AuditRow>,
    /// Since when the database has been out of reach, while it is.
    away: Option<Instant>,
    dropped: Arc<AtomicU64>,
}

impl sqlite::writer::Batches for Writer {
    type Job = Msg;

    /// A call's records and the audit entries wait for nobody; a read (and the stop) does, and
    /// takes every record queued before it into its batch, so it still sees them.
    fn urgent(&self, msg: &Msg) -> bool {
        matches!(
            msg,
            Msg::Calls(..) | Msg::Audits(..) | Msg::PerMinute(..) | Msg::Stop(_)
        )
    }

    /// `leo` writes its own audit entries into the same file (`record_local`), and the trail's
    /// order is the order of writing: a broker entry lingers holding the file's write lock, so
    /// a CLI change made after it waits for it and is listed after it (history.rs checks the
    /// order). Every claim and result is audited; written at once, each cost a transaction
    /// (about 79,000 instructions of the broker's 310,000 per call, bench/callgrind.sh).
    fn ordered(&self, msg: &Msg) -> bool {
        matches!(msg, Msg::Audit(_))
    }

    fn batch(
        &mut self,
        conn: &mut Connection,
        batch: Vec<Msg>,
    ) -> (bool, ControlFlow<sqlite::writer::Done>) {
        let (wrote, stop) = self.take(&mut db::Sqlite(conn), batch);
        let flow = match stop {
            Some(ack) => ControlFlow::Break(Box::new(move || {
                let _ = ack.send(());
            }) as sqlite::writer::Done),
            None => ControlFlow::Continue(()),
        };
        (wrote, flow)
    }

    fn upkeep(&mut self, conn: &mut Connection) -> bool {
        self.upkeep(&mut db::Sqlite(conn))
    }
}

impl Writer {
    fn new(
        keep: &HistoryConfig,
        dropped: Arc<AtomicU64>,
        barrier: Arc<std::sync::OnceLock<Barrier>>,
    ) -> Writer {
        Writer {
            barrier,
            keep: keep.clone(),
            claims: HashMap::new(),
            rows: 0,
            calls: Vec::new(),
            audits: Vec::new(),
            away: None,
            dropped,
        }
    }

    /// Writes the batch's records in one transaction (after any an outage held), answers its
    /// reads, and prunes when `max_rows` is passed; returns whether anything was written, and
    /// the stop request if there was one.
    pub(crate) fn take<L: Log>(
        &mut self,
        log: &mut L,
        batch: Vec<Msg>,
    ) -> (bool, Option<std::sync::mpsc::Sender<()>>) {
        let mut reads = Vec::new();
        let mut stop = None;
        let endings = batch.iter().filter(|m| matches!(m, Msg::Ended(_))).count();
        let kept = endings == 0 || self.barrier.get().is_none_or(|barrier| barrier());
        if !kept {
            // A deposed leader's endings were never committed: the new leader decides them.
            warn!(
                endings,
                "endings this instance could not commit are not recorded"
            );
        }
        for msg in batch {
            match msg {
                Msg::Claimed(id, claim) => {
                    self.claims.insert(id, claim);
                }
                Msg::Ended(_) if !kept => {}
                Msg::Ended(e) => {
                    let row = row_of(&mut self.claims, self.keep.store_content, *e);
                    self.calls.push(row);
                }
                Msg::Audit(row) => self.audits.push(row),
                Msg::Stop(ack) => stop = Some(ack),
                read => reads.push(read),
            }
        }
        let wrote = self.flush(log);
        for read in reads {
            self.answer(log, read);
        }
        let pruned = self.over_max() && self.prune(log);
        (wrote || pruned, stop)
    }

    /// Whether rows wait for the database to come back.
    pub(crate) fn holding(&self) -> bool {
        self.away.is_some() && !(self.calls.is_empty() && self.audits.is_empty())
    }

    /// Writes the rows not yet written; true when a row was. An outage keeps them (at most
    /// [`QUEUE`]) for the next try; a row whose data the database refuses is found by writing
    /// them one by one, and only it is dropped; any other failure drops them, logged.
    pub(crate) fn flush<L: Log>(&mut self, log: &mut L) -> bool {
        if self.calls.is_empty() && self.audits.is_empty() {
            return false;
        }
        match log.write(&self.calls, &self.audits) {
            Ok(new) => {
                let m = crate::metrics::global();
                let mut wrote = self.audits.len();
                for (row, _) in self.calls.iter().zip(new).filter(|(_, new)| *new) {
                    wrote += 1;
                    m.call_ended(&row.tool, row.outcome, row.duration_ms);
                }
                self.rows += (wrote - self.audits.len()) as u64;
                if let Some(since) = self.away.take() {
                    info!(
                        away_s = since.elapsed().as_secs(),
                        "history: the database answers again; the rows held meanwhile are written"
                    );
                }
                self.calls.clear();
                self.audits.clear();
                wrote > 0
            }
            Err(e) if e.is_outage() => {
                if self.away.is_none() {
                    self.away = Some(Instant::now());
                    warn!(
                        error = %leo_protocol::chain::error_chain(&e),
                        "history: the database is unreachable; its rows are held (at most \
                         {QUEUE}) and written when it is back"
                    );
                }
                self.hold_at_most(QUEUE);
                false
            }
            Err(e) if e.is_data() && self.calls.len() + self.audits.len() > 1 => {
                self.one_by_one(log)
            }
            Err(e) => {
                warn!(
                    error = %leo_protocol::chain::error_chain(&e),
                    calls = self.calls.len(),
                    audits = self.audits.len(),
                    "history: cannot write; these rows are lost"
                );
                self.calls.clear();
                self.audits.clear();
                false
            }
        }
    }

    /// Writes the rows one at a time, so a row the database cannot hold loses only itself;
    /// true when a row was written.
    fn one_by_one<L: Log>(&mut self, log: &mut L) -> bool {
        let (calls, audits) = (
            std::mem::take(&mut self.calls),
            std::mem::take(&mut self.audits),
        );
        // The database answered: it is not away.
        self.away = None;
        let mut wrote = false;
        for call in calls {
            self.calls.push(call);
            // Once the database is found away, the rest is held for its return.
            if self.away.is_none() {
                wrote |= self.flush(log);
            }
        }
        for audit in audits {
            self.audits.push(audit);
            if self.away.is_none() {
                wrote |= self.flush(log);
            }
        }
        wrote
    }

    /// Drops the newest held rows past `max`, counted as dropped records.
    fn hold_at_most(&mut self, max: usize) {
        let over = (self.calls.len() + self.audits.len()).saturating_sub(max);
        if over > 0 {
            let audits = over.min(self.audits.len());
            self.audits.truncate(self.audits.len() - audits);
            self.calls.truncate(self.calls.len() - (over - audits));
            count_dropped(&self.dropped, over as u64);
        }
    }

    /// The periodic upkeep: rows held by an outage, then the pruning.
    pub(crate) fn upkeep<L: Log>(&mut self, log: &mut L) -> bool {
        let wrote = self.flush(log);
        self.prune(log) || wrote
    }

    /// Answers a read, at once while rows wait for the database (it was just found away).
    fn answer<L: Log>(&self, log: &mut L, read: Msg) {
        if self.holding() {
            match read {
                Msg::Calls(_, _, reply) => drop(reply.send(Err(Error::Away))),
                Msg::Audits(_, _, reply) => drop(reply.send(Err(Error::Away))),
                Msg::PerMinute(_, reply) => drop(reply.send(Err(Error::Away))),
                _ => {}
            }
            return;
        }
        match read {
            Msg::Calls(q, contents, reply) => {
                let limit = q.limit;
                let got = log.calls(&q, contents).map(|calls| EndedList {
                    next_before: next(calls.len(), limit, calls.last().map(|c| c.seq)),
                    calls,
                });
                let _ = reply.send(got);
            }
            Msg::Audits(limit, before, reply) => {
                let got = log.audits(limit, before).map(|entries| AuditList {
                    next_before: next(entries.len(), limit, entries.last().map(|e| e.seq)),
                    entries,
                });
                let _ = reply.send(got);
            }
            Msg::PerMinute(since_ms, reply) => {
                let _ = reply.send(log.per_minute(since_ms));
            }
            _ => {}
        }
    }

    fn over_max(&self) -> bool {
        self.keep.max_rows.is_some_and(|max| self.rows > max)
    }

    /// Deletes what `history.keep_days` and `history.max_rows` no longer keep; returns
    /// whether a row was deleted.
    fn prune<L: Log>(&mut self, log: &mut L) -> bool {
        let cutoff = millis(SystemTime::now()) - i64::from(self.keep.keep_days) * 86_400_000;
        let mut pruned = false;
        for table in [Table::Calls, Table::Audit] {
            match log.prune(table, cutoff, self.keep.max_rows) {
                Ok(0) => {}
                Ok(n) => {
                    pruned = true;
                    debug!(rows = n, ?table, "history pruned");
                }
                Err(e) => warn!(error = %e, ?table, "history: cannot prune"),
            }
        }
        if let Ok(n) = log.count(Table::Calls) {
            self.rows = n;
        }
        // Claims of calls that never end here (lost records) must not grow without bound.
        if self.claims.len() > QUEUE {
            self.claims.clear();
        }
        pruned
    }
}

/// The row of an ended call, with its claim if one was seen.
fn row_of(claims: &mut HashMap<String, Claim>, store_content: bool, e: Ended) -> CallRow {
    let claim = claims.remove(&e.id);
    let (client_id, app_name) = match (&e.by, &claim) {
        (Some((c, n)), _) => (Some(c.clone()), n.clone()),
        (None, Some(c)) => (Some(c.client_id.clone()), c.name.clone()),
        (None, None) => (None, None),
    };
    // A result posted with `claim: true` is claimed and settled in one step.
    let (claimed_at, claimed_mono) = match (&claim, &e.by) {
        (Some(c), _) => (Some(c.at), Some(c.mono)),
        (None, Some(_)) => (Some(e.at), Some(e.mono)),
        (None, None) => (None, None),
    };
    let parked = e.call.parked_at;
    let since = |later: Instant, earlier: Instant| ms(later.saturating_duration_since(earlier));
    let request = e.call.request;
    CallRow {
        outcome: e.outcome,
        arguments_bytes: request.arguments.get().len() as u64,
        // The text the broker checked and forwarded, moved, not written again.
        arguments: store_content.then(|| Box::<str>::from(request.arguments).into()),
        result: e.result.map(|v| v.to_string()),
        result_bytes: e.result_bytes,
        wait_ms: claimed_mono.map(|c| since(c, parked)),
        work_ms: claimed_mono.map(|c| since(e.mono, c)),
        duration_ms: since(e.mono, parked),
        claimed_at: claimed_at.map(leo_protocol::time::rfc3339),
        ended_at: leo_protocol::time::rfc3339(e.at),
        ended_ms: millis(e.at),
        client_id,
        app_name,
        error_code: e.error_code,
        reason: e.reason.map(|r| r.as_str().to_owned()),
        id: e.id,
        tool: request.tool,
        group: request.group,
        agent: request.agent,
        session: request.session,
        created_at: request.created_at,
    }
}

/// The cursor of the next page: the last row's `seq` when the page was full.
fn next(got: usize, limit: u32, last: Option<u64>) -> Option<u64> {
    (got as u64 >= u64::from(limit)).then_some(last).flatten()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use leo_protocol::history::{AuditEntry, EndedRequest};

    use super::*;

    /// A database that is away until `away` reaches zero, and remembers what it was given.
    #[derive(Default)]
    struct Flaky {
        away: usize,
        calls: Vec<String>,
        audits: Vec<String>,
    }

    impl Log for Flaky {
        fn write(&mut self, calls: &[CallRow], audits: &[AuditRow]) -> Result<Vec<bool>, Error> {
            if self.away > 0 {
                self.away -= 1;
                return Err(Error::Away);
            }
            self.calls.extend(calls.iter().map(|c| c.id.clone()));
            self.audits.extend(audits.iter().map(|a| a.action.clone()));
            Ok(vec![true; calls.len()])
        }
        fn calls(&mut self, _: &CallQuery, _: bool) -> Result<Vec<EndedRequest>, Error> {
            Ok(Vec::new())
        }
        fn audits(&mut self, _: u32, _: Option<u64>) -> Result<Vec<AuditEntry>, Error> {
            Ok(Vec::new())
        }
        fn audit_chain(&mut self, _: u64, _: u32) -> Result<Vec<chain::Chained>, Error> {
            Ok(Vec::new())
        }
        fn prune(&mut self, _: Table, _: i64, _: Option<u64>) -> Result<usize, Error> {
            Ok(0)
        }
        fn count(&mut self, _: Table) -> Result<u64, Error> {
            Ok(self.calls.len() as u64)
        }
        fn per_minute(&mut self, _: i64) -> Result<Vec<MinuteCount>, Error> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn the_chart_has_an_hour_of_minutes_with_each_count_in_its_minute() {
        let first = 29_000_000; // 2025-02-19T21:20:00Z, in minutes since the epoch
        let counts = [
            (first, CallOutcome::Result, 2),
            (first + 59, CallOutcome::Error, 1),
            (first + 59, CallOutcome::Result, 3),
            (first - 1, CallOutcome::Result, 7),
            (first + 60, CallOutcome::Timeout, 7),
        ];
        let chart = minutes(first, &counts);
        assert_eq!(chart.len(), CHART_MINUTES);
        assert_eq!(chart[0].at, "2025-02-19T21:20:00.000Z");
        assert_eq!(chart[0].result, 2);
        assert_eq!((chart[59].result, chart[59].error), (3, 1));
        let total: u64 = chart
            .iter()
            .map(|m| m.result + m.error + m.timeout + m.cancelled + m.no_client)
            .sum();
        assert_eq!(total, 6, "the minutes outside the hour are not counted");
    }

    fn audit(action: &str) -> Msg {
        Msg::Audit(AuditRow {
            action: action.into(),
            ..AuditRow::default()
        })
    }

    /// The actions of the trail's last 10 entries, oldest first.
    async fn actions(history: &History) -> Vec<String> {
        let trail = history.audits(10, None).await.unwrap();
        trail.entries.into_iter().rev().map(|e| e.action).collect()
    }

    /// A CLI entry written while the broker's entry lingers waits for it, so the trail lists
    /// them in the order they were made.
    #[tokio::test]
    async fn an_entry_written_by_another_process_while_one_lingers_is_listed_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let history = History::open(&path, &HistoryConfig::default()).unwrap();
        history.audit(("operator".into(), "operator"), "claim", Some("r_1"), None);
        // Another process: its own connection to the file, as `record_local` opens it.
        let cli = std::thread::spawn({
            let path = path.clone();
            move || {
                // Within the linger, not at its edges: after the broker took the lock, before
                // it commits.
                std::thread::sleep(LINGER / 2);
                let conn = db::open(&path).unwrap();
                let row = AuditRow {
                    action: "client_add".into(),
                    ..AuditRow::default()
                };
                db::append_audit(&conn, &row).unwrap();
            }
        });
        tokio::task::spawn_blocking(move || cli.join().unwrap())
            .await
            .unwrap();
        let actions = actions(&history).await;
        assert_eq!(actions, ["claim", "client_add"]);
        history.close();
    }

    /// A row PostgreSQL cannot hold (a U+0000, which the edges refuse) loses only itself,
    /// not the rows written with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_loses_only_the_row_it_cannot_hold() {
        let Some(db) = leo_testkit::postgres::database().await else {
            return;
        };
        // The store's opening takes the lease the history's rows are fenced by.
        let database = Database::open(&db.url).unwrap();
        let settings = crate::store::postgres::Settings {
            me: crate::store::postgres::lease::Me {
                id: "i_test".into(),
                url: String::new(),
            },
            key: "k".repeat(64),
            remember: 4,
            heartbeat: std::time::Duration::from_secs(5),
            lease: std::time::Duration::from_secs(15),
        };
        let (store, _) = crate::store::Store::open_postgres(&database, settings).unwrap();
        let history =
            History::open_postgres(&database, "i_test".into(), &HistoryConfig::default()).unwrap();
        let who = || ("operator".to_owned(), "operator");
        history.audit(who(), "before", None, None);
        history.audit(who(), "bad", Some("nul\0target"), None);
        history.audit(who(), "after", None, None);
        let actions = actions(&history).await;
        assert_eq!(actions, ["before", "after"]);
        history.close();
        store.close().await;
    }

    #[test]
    fn an_outage_holds_rows_in_order_up_to_the_cap_and_answers_reads_away() {
        let dropped = Arc::new(AtomicU64::new(0));
        let mut writer = Writer::new(
            &HistoryConfig::default(),
            dropped.clone(),
            Default::default(),
        );
        let mut log = Flaky {
            away: 2,
            ..Flaky::default()
        };
        let (tx, mut rx) = oneshot::channel();
        writer.take(&mut log, vec![audit("a"), Msg::Audits(10, None, tx)]);
        assert!(writer.holding());
        assert!(rx.try_recv().unwrap().unwrap_err().is_outage());
        writer.take(&mut log, vec![audit("b"), audit("c")]);
        writer.hold_at_most(2);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            1,
            "the newest past the cap"
        );
        assert!(writer.flush(&mut log));
        assert!(!writer.holding());
        assert_eq!(log.audits, ["a", "b"]);
        writer.take(&mut log, vec![audit("d")]);
        assert_eq!(log.audits, ["a", "b", "d"]);
    }
}
