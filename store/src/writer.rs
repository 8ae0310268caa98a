//! The live store's one writer, for both databases: it owns the policy, and a [`Backend`]
//! (SQLite's `write::Sqlite`, PostgreSQL's `postgres::Pg`) only writes what it is given and
//! says how that went. The rules, written here once:
//!
//! - **Batches.** The writer takes whatever has queued (up to [`BATCH`] jobs) and writes the
//!   changes in one transaction, then answers the `Sync` jobs of that batch. Under load a
//!   commit covers many calls; alone, a call waits for one commit.
//! - **Linger.** Changes nobody waits for (the note that an outcome was delivered) wait up to
//!   [`LINGER`] for a batch somebody waits for, and share its commit; a park never waits
//!   ([`urgent`]).
//! - **The commit gate.** A commit that fails is rolled back whole, so every change queued with
//!   it is lost. Its waiters get the error, and so does every later waiter: a claim queued
//!   after a lost park must not be acknowledged as if the call were on disk. From the first
//!   failure on nothing more is written (the database keeps the state of the last good commit,
//!   which a restart reads) and every operation that accepts work is refused until the broker
//!   is restarted ([`Gate`]).
//! - **The backend's answers.** A backend says why a commit failed ([`Refused`]), and the
//!   writer decides: out of reach (PostgreSQL down or cut off) holds the changes, in order,
//!   answers the waiters `Unavailable`, marks the store unavailable and tries again every
//!   [`RETRY`] (the gate stays open); fenced (another instance leads) shuts the gate as
//!   deposed and cancels the store's deposition; one change's data refused drops that change,
//!   writes the rest and answers the batch's waiters an error; anything else shuts the gate.
//!   SQLite only ever answers the last.
//! - **Close.** A `Close` job writes what is queued, lets the backend close (a clean close
//!   with everything written gives PostgreSQL's lease up; SQLite checkpoints and closes the
//!   file), and only then answers.
//!
//! The loop is async: PostgreSQL's runs on the database's runtime, SQLite's on a
//! current-thread runtime of its own thread (its statements block that thread, never the
//! broker's). Its timing is tokio's clock, so its tests run under paused time.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::{DbError, Error, Job, Op};

/// Most jobs in one transaction.
pub const BATCH: usize = 4096;

/// How long changes nobody waits for (the note that an outcome was delivered) may wait for a
/// commit somebody waits for (a park, a claim, a result, a result frame), so that they share
/// it; then they are committed alone. A delivered outcome that is not forgotten is only sent
/// again to a sidecar that resumes its call, so it needs no commit of its own. A park is not
/// such a change: the call is published to the apps at once, and one killed before its park
/// is committed would be lost to a harness that keeps waiting for it across the restart (a
/// `leo-mcp` re-attaches its calls), so a park is committed at once (see [`urgent`]).
pub const LINGER: Duration = Duration::from_millis(20);

/// How often a writer whose database is out of reach tries again (PostgreSQL only).
pub const RETRY: Duration = Duration::from_millis(500);

/// Whether a batch holding `ops` must be committed without lingering: it parks a call.
pub fn urgent(ops: &[Op]) -> bool {
    ops.iter().any(|op| matches!(op, Op::Park(_)))
}

/// Why a backend's commit failed, as the backend judges it: the writer decides what follows
/// (see the module's doc). Nothing of a refused commit is kept.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The database cannot be reached for now.
    Away(DbError),
    /// Another instance leads the database: nothing this one writes is committed again.
    Fenced(DbError),
    /// The database cannot hold the data of change `op` (an index into the ops committed).
    Data { op: usize, error: DbError },
    /// Any other refusal.
    Failed(DbError),
}

/// One database under the writer: only its statements and its upkeep.
pub(crate) trait Backend: Send + 'static {
    /// Writes `ops`, in order, in one transaction and commits it; how many changes it wrote.
    fn commit(&mut self, ops: &[Op]) -> impl Future<Output = Result<usize, Refused>> + Send;

    /// How often [`Backend::tick`] runs.
    fn every(&self) -> Duration;

    /// Upkeep between batches, every [`Backend::every`] (and every [`RETRY`] while the
    /// database is away): SQLite checkpoints, PostgreSQL reads the instances sharing the
    /// database. An error is an outage the upkeep found.
    fn tick(&mut self) -> impl Future<Output = Result<(), DbError>> + Send;

    /// The writer stops; `clean` when a close was asked and everything was written.
    fn close(self, clean: bool) -> impl Future<Output = ()> + Send;
}

