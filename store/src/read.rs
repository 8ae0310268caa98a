//! Reading the state back at start, written once for both databases: the six queries and how
//! their rows become the core's values are here; a database only runs a query and hands over
//! its rows ([`Source`], [`Row`]: SQLite's below, PostgreSQL's in `postgres::read`). The one
//! difference between them is the column that keeps the order rows were written in.

use leo_protocol::ipc::Message;
use leo_protocol::outcome::{CallOutcome, UnknownOutcome};
use leo_protocol::requests::Request;
use rusqlite::Connection;
use rusqlite::types::Type;
use serde_json::value::RawValue;

use super::{StoredCall, StoredClient, StoredDefinition, StoredEnd};

/// What the last run left: live calls in the order they were parked, recent endings oldest
/// first, unread messages oldest first, resumable clients and their groups' owners.
#[derive(Debug, Default)]
pub struct Restored {
    pub live: Vec<StoredCall>,
    pub ended: Vec<StoredEnd>,
    pub mail: Vec<(String, Message)>,
    pub clients: Vec<StoredClient>,
    /// `(agent, group, client_id)`.
    pub owners: Vec<(String, String, String)>,
    /// The definitions agents were last offered, by name.
    pub definitions: Vec<StoredDefinition>,
}

/// One row a query returned, read by column.
pub(crate) trait Row {
    type Error;
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// Column `i` holds `value`, which no broker writes (`e` says why): the read fails.
    fn unreadable(&self, i: usize, what: &str, value: &str, e: UnknownOutcome) -> Self::Error;
}

/// A database the state is read back from.
pub(crate) trait Source {
    type Error;
    type Row<'r>: Row<Error = Self::Error>;
    /// The column that orders `live` and `clients` as their rows were written.
    const ORDER: &'static str;
    /// Runs `sql` and decodes every row with `f`, in order.
    fn rows<T>(
        &mut self,
        sql: &str,
        f: impl FnMut(&Self::Row<'_>) -> Result<T, Self::Error>,
    ) -> Result<Vec<T>, Self::Error>;
}

/// The six queries, in the order [`restore`] runs them.
pub(crate) fn queries(order: &str) -> [String; 6] {
    [
        format!(
            "SELECT id, agent, session, local_id, grp, tool, arguments, timeout_s, deadline_ms,
             created_at, claimed_by, approval FROM live ORDER BY {order}"
        ),
        "SELECT id, how, agent, session, local_id, outcome FROM ended ORDER BY n".into(),
        "SELECT agent, text, sender, at FROM mail ORDER BY n".into(),
        format!("SELECT client_id, resume_key, principal, name FROM clients ORDER BY {order}"),
        "SELECT agent, grp, client_id FROM owners".into(),
        "SELECT name, grp, digest, definition FROM definitions".into(),
    ]
}

/// Reads what the last run left from `db`.
pub(crate) fn restore<S: Source>(db: &mut S) -> Result<Restored, S::Error> {
    let [live, ended, mail, clients, owners, definitions] = queries(S::ORDER);
    Ok(Restored {
        live: db.rows(&live, |r| live_call(r))?,
        ended: db.rows(&ended, |r| end(r))?,
        mail: db.rows(&mail, |r| {
            let message = Message {
                text: r.text(1)?,
                from: r.text(2)?,
                at: r.text(3)?,
            };
            Ok((r.text(0)?, message))
        })?,
        clients: db.rows(&clients, |r| {
            Ok(StoredClient {
                client_id: r.text(0)?.into(),
                resume_key: r.text(1)?,
                principal: r.text(2)?,
                name: r.opt_text(3)?,
            })
        })?,
        owners: db.rows(&owners, |r| Ok((r.text(0)?, r.text(1)?, r.text(2)?)))?,
        definitions: db.rows(&definitions, |r| {
            Ok(StoredDefinition {
                name: r.text(0)?,
                group: r.text(1)?,
                digest: r.text(2)?,
                definition: r.text(3)?,
            })
        })?,
    })
}

fn live_call<R: Row>(r: &R) -> Result<StoredCall, R::Error> {
    Ok(StoredCall {
        request: Request {
            id: r.text(0)?.into(),
            agent: r.text(1)?,
            session: r.text(2)?,
            group: r.text(4)?,
            tool: r.text(5)?,
            // Kept as the text that was written; checked as JSON, not parsed into a tree.
            arguments: RawValue::from_string(r.text(6)?).unwrap_or_default(),
            timeout_s: r.opt_int(7)?.map(|t| t as u64),
            created_at: r.text(9)?,
            owner: None,
            // The span ended with the process that opened it.
            traceparent: None,
        },
        local_id: r.int(3)? as u64,
        deadline_ms: r.opt_int(8)?,
        claimed_by: r.opt_text(10)?.map(Into::into),
        approval: r.opt_text(11)?,
    })
}

fn end<R: Row>(r: &R) -> Result<StoredEnd, R::Error> {
    let how = r.text(1)?;
    Ok(StoredEnd {
        id: r.text(0)?.into(),
        // An unknown outcome fails the read (the row is not one this broker wrote); the old
        // spelling `app_error` still reads.
        how: CallOutcome::parse_stored(&how).map_err(|e| r.unreadable(1, "ended.how", &how, e))?,
        agent: r.text(2)?,
        session: r.text(3)?,
        local_id: r.int(4)? as u64,
        outcome: r.opt_text(5)?,
    })
}

/// The state in `state/leo.db`.
pub(crate) struct Sqlite<'c>(pub &'c Connection);

impl Row for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    fn unreadable(&self, i: usize, _: &str, _: &str, e: UnknownOutcome) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, Type::Text, Box::new(e))
    }
}

impl Source for Sqlite<'_> {
    type Error = rusqlite::Error;
    type Row<'r> = rusqlite::Row<'r>;
    const ORDER: &'static str = "rowid";

    fn rows<T>(
        &mut self,
        sql: &str,
        mut f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<Vec<T>> {
        let mut s = self.0.prepare(sql)?;
        s.query_map([], |r| f(r))?.collect()
    }
}
