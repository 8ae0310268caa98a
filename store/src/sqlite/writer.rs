//! The writer thread of `state/history.db` (the history's, whose rules are the broker's
//! `history::Writer`; the live store's one writer is `crate::writer`, over this module's
//! [`Checkpointer`]): it owns the connection, blocks for the first job,
//! takes whatever else has queued by then (up to a batch), hands the batch to its `Batches`
//! (which writes it in one transaction and answers its waiters), and keeps the file: on a
//! period it runs the upkeep (`Batches::upkeep`) and checkpoints the WAL when anything was
//! written since the last checkpoint, and it checkpoints once more when it stops, so a clean
//! stop leaves an empty WAL.
//!
//! Between those, the WAL's pages are moved into the database file by a thread of its own
//! ([`Checkpointer`], on a second connection), not by SQLite's automatic checkpoint, which
//! runs inside the commit that crosses 1,000 WAL pages: that commit, which a call's answer
//! waits for, then also copies 4 MB into the file. Measured (bench/results.md, 23:56 UTC):
//! with the automatic checkpoint the relay's p99 was 9.7–12.7 ms at 64 KiB and 13–16 ms for a
//! 256 KiB image, without it 0.9–1.3 ms and 3.7–3.9 ms; the p50 did not move.

use std::ops::ControlFlow;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use tracing::warn;

use super::{Error, Result, checkpoint};

/// What one database does with its batches.
pub trait Batches: Send + 'static {
    type Job: Send + 'static;

    /// Writes `jobs` (in order) and answers their waiters; returns whether anything may have
    /// been written, and `Break(done)` to stop: `done` runs once the final checkpoint is made
    /// and the connection closed.
    fn batch(&mut self, conn: &mut Connection, jobs: Vec<Self::Job>) -> (bool, ControlFlow<Done>);

    /// Whether `job` has someone waiting for its commit. A batch of jobs that have none may
    /// wait up to `Settings::linger` for one that has, and share its commit.
    fn urgent(&self, _job: &Self::Job) -> bool {
        true
    }

    /// Whether `job`'s rows must come before anything another process writes into the file
    /// after `job` was queued (the audit trail, whose order is the order of writing, and which
    /// `leo` writes into as well). While such a job lingers, the writer holds the file's write
    /// lock (`BEGIN IMMEDIATE`), so the other process's write waits for this batch's commit;
    /// `batch` then finds the transaction open (`Connection::is_autocommit` false) and writes
    /// and commits in it.
    fn ordered(&self, _job: &Self::Job) -> bool {
        false
    }

    /// Periodic upkeep before the checkpoint (the history prunes here); returns whether
    /// anything was written.
    fn upkeep(&mut self, _conn: &mut Connection) -> bool {
        false
    }
}

/// Run once the thread has stopped (answers whoever asked it to stop).
pub type Done = Box<dyn FnOnce() + Send>;

/// The thread's settings.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub name: &'static str,
    /// Most jobs in one batch.
    pub batch: usize,
    /// How often the upkeep and the checkpoint run (also under a steady stream of jobs).
    pub every: Duration,
    /// How long a batch nobody waits for may wait for a job somebody does (`Batches::urgent`)
    /// before it is committed alone; zero commits every batch at once.
    pub linger: Duration,
    /// How long the checkpoint thread lets commits gather before it checkpoints them
    /// ([`CHECKPOINT_GAP`]).
    pub checkpoint_gap: Duration,
}

/// Starts the writer thread on `conn`; it runs until a batch breaks or every sender is gone.
pub fn spawn<B: Batches>(
    settings: Settings,
    conn: Connection,
    rx: Receiver<B::Job>,
    batches: B,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(settings.name.into())
        .spawn(move || run(settings, conn, &rx, batches))
        .map_err(Error::Thread)
}

fn run<B: Batches>(settings: Settings, mut conn: Connection, rx: &Receiver<B::Job>, mut b: B) {
    let checkpointer = Checkpointer::start(&conn, settings.name, settings.checkpoint_gap);
    let mut last = Instant::now();
    let mut dirty = b.upkeep(&mut conn);
    let done = loop {
        let wait = settings.every.saturating_sub(last.elapsed());
        let first = match rx.recv_timeout(wait) {
            Ok(job) => Some(job),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break None,
        };
        let mut flow = ControlFlow::Continue(());
        if let Some(first) = first {
            let jobs = take_batch(&settings, rx, &b, &conn, first);
            let wrote;
            (wrote, flow) = b.batch(&mut conn, jobs);
            dirty |= wrote;
            release_lock(&conn);
            if wrote && let Some(c) = &checkpointer {
                c.wrote();
            }
        }
        if let ControlFlow::Break(done) = flow {
            break Some(done);
        }
        if last.elapsed() >= settings.every {
            dirty |= b.upkeep(&mut conn);
            if std::mem::take(&mut dirty) {
                checkpoint(&conn);
            }
            last = Instant::now();
        }
    };
    if let Some(c) = checkpointer {
        c.stop();
    }
    checkpoint(&conn);
    // Closing the last connection also removes the (now empty) WAL file.
    drop(conn);
    if let Some(done) = done {
        done();
    }
}