/// Who waits for a commit, and is answered how it went.
pub(crate) type Waiter = oneshot::Sender<Result<(), Error>>;

/// A batch of jobs taken apart: its changes in the order they were made, who waits for their
/// commit, and the close, if it was asked for.
pub(crate) struct Batch {
    pub ops: Vec<Op>,
    pub waiters: Vec<Waiter>,
    pub close: Option<Waiter>,
}

impl Batch {
    pub(crate) fn of(jobs: Vec<Job>) -> Batch {
        let mut batch = Batch {
            ops: Vec::new(),
            waiters: Vec::new(),
            close: None,
        };
        for job in jobs {
            match job {
                Job::Ops(ops) => batch.ops.extend(ops),
                Job::Sync(done) => batch.waiters.push(done),
                Job::Close(done) => batch.close = Some(done),
            }
        }
        batch
    }

    /// Whether it must be committed now rather than linger: somebody waits, the store closes,
    /// or it parks a call.
    pub(crate) fn urgent(&self) -> bool {
        !self.waiters.is_empty() || self.close.is_some() || urgent(&self.ops)
    }

    /// Answers the waiters with `result`; the close's waiter is left to answer once closed.
    pub(crate) fn answer(&mut self, result: &Result<(), Error>) {
        for done in self.waiters.drain(..) {
            let _ = done.send(result.clone());
        }
    }
}

/// The commit gate: after the first failed commit nothing more is written or acknowledged,
/// since what it held is lost and a later change may depend on it (a claim queued after a lost
/// park). An outage does not shut it; a refusal or the fence does.
#[derive(Default)]
pub(crate) struct Gate {
    failed: Option<DbError>,
}

impl Gate {
    /// `Ok` while no commit failed; else the error every later waiter gets.
    pub(crate) fn open(&self) -> Result<(), Error> {
        match &self.failed {
            Some(first) => Err(Error::AfterFailure(first.clone())),
            None => Ok(()),
        }
    }

    pub(crate) fn is_shut(&self) -> bool {
        self.failed.is_some()
    }

    /// A commit failed (`why` says how, for the log): the gate shuts for good; the error for
    /// the batch's waiters.
    fn shut(&mut self, e: DbError, why: &str) -> Error {
        error!(error = %leo_protocol::chain::error_chain(&e), "{why}");
        self.failed = Some(e.clone());
        Error::Database(e)
    }
}

/// The gate's reason when the database refused a commit.
const CANNOT_RECORD: &str = "cannot record the broker's state; no further change is \
     acknowledged until the broker is restarted";

/// The gate's reason when the fence refused a commit.
const DEPOSED: &str = "another instance leads the database now; this instance commits and \
     acknowledges nothing more";

/// What the writer shares with the `Store` handle.
#[derive(Clone)]
pub(crate) struct Shared {
    /// False while the database cannot be reached.
    pub available: Arc<AtomicBool>,
    /// Cancelled when the fence finds another instance leads.
    pub deposed: tokio_util::sync::CancellationToken,
}

/// The writer: the policy's state between batches, over one backend.
pub(crate) struct Writer<B> {
    backend: B,
    /// Changes not yet committed, in the order they were made (kept across an outage).
    pending: Vec<Op>,
    gate: Gate,
    shared: Shared,
    /// When the oldest change in `pending` that nobody waits for was queued: it is written
    /// with the next batch somebody waits for, or alone `LINGER` after this.
    lingering: Option<Instant>,
}

impl<B: Backend> Writer<B> {
    pub(crate) fn new(backend: B, shared: Shared) -> Writer<B> {
        Writer {
            backend,
            pending: Vec::new(),
            gate: Gate::default(),
            shared,
            lingering: None,
        }
    }

    /// Runs until a `Close` job is answered or every sender is gone.
    pub(crate) async fn run(mut self, mut rx: UnboundedReceiver<Job>) {
        let mut ticked = Instant::now();
        let close = loop {
            let timed_out = match tokio::time::timeout(self.wait(ticked), rx.recv()).await {
                Ok(Some(first)) => {
                    if let Some(close) = self.batch(take(&mut rx, first)).await {
                        break Some(close);
                    }
                    false
                }
                Ok(None) => break None,
                Err(_) => {
                    self.idle().await;
                    true
                }
            };
            let away = timed_out && !self.available();
            if away || ticked.elapsed() >= self.backend.every() {
                self.tick().await;
                ticked = Instant::now();
            }
        };
        let clean = close.is_some() && !self.gate.is_shut() && self.pending.is_empty();
        self.backend.close(clean).await;
        if let Some((done, result)) = close {
            let _ = done.send(result);
        }
    }

