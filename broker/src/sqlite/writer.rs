//! The writer thread both databases run: it owns the connection, blocks for the first job,
//! takes whatever else has queued by then (up to a batch), hands the batch to its `Batches`
//! (which writes it in one transaction and answers its waiters), and keeps the file: on a
//! period it runs the upkeep (`Batches::upkeep`) and checkpoints the WAL when anything was
//! written since the last checkpoint, and it checkpoints once more when it stops, so a clean
//! stop leaves an empty WAL.

use std::ops::ControlFlow;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::{Error, Result, checkpoint};

/// What one database does with its batches.
pub(crate) trait Batches: Send + 'static {
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
}

/// Starts the writer thread on `conn`; it runs until a batch breaks or every sender is gone.
pub(crate) fn spawn<B: Batches>(
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
            let jobs = take_batch(&settings, rx, &b, first);
            let wrote;
            (wrote, flow) = b.batch(&mut conn, jobs);
            dirty |= wrote;
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
/// transaction of its own.
fn take_batch<B: Batches>(
    settings: &Settings,
    rx: &Receiver<B::Job>,
    b: &B,
    first: B::Job,
) -> Vec<B::Job> {
    let mut urgent = b.urgent(&first);
    let mut jobs = vec![first];
    let until = Instant::now() + settings.linger;
    while jobs.len() < settings.batch {
        let next = if urgent {
            rx.try_recv().ok()
        } else {
            rx.recv_timeout(until.saturating_duration_since(Instant::now()))
                .ok()
        };
        let Some(job) = next else { break };
        urgent |= b.urgent(&job);
        jobs.push(job);
    }
    jobs
}
