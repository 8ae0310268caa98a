//! The history's thread on a PostgreSQL store: the loop that runs the history's [`Writer`]
//! over [`Pg`] (the SQL, in `leo_store::history::postgres`), the same rules as for
//! `state/history.db`, with the retry of rows held by an outage.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use leo_store::history::postgres::Pg;
use tracing::warn;

use super::db::AuditRow;
use super::{Error, Msg, Writer};
use crate::store::postgres::PgError;

/// How often rows held by an outage are tried again.
const RETRY: Duration = Duration::from_secs(1);

/// What the writer thread is started with.
pub(crate) struct Settings {
    pub url: String,
    /// The instance whose rows these are (`i_…`).
    pub instance: String,
    /// Most records in one batch.
    pub batch: usize,
    /// How often the upkeep (the pruning) runs.
    pub every: Duration,
}

/// Starts the writer thread on the database at `settings.url`; it connects when it first
/// needs to.
pub(crate) fn spawn(
    settings: Settings,
    rx: Receiver<Msg>,
    writer: Writer,
) -> Result<std::thread::JoinHandle<()>, Error> {
    let pg = Pg::open(&settings.url, settings.instance.clone())?;
    std::thread::Builder::new()
        .name("leo-history-pg".into())
        .spawn(move || run(&settings, &rx, writer, pg))
        .map_err(|e| PgError::Thread(e).into())
}

/// The loop of `state/history.db`'s writer (`sqlite::writer`), without the file's checkpoints
/// and with the retry of held rows: a batch per wake-up, the upkeep on a period.
fn run(settings: &Settings, rx: &Receiver<Msg>, mut writer: Writer, mut pg: Pg) {
    let mut last = Instant::now();
    writer.upkeep(&mut pg);
    let stop = loop {
        let wait = if writer.holding() {
            RETRY
        } else {
            settings.every.saturating_sub(last.elapsed())
        };
        match rx.recv_timeout(wait) {
            Ok(first) => {
                let mut jobs = vec![first];
                while jobs.len() < settings.batch {
                    match rx.try_recv() {
                        Ok(job) => jobs.push(job),
                        Err(_) => break,
                    }
                }
                if let (_, Some(ack)) = writer.take(&mut pg, jobs) {
                    break Some(ack);
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                writer.flush(&mut pg);
            }
            Err(RecvTimeoutError::Disconnected) => break None,
        }
        if last.elapsed() >= settings.every {
            writer.upkeep(&mut pg);
            last = Instant::now();
        }
    };
    if writer.holding() {
        warn!("history: the database is still unreachable at stop; the rows held are lost");
    }
    pg.close();
    if let Some(ack) = stop {
        let _ = ack.send(());
    }
}

/// Writes one audit entry as `instance`'s (`leo client|device|agent` on a PostgreSQL store).
pub(crate) fn record(url: &str, instance: String, row: AuditRow) -> Result<(), PgError> {
    crate::cluster::tokens::on_database(url, move |mut client| async move {
        leo_store::history::postgres::write(&mut client, &instance, &[], &[row])
            .await
            .map(drop)
    })
}