    fn available(&self) -> bool {
        self.shared.available.load(Ordering::Relaxed)
    }

    /// How long to wait for a job: until the next tick (the next retry while the database is
    /// away), or until what lingers must be written.
    fn wait(&self, ticked: Instant) -> Duration {
        let mut wait = if self.available() {
            self.backend.every().saturating_sub(ticked.elapsed())
        } else {
            RETRY
        };
        if let Some(since) = self.lingering {
            wait = wait.min(LINGER.saturating_sub(since.elapsed()));
        }
        wait
    }

    /// Queues the batch's changes after what is pending and, unless they may linger, writes
    /// them all and answers the waiters; the close's waiter and its answer, if it asked.
    async fn batch(&mut self, jobs: Vec<Job>) -> Option<(Waiter, Result<(), Error>)> {
        let mut batch = Batch::of(jobs);
        let urgent = batch.urgent();
        self.pending.append(&mut batch.ops);
        if !urgent && self.pending.len() < BATCH {
            self.lingering.get_or_insert_with(Instant::now);
            return None;
        }
        let result = self.flush().await;
        batch.answer(&result);
        batch.close.map(|done| (done, result))
    }

    /// No job came for a while: write what lingered or was held by an outage, or probe the
    /// database while it is away.
    async fn idle(&mut self) {
        if !self.gate.is_shut() && (!self.pending.is_empty() || !self.available()) {
            let _ = self.flush().await;
        }
    }

    /// Commits what is pending; `Ok` when nothing is left pending.
    async fn flush(&mut self) -> Result<(), Error> {
        self.lingering = None;
        if let Err(shut) = self.gate.open() {
            self.pending.clear();
            return Err(shut);
        }
        if self.pending.is_empty() && self.available() {
            return Ok(());
        }
        match self.write_pending().await {
            Ok((written, dropped)) => {
                crate::committed();
                debug!(ops = written, "state committed");
                self.pending.clear();
                if !self.shared.available.swap(true, Ordering::Relaxed) {
                    info!("the database answers again; the broker accepts work again");
                }
                dropped.map_or(Ok(()), |e| Err(Error::Database(e)))
            }
            Err(refused) => Err(self.refused(refused)),
        }
    }

    /// Commits what is pending, after dropping each change whose data the database refuses;
    /// how many changes were written, and the last such refusal, if any, for the waiters.
    async fn write_pending(&mut self) -> Result<(usize, Option<DbError>), Refused> {
        let mut dropped = None;
        // Ends: every round commits, fails for good, or drops one pending change.
        loop {
            match self.backend.commit(&self.pending).await {
                Ok(written) => return Ok((written, dropped)),
                Err(Refused::Data { op, error }) if op < self.pending.len() => {
                    let op = self.pending.remove(op);
                    error!(
                        change = op.name(),
                        error = %leo_protocol::chain::error_chain(&error),
                        "the database cannot hold this change; it is dropped and the rest \
                         written (the waiters of its batch are refused)"
                    );
                    dropped = Some(error);
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// What a refused commit means for the writer, and the error for its waiters.
    fn refused(&mut self, refused: Refused) -> Error {
        let e = match refused {
            Refused::Away(e) => {
                if self.shared.available.swap(false, Ordering::Relaxed) {
                    error!(
                        error = %leo_protocol::chain::error_chain(&e),
                        "the database is unreachable; the broker refuses new work \
                         (store_unavailable) until it is back"
                    );
                }
                return Error::Unavailable(e);
            }
            Refused::Fenced(e) => {
                self.pending.clear();
                self.shared.deposed.cancel();
                return self.gate.shut(e, DEPOSED);
            }
            Refused::Data { error, .. } => error,
            Refused::Failed(e) => e,
        };
        self.pending.clear();
        self.gate.shut(e, CANNOT_RECORD)
    }

    /// The backend's upkeep; an outage it finds makes the store unavailable.
    async fn tick(&mut self) {
        if let Err(e) = self.backend.tick().await
            && self.shared.available.swap(false, Ordering::Relaxed)
        {
            warn!(
                error = %leo_protocol::chain::error_chain(&e),
                "the database is unreachable; the broker refuses new work until it is back"
            );
        }
    }
}

/// The batch that starts with `first`: whatever else has queued by now, up to [`BATCH`] jobs.
fn take(rx: &mut UnboundedReceiver<Job>, first: Job) -> Vec<Job> {
    let mut jobs = vec![first];
    while jobs.len() < BATCH {
        match rx.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    jobs
}

#[cfg(test)]
mod tests;
