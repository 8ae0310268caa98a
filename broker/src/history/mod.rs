//! The history of ended calls and the audit trail, in `state/history.db`.
//!
//! History is an append-only log, kept apart from the live state: the operator may prune or
//! delete the file without touching live work, and its writes never slow or endanger the
//! queue. The core hands each record to this module with one call made under its lock; that
//! call only puts a message on a bounded channel (`try_send`, never waiting). One writer thread
//! owns the database, takes whatever has queued up and writes it in one transaction. When the
//! channel is full (the disk cannot keep up), records are dropped and counted, never the call.
//!
//! A call's row is written once its terminal outcome is decided (`settled` or `failed`) and
//! the live store has committed it: before a batch with an ending, the writer waits for the
//! store's commit of everything decided so far (`History::after_commits`), so a broker killed
//! in between leaves no row for an ending the restart does not know (which, in a cluster,
//! another leader would end again and record in its own history). The claim that came before
//! is remembered by the writer (`claimed`) to give the row its app and claim time. Reads go through the same thread, after the writes queued before them, so a
//! caller that saw its call end sees it in the history. The file and the thread are kept by
//! the shared SQLite layer (`crate::sqlite`): opening, migrating, the batching loop, the
//! checkpoints; this module says what a batch writes and when old rows are pruned.

pub mod db;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leo_protocol::content::{AppError, Posted, content_size};
use leo_protocol::events::CancelReason;
use leo_protocol::history::{AuditList, CallOutcome, EndedList};
use rusqlite::Connection;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::config::HistoryConfig;
use crate::requests::{Call, EndedCall};
use crate::sqlite;
use crate::tokens::Principal;
use db::{AuditRow, CallQuery, CallRow, Table};

/// Records that may wait for the writer; past this they are dropped and counted.
const QUEUE: usize = 65_536;
/// Records written in one transaction at most.
const BATCH: usize = 1024;
/// How often old rows are pruned (and the WAL checkpointed after).
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Why history could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Database(#[from] sqlite::Error),
    #[error("the history writer is busy; try again")]
    Busy,
    #[error("the history writer stopped")]
    Stopped,
}

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
    Stop(std::sync::mpsc::Sender<()>),
}

/// What the writer runs before a batch that ends calls: returns once the live store has
/// committed (or failed to commit) every change decided before it was called.
type Barrier = Box<dyn Fn() + Send + Sync>;

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

