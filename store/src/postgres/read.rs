//! Reading the state back at start from PostgreSQL: the queries and their decoding are
//! `crate::read`'s, shared with SQLite; this runs them, each to its end before the next (the
//! rows come back whole), and reads a row's columns.

use deadpool_postgres::Client;
use leo_protocol::outcome::UnknownOutcome;

use super::PgError;
use crate::Restored;
use crate::read::{Row, Source, queries};

/// Reads what the last leader left.
pub async fn restore(client: &Client) -> Result<Restored, PgError> {
    let mut fetched = Fetched(Vec::new());
    for sql in queries(Fetched::ORDER) {
        let rows = client
            .query(&sql, &[])
            .await
            .map_err(PgError::doing("read the state"))?;
        fetched.0.push((sql, rows));
    }
    crate::read::restore(&mut fetched)
}

/// The rows of each query, as fetched.
struct Fetched(Vec<(String, Vec<tokio_postgres::Row>)>);

impl Source for Fetched {
    type Error = PgError;
    type Row<'r> = tokio_postgres::Row;
    const ORDER: &'static str = "n";

    fn rows<T>(
        &mut self,
        sql: &str,
        f: impl FnMut(&tokio_postgres::Row) -> Result<T, PgError>,
    ) -> Result<Vec<T>, PgError> {
        let rows = self
            .0
            .iter()
            .find(|(q, _)| q == sql)
            .map(|(_, rows)| rows.as_slice())
            .unwrap_or_default();
        rows.iter().map(f).collect()
    }
}

impl Row for tokio_postgres::Row {
    type Error = PgError;
    fn text(&self, i: usize) -> Result<String, PgError> {
        self.try_get(i).map_err(PgError::doing("read the state"))
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, PgError> {
        self.try_get(i).map_err(PgError::doing("read the state"))
    }
    fn int(&self, i: usize) -> Result<i64, PgError> {
        self.try_get(i).map_err(PgError::doing("read the state"))
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, PgError> {
        self.try_get(i).map_err(PgError::doing("read the state"))
    }
    fn unreadable(&self, _: usize, what: &str, value: &str, e: UnknownOutcome) -> PgError {
        PgError::Unreadable(format!("{what} {value:?}: {e}"))
    }
}