/// The batch that starts with `first`: whatever else has queued, and, while none of it has a
/// waiter, what queues within `settings.linger`, up to the first job that has one (taken with
/// whatever queued behind it). The note that an earlier outcome was delivered is waited for by
/// nobody: lingering, it shares the commit of the next park or result instead of costing a
/// transaction of its own. A job that must keep its place against other processes' writes
/// (`Batches::ordered`) lingers holding the write lock.
fn take_batch<B: Batches>(
    settings: &Settings,
    rx: &Receiver<B::Job>,
    b: &B,
    conn: &Connection,
    first: B::Job,
) -> Vec<B::Job> {
    let mut urgent = b.urgent(&first);
    let mut ordered = b.ordered(&first);
    let mut locked = false;
    let mut jobs = vec![first];
    let until = Instant::now() + settings.linger;
    loop {
        if ordered && !urgent && !locked {
            locked = true;
            lock_for_order(conn);
        }
        if jobs.len() >= settings.batch {
            break;
        }
        let next = if urgent {
            rx.try_recv().ok()
        } else {
            rx.recv_timeout(until.saturating_duration_since(Instant::now()))
                .ok()
        };
        let Some(job) = next else { break };
        urgent |= b.urgent(&job);
        ordered |= b.ordered(&job);
        jobs.push(job);
    }
    jobs
}

/// Ends a transaction a batch left open (its write lock taken for order, nothing written).
fn release_lock(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(e) = super::commit(conn)
    {
        warn!(error = %e, "cannot end a lingering batch's transaction");
    }
}

/// Takes the file's write lock for a lingering batch (`Batches::ordered`); on failure (another
/// process held it past the busy timeout) the batch lingers without it and is logged.
fn lock_for_order(conn: &Connection) {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        warn!(error = %e, "cannot take the write lock for a lingering batch");
    }
}

/// How long the checkpointer lets commits gather before it checkpoints them all.
pub const CHECKPOINT_GAP: Duration = Duration::from_millis(100);

/// The thread that moves the WAL's pages into the database file, on a connection of its own,
/// once commits came (at most one checkpoint per `Settings::checkpoint_gap`). Its checkpoints are
/// `PASSIVE`: they never wait for the writer, nor make it wait, so the WAL stays small without
/// a commit paying for it; the writer's connection has the automatic checkpoint off.
pub(crate) struct Checkpointer {
    tx: SyncSender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Starts one for the file `conn` writes, its thread named after the writer's `name`,
    /// letting commits gather for `gap`; `None` (and the automatic checkpoint left on) when a
    /// second connection cannot be had.
    pub(crate) fn start(conn: &Connection, name: &str, gap: Duration) -> Option<Checkpointer> {
        let path = conn.path().filter(|p| !p.is_empty())?.to_owned();
        let opened = Connection::open(&path).and_then(|c| {
            c.busy_timeout(Duration::from_secs(5))?;
            Ok(c)
        });
        let own = match opened {
            Ok(own) => own,
            Err(e) => {
                warn!(error = %e, "cannot open a connection to checkpoint on; commits checkpoint");
                return None;
            }
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("{name}-checkpoint"))
            .spawn(move || {
                while rx.recv().is_ok() {
                    // Commits gather for `gap`; the writer's stop cuts it short.
                    let until = Instant::now() + gap;
                    while let Ok(()) | Err(RecvTimeoutError::Timeout) =
                        rx.recv_timeout(until.saturating_duration_since(Instant::now()))
                    {
                        if Instant::now() >= until {
                            break;
                        }
                    }
                    passive(&own);
                }
            });
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                warn!(error = %e, "cannot start the checkpoint thread; commits checkpoint");
                return None;
            }
        };
        if let Err(e) = conn.pragma_update(None, "wal_autocheckpoint", 0) {
            warn!(error = %e, "cannot turn the automatic checkpoint off");
        }
        Some(Checkpointer { tx, thread })
    }

    /// A commit wrote to the WAL (never waits).
    pub(crate) fn wrote(&self) {
        if let Err(TrySendError::Disconnected(())) = self.tx.try_send(()) {
            warn!("the checkpoint thread stopped");
        }
    }

    /// Ends the thread once its last checkpoint is made.
    pub(crate) fn stop(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: copies what no reader still needs, waiting for nobody.
fn passive(conn: &Connection) {
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        warn!(error = %e, "cannot checkpoint");
    }
}
