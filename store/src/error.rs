//! The errors of the storage, typed to the end: [`DbError`] is what a database answered or
//! failed to (either database), and it says itself what it means ([`DbError::is_outage`],
//! [`DbError::is_fenced`], [`DbError::is_data`]), so nobody above it downcasts to ask. The
//! live store's [`Error`] and the history's error carry it.

use std::sync::Arc;

use crate::postgres::PgError;
use crate::sqlite;

/// What a database answered, or why it could not be reached: SQLite's or PostgreSQL's.
/// Cheap to clone (a batch's waiters each get the same one).
#[derive(Debug, Clone, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlite(Arc<sqlite::Error>),
    #[error(transparent)]
    Postgres(Arc<PgError>),
}

impl DbError {
    /// Whether the database could not be reached for now (PostgreSQL down, restarting, the
    /// network cut): transient, waited out. Never for SQLite, whose failures are not.
    pub fn is_outage(&self) -> bool {
        self.postgres().is_some_and(PgError::is_outage)
    }

    /// Whether the database refused a write because this instance no longer leads it (the
    /// fence, `postgres::lease`).
    pub fn is_fenced(&self) -> bool {
        self.postgres().is_some_and(PgError::is_fenced)
    }

    /// Whether the database refused one change's data (`PgError::is_data`): that change is at
    /// fault, not the database.
    pub fn is_data(&self) -> bool {
        self.postgres().is_some_and(PgError::is_data)
    }

    /// Whether opening found another instance leading the database (`PgError::Held`).
    pub fn is_held(&self) -> bool {
        matches!(self.postgres(), Some(PgError::Held(_)))
    }

    /// PostgreSQL's error, if this is one.
    pub fn postgres(&self) -> Option<&PgError> {
        match self {
            DbError::Postgres(e) => Some(e),
            DbError::Sqlite(_) => None,
        }
    }
}

impl From<sqlite::Error> for DbError {
    fn from(e: sqlite::Error) -> Self {
        DbError::Sqlite(Arc::new(e))
    }
}

impl From<PgError> for DbError {
    fn from(e: PgError) -> Self {
        DbError::Postgres(Arc::new(e))
    }
}

/// Why the store could not open, or could not record a change.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The database refused: at open, or this change's commit.
    #[error(transparent)]
    Database(DbError),
    /// PostgreSQL cannot be reached now; the change stays queued and is written when it is
    /// back (`503 store_unavailable`).
    #[error("the database is unreachable")]
    Unavailable(#[source] DbError),
    /// An earlier commit failed: what it held is lost, so nothing queued after it is
    /// acknowledged either, until the broker is restarted on a database that can be written.
    #[error("an earlier change could not be recorded, so no later one is acknowledged")]
    AfterFailure(#[source] DbError),
    #[error("the store's writer has stopped")]
    Stopped,
}

impl Error {
    /// The database's error behind this one, if any.
    pub fn database(&self) -> Option<&DbError> {
        match self {
            Error::Database(e) | Error::Unavailable(e) | Error::AfterFailure(e) => Some(e),
            Error::Stopped => None,
        }
    }

    /// Whether the database is out of reach for now: the change waits for it.
    pub fn is_outage(&self) -> bool {
        matches!(self, Error::Database(e) | Error::Unavailable(e) if e.is_outage())
    }

    /// Whether this instance no longer leads the database: nothing it writes is committed.
    pub fn is_fenced(&self) -> bool {
        self.database().is_some_and(DbError::is_fenced)
    }
}

/// `From` either database's error for an error type whose variant `Database` holds a
/// [`DbError`], so `?` converts both the same way everywhere.
macro_rules! from_database {
    ($error:ty) => {
        impl From<$crate::sqlite::Error> for $error {
            fn from(e: $crate::sqlite::Error) -> Self {
                Self::Database(e.into())
            }
        }

        impl From<$crate::postgres::PgError> for $error {
            fn from(e: $crate::postgres::PgError) -> Self {
                Self::Database(e.into())
            }
        }
    };
}
pub(crate) use from_database;

from_database!(Error);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_says_what_it_means() {
        let wait = deadpool_postgres::TimeoutType::Wait;
        let away = DbError::from(PgError::Connect(deadpool_postgres::PoolError::Timeout(
            wait,
        )));
        assert!(away.is_outage() && !away.is_fenced() && !away.is_data());
        let lost = DbError::from(PgError::LeaseLost {
            holder: "i_other".into(),
        });
        assert!(lost.is_fenced() && !lost.is_outage());
        let file = DbError::from(sqlite::Error::NotWal("delete".into()));
        assert!(!file.is_outage() && !file.is_fenced() && !file.is_data());
        assert!(Error::Unavailable(away.clone()).is_outage());
        // After a failed commit nothing is acknowledged, however the first one failed.
        assert!(!Error::AfterFailure(away).is_outage());
        assert!(Error::Database(lost).is_fenced());
    }
}