/// Writes one audit entry straight into `path`, for the commands that change `$LEO_HOME`
/// without the broker (`leo client`, `leo device`): principal `cli:USER`, token kind `local`.
/// SQLite's locking lets it write beside a running broker's writer.
pub fn record_local(
    path: &Path,
    action: &str,
    target: &str,
    detail: Option<String>,
) -> Result<(), Error> {
    let conn = db::open(path)?;
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
    db::insert_audit(&conn, &row).map_err(sqlite::Error::doing("write the audit entry"))?;
    Ok(())
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

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl History {
    /// Opens `path` (creating and migrating it) and starts the writer thread.
    pub fn open(path: &Path, config: &HistoryConfig) -> Result<History, Error> {
        let conn = db::open(path)?;
        let (tx, rx) = sync_channel(QUEUE);
        let barrier = Arc::new(std::sync::OnceLock::new());
        let writer = Writer {
            barrier: barrier.clone(),
            keep: config.clone(),
            claims: HashMap::new(),
            rows: 0,
        };
        let settings = sqlite::writer::Settings {
            name: "leo-history",
            batch: BATCH,
            every: PRUNE_EVERY,
        };
        let thread = sqlite::writer::spawn(settings, conn, rx, writer)?;
        Ok(History {
            tx,
            barrier,
            store_content: config.store_content,
            dropped: Arc::new(AtomicU64::new(0)),
            thread: Arc::new(std::sync::Mutex::new(Some(thread))),
        })
    }

    fn send(&self, msg: Msg) {
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    warn!("the history writer is behind; history records are being dropped");
                }
            }
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
    /// batch that ends calls; set once.
    pub fn after_commits(&self, barrier: impl Fn() + Send + Sync + 'static) {
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

/// The history's side of the writer thread.
struct Writer {
    barrier: Arc<std::sync::OnceLock<Barrier>>,
    keep: HistoryConfig,
    claims: HashMap<String, Claim>,
    /// Rows in `calls`, for `max_rows`.
    rows: u64,
}

impl sqlite::writer::Batches for Writer {
    type Job = Msg;

    fn batch(
        &mut self,
        conn: &mut Connection,
        batch: Vec<Msg>,
    ) -> (bool, ControlFlow<sqlite::writer::Done>) {
        let (wrote, stop) = self.write(conn, batch);
        if self.over_max() {
            self.prune(conn);
        }
        let flow = match stop {
            Some(ack) => ControlFlow::Break(Box::new(move || {
                let _ = ack.send(());
            }) as sqlite::writer::Done),
            None => ControlFlow::Continue(()),
        };
        (wrote, flow)
    }

    fn upkeep(&mut self, conn: &mut Connection) -> bool {
        self.prune(conn)
    }
}

impl Writer {
    /// Writes the batch's records in one transaction, then answers its reads; returns
    /// whether anything was written, and the stop request if there was one.
    fn write(
        &mut self,
        conn: &Connection,
        batch: Vec<Msg>,
    ) -> (bool, Option<std::sync::mpsc::Sender<()>>) {
        let mut reads = Vec::new();
        let mut stop = None;
        let mut wrote = 0usize;
        if batch.iter().any(|m| matches!(m, Msg::Ended(_)))
            && let Some(barrier) = self.barrier.get()
        {
            barrier();
        }
        let tx = match conn.unchecked_transaction() {
            Ok(tx) => tx,
            Err(e) => {
                warn!(error = %e, "history: cannot begin a transaction");
                return (false, None);
            }
        };
        for msg in batch {
            match msg {
                Msg::Claimed(id, claim) => {
                    self.claims.insert(id, claim);
                }
                Msg::Ended(e) => {
                    let row = row_of(&mut self.claims, self.keep.store_content, *e);
                    match db::insert_call(&tx, &row) {
                        Ok(n) => {
                            self.rows += n as u64;
                            wrote += n;
                            if n > 0 {
                                let m = crate::metrics::global();
                                m.call_ended(&row.tool, row.outcome, row.duration_ms);
                            }
                        }
                        Err(e) => warn!(error = %e, request = %row.id, "history: cannot write"),
                    }
                }
                Msg::Audit(row) => match db::insert_audit(&tx, &row) {
                    Ok(n) => wrote += n,
                    Err(e) => warn!(error = %e, "history: cannot write an audit entry"),
                },
                Msg::Stop(ack) => stop = Some(ack),
                read => reads.push(read),
            }
        }
        if let Err(e) = tx.commit() {
            warn!(error = %e, "history: cannot commit");
        }
        for read in reads {
            answer(conn, read);
        }
        (wrote > 0, stop)
    }
}

fn answer(conn: &Connection, read: Msg) {
    let read_error = sqlite::Error::doing("read the history");
    match read {
        Msg::Calls(q, contents, reply) => {
            let limit = q.limit;
            let got = db::list_calls(conn, &q, contents)
                .map(|calls| EndedList {
                    next_before: next(calls.len(), limit, calls.last().map(|c| c.seq)),
                    calls,
                })
                .map_err(|e| read_error(e).into());
            let _ = reply.send(got);
        }
        Msg::Audits(limit, before, reply) => {
            let got = db::list_audit(conn, limit, before)
                .map(|entries| AuditList {
                    next_before: next(entries.len(), limit, entries.last().map(|e| e.seq)),
                    entries,
                })
                .map_err(|e| read_error(e).into());
            let _ = reply.send(got);
        }
        _ => {}
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

impl Writer {
    fn over_max(&self) -> bool {
        self.keep.max_rows.is_some_and(|max| self.rows > max)
    }

    /// Deletes what `history.keep_days` and `history.max_rows` no longer keep; returns
    /// whether a row was deleted.
    fn prune(&mut self, conn: &Connection) -> bool {
        let cutoff = millis(SystemTime::now()) - i64::from(self.keep.keep_days) * 86_400_000;
        let mut pruned = false;
        for table in [Table::Calls, Table::Audit] {
            match db::prune(conn, table, cutoff, self.keep.max_rows) {
                Ok(0) => {}
                Ok(n) => {
                    pruned = true;
                    debug!(rows = n, ?table, "history pruned");
                }
                Err(e) => warn!(error = %e, ?table, "history: cannot prune"),
            }
        }
        self.rows = db::count(conn, Table::Calls).unwrap_or(0);
        // Claims of calls that never end here (lost records) must not grow without bound.
        if self.claims.len() > QUEUE {
            self.claims.clear();
        }
        pruned
    }
}

/// The cursor of the next page: the last row's `seq` when the page was full.
fn next(got: usize, limit: u32, last: Option<u64>) -> Option<u64> {
    (got as u64 >= u64::from(limit)).then_some(last).flatten()
}
