//! The history of ended calls and the audit trail, as stored: `state/history.db` ([`db`],
//! SQLite) or PostgreSQL's tables `history` and `audit` ([`postgres`]). These are only the
//! statements, behind [`Log`]; what is written and when (batches, outages, pruning, pages) is
//! the history's writer, in the broker, written once over both.

pub mod chain;
pub mod db;
pub mod postgres;

use leo_protocol::history::{AuditEntry, CallOutcome, EndedRequest};

use crate::DbError;
use db::{AuditRow, CallQuery, CallRow, Table};

/// Why history could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Database(DbError),
    #[error("the database is unreachable; try again once it is back")]
    Away,
    #[error("the history writer is busy; try again")]
    Busy,
    #[error("the history writer stopped")]
    Stopped,
}

impl Error {
    /// Whether the database is out of reach for now (PostgreSQL only): rows are held, reads
    /// answered `store_unavailable`.
    pub fn is_outage(&self) -> bool {
        matches!(self, Error::Away) || matches!(self, Error::Database(e) if e.is_outage())
    }

    /// Whether PostgreSQL refused a row's data (`PgError::is_data`): that row is at fault.
    pub fn is_data(&self) -> bool {
        matches!(self, Error::Database(e) if e.is_data())
    }
}

crate::error::from_database!(Error);

/// One database the history is kept in: only its statements. The SQLite file's are `db`,
/// PostgreSQL's `postgres`; what they are asked to do, and when, is the history's writer's.
pub trait Log {
    /// Writes `calls` and `audits` in one transaction; for each call, whether it was new (a
    /// second row of one call id is ignored: a call ends once).
    fn write(&mut self, calls: &[CallRow], audits: &[AuditRow]) -> Result<Vec<bool>, Error>;
    /// Ended calls, newest first (`q.limit` at most).
    fn calls(&mut self, q: &CallQuery, contents: bool) -> Result<Vec<EndedRequest>, Error>;
    /// Audit entries, newest first, older than `before`.
    fn audits(&mut self, limit: u32, before: Option<u64>) -> Result<Vec<AuditEntry>, Error>;
    /// Audit entries with their place in the chain, oldest first, from after `after` on
    /// (`limit` at most): what `chain::verify` walks.
    fn audit_chain(&mut self, after: u64, limit: u32) -> Result<Vec<chain::Chained>, Error>;
    /// Deletes rows older than `cutoff_ms` and all but the newest `max_rows`; how many.
    fn prune(
        &mut self,
        table: Table,
        cutoff_ms: i64,
        max_rows: Option<u64>,
    ) -> Result<usize, Error>;
    /// How many rows `table` holds.
    fn count(&mut self, table: Table) -> Result<u64, Error>;
    /// How many calls ended in each minute (`ended_ms / MINUTE_MS`) from `since_ms` on, by
    /// outcome; minutes without calls are absent.
    fn per_minute(&mut self, since_ms: i64) -> Result<Vec<MinuteCount>, Error>;
}

/// One minute's number (`ended_ms / MINUTE_MS`), an outcome, and how many calls ended so.
pub type MinuteCount = (i64, CallOutcome, u64);
