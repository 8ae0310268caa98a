//! The broker library's error type: everything that can stop the broker from starting or
//! serving. Request-level failures are `refusal::Refusal` and IPC `error` frames instead.

use std::path::PathBuf;
use std::sync::Arc;

use crate::store::postgres::PgError;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    State { path: PathBuf, message: String },
    /// `state/leo.db` or `state/history.db` cannot be opened: damaged, newer, unwritable.
    #[error("{path}")]
    Database {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The PostgreSQL database of `store.url` cannot be reached ([`BrokerError::is_outage`]),
    /// or refused.
    #[error("{}", crate::config::store_label())]
    Postgres(#[source] Arc<PgError>),
    #[error("{path}: permissions are {mode:o}, must be 0600 (run: chmod 600 {path})")]
    LoosePermissions { path: PathBuf, mode: u32 },
    #[error(
        "{path}: permissions are {mode:o}; its group or others can write it, and it grants API client scopes (run: chmod go-w {path})"
    )]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error("{0}")]
    Usage(String),
    /// `run/broker.lock` is held: a broker runs (or starts) on this home already.
    #[error(
        "another broker{} runs on this home ({}): stop it before starting this one, or give this one its own LEO_HOME (and port)",
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        .home.display()
    )]
    AnotherBroker { home: PathBuf, pid: Option<u32> },
    #[error("cannot bind {what}")]
    Bind {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<PgError> for BrokerError {
    fn from(e: PgError) -> Self {
        BrokerError::Postgres(Arc::new(e))
    }
}

impl BrokerError {
    /// Whether the database could not be reached (PostgreSQL only: [`PgError::is_outage`]),
    /// an outage to wait out rather than a reason to stop.
    pub fn is_outage(&self) -> bool {
        matches!(self, BrokerError::Postgres(e) if e.is_outage())
    }

    /// `e`, of the live store at `path`: PostgreSQL's keeps its type.
    pub(crate) fn store(path: PathBuf, e: crate::store::Error) -> Self {
        if let Some(crate::store::DbError::Postgres(pg)) = e.database() {
            return BrokerError::Postgres(pg.clone());
        }
        BrokerError::Database {
            path,
            source: e.into(),
        }
    }

    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BrokerError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;
