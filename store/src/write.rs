//! SQLite's backend of the one writer (`writer`): what one batch of queued changes writes in
//! `state/leo.db`, in one transaction, and the file's upkeep. The rules of when and what
//! follows a failure are the writer's; a failed commit here is always [`Refused::Failed`],
//! since SQLite's failures are not transient.
//!
//! The WAL is kept as `sqlite::writer` keeps `state/history.db`'s: its pages are moved into
//! the file by a checkpoint thread of its own (`sqlite::writer::Checkpointer`), the WAL is
//! truncated every [`CHECKPOINT_EVERY`] when anything was written, and once more at close, so
//! a clean stop leaves an empty WAL.

use std::time::Duration;

use rusqlite::{Connection, params};

use super::{CHECKPOINT_EVERY, Coalesced, DbError, Job, Op, StoredCall};
use crate::sqlite;
use crate::sqlite::writer::Checkpointer;
use crate::writer::{Backend, Refused, Shared, Writer};

/// Starts the one writer over `conn` on a thread of its own (`leo-store`): the statements
/// block, so its loop runs there, on a current-thread runtime that only keeps its clock.
pub(crate) fn spawn(
    conn: Connection,
    remember: usize,
    shared: Shared,
    rx: tokio::sync::mpsc::UnboundedReceiver<Job>,
) -> sqlite::Result<()> {
    let writer = Writer::new(Sqlite::new(conn, remember), shared);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(sqlite::Error::Thread)?;
    std::thread::Builder::new()
        .name("leo-store".into())
        .spawn(move || rt.block_on(writer.run(rx)))
        .map(drop)
        .map_err(sqlite::Error::Thread)
}

/// The store's connection, and what its upkeep needs.
struct Sqlite {
    conn: Connection,
    /// How many ended requests are kept.
    remember: usize,
    checkpointer: Option<Checkpointer>,
    /// Written since the last checkpoint.
    dirty: bool,
}

impl Sqlite {
    /// The backend on `conn` (the checkpoint thread starts now).
    fn new(conn: Connection, remember: usize) -> Sqlite {
        let checkpointer = Checkpointer::start(&conn, "leo-store", sqlite::writer::CHECKPOINT_GAP);
        Sqlite {
            conn,
            remember,
            checkpointer,
            dirty: false,
        }
    }
}

impl Backend for Sqlite {
    async fn commit(&mut self, ops: &[Op]) -> Result<usize, Refused> {
        let written = commit(&mut self.conn, ops, self.remember)
            .map_err(|e| Refused::Failed(DbError::from(e)))?;
        self.dirty = true;
        if let Some(c) = &self.checkpointer {
            c.wrote();
        }
        Ok(written)
    }

    fn every(&self) -> Duration {
        CHECKPOINT_EVERY
    }

    async fn tick(&mut self) -> Result<(), DbError> {
        if std::mem::take(&mut self.dirty) {
            sqlite::checkpoint(&self.conn);
        }
        Ok(())
    }

    async fn close(self, _clean: bool) {
        if let Some(c) = self.checkpointer {
            c.stop();
        }
        sqlite::checkpoint(&self.conn);
        // Closing the last connection also removes the (now empty) WAL file.
        drop(self.conn);
    }
}

pub(crate) fn commit(
    conn: &mut Connection,
    ops: &[Op],
    remember: usize,
) -> Result<usize, sqlite::Error> {
    let coalesced = Coalesced::new(ops.iter());
    sqlite::begin(conn).map_err(sqlite::Error::doing("begin a transaction"))?;
    let written = (|| {
        let mut n = 0usize;
        let mut ended = false;
        for op in ops.iter().filter(|op| !coalesced.skips(op)) {
            ended |= matches!(op, Op::End { .. });
            apply(conn, op, &coalesced).map_err(sqlite::Error::doing(op.name()))?;
            n += 1;
        }
        if ended {
            // Only the last `remember` endings are kept, as in memory.
            conn.prepare_cached("DELETE FROM ended WHERE n <= (SELECT MAX(n) FROM ended) - ?1")
                .and_then(|mut s| s.execute(params![remember as i64]))
                .map_err(sqlite::Error::doing("trim the ended requests"))?;
        }
        Ok(n)
    })();
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            sqlite::rollback(conn);
            return Err(e);
        }
    };
    sqlite::commit(conn).map_err(sqlite::Error::doing("commit"))?;
    Ok(n)
}

fn apply(tx: &Connection, op: &Op, coalesced: &Coalesced<'_>) -> rusqlite::Result<()> {
    match op {
        Op::Park(call) => park(tx, call),
        Op::Claim { id, by } => run(
            tx,
            "UPDATE live SET claimed_by = ?2 WHERE id = ?1",
            params![id, by],
        ),
        Op::Unclaim { id } => run(
            tx,
            "UPDATE live SET claimed_by = NULL WHERE id = ?1",
            params![id],
        ),
        Op::Approval {
            id,
            approval,
            arguments,
        } => run(
            tx,
            "UPDATE live SET approval = ?2, arguments = COALESCE(?3, arguments) WHERE id = ?1",
            params![id, approval, arguments],
        ),
        Op::End { id, .. } => end(tx, op, coalesced.has_live_row(id.as_str())),
        Op::Delivered { id } => run(
            tx,
            "UPDATE ended SET outcome = NULL WHERE id = ?1",
            params![id],
        ),
        Op::Mail { agent, message } => run(
            tx,
            "INSERT INTO mail (agent, text, sender, at) VALUES (?1, ?2, ?3, ?4)",
            params![agent, message.text, message.from, message.at],
        ),
        Op::MailTaken { agent } => run(tx, "DELETE FROM mail WHERE agent = ?1", params![agent]),
        Op::MailTrim { agent, keep } => run(
            tx,
            "DELETE FROM mail WHERE agent = ?1 AND n NOT IN
             (SELECT n FROM mail WHERE agent = ?1 ORDER BY n DESC LIMIT ?2)",
            params![agent, *keep as i64],
        ),
        Op::Client(c) => run(
            tx,
            "INSERT OR REPLACE INTO clients (client_id, resume_key, principal, name)
             VALUES (?1, ?2, ?3, ?4)",
            params![c.client_id.as_str(), c.resume_key, c.principal, c.name],
        ),
        Op::ClientGone { client_id } => run(
            tx,
            "DELETE FROM clients WHERE client_id = ?1",
            params![client_id],
        ),
        Op::Owner {
            agent,
            group,
            client_id,
        } => run(
            tx,
            "INSERT OR REPLACE INTO owners (agent, grp, client_id) VALUES (?1, ?2, ?3)",
            params![agent, group, client_id],
        ),
        Op::OwnersReleased { client_id, group } => run(
            tx,
            "DELETE FROM owners WHERE client_id = ?1 AND (?2 IS NULL OR grp = ?2)",
            params![client_id, group],
        ),
        Op::Seen(_)
        | Op::Unseen { .. }
        | Op::Registered { .. }
        | Op::Unregistered { .. }
        | Op::RegistrationsCleared => registry(tx, op),
    }
}

/// Runs `sql` (prepared once per connection) with `params`.
fn run(tx: &Connection, sql: &str, params: &[&dyn rusqlite::ToSql]) -> rusqlite::Result<()> {
    tx.prepare_cached(sql)?.execute(params).map(drop)
}

/// The registry's changes: the definitions agents were offered, and who serves what.
fn registry(tx: &Connection, op: &Op) -> rusqlite::Result<()> {
    match op {
        Op::Seen(d) => run(
            tx,
            "INSERT OR REPLACE INTO definitions (name, grp, digest, definition)
             VALUES (?1, ?2, ?3, ?4)",
            params![d.name, d.group, d.digest, d.definition],
        ),
        Op::Unseen { name } => run(tx, "DELETE FROM definitions WHERE name = ?1", params![name]),
        Op::Registered {
            client_id,
            group,
            tools,
            via,
        } => run(
            tx,
            "INSERT OR REPLACE INTO registrations (client_id, grp, tools, via)
             VALUES (?1, ?2, ?3, ?4)",
            params![client_id, group, tools, via],
        ),
        Op::Unregistered { client_id, group } => run(
            tx,
            "DELETE FROM registrations WHERE client_id = ?1 AND (?2 IS NULL OR grp = ?2)",
            params![client_id, group],
        ),
        Op::RegistrationsCleared => run(tx, "DELETE FROM registrations", params![]),
        _ => Ok(()),
    }
}

/// `Op::End`: the call leaves `live` (if it has a row there) and is remembered in `ended`, its
/// outcome by name.
fn end(tx: &Connection, op: &Op, live_row: bool) -> rusqlite::Result<()> {
    let Some(e) = op.end_row() else {
        return Ok(());
    };
    if live_row {
        run(tx, "DELETE FROM live WHERE id = ?1", params![e.id])?;
    }
    run(
        tx,
        "INSERT OR REPLACE INTO ended (id, how, agent, session, local_id, outcome)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![e.id, e.how, e.agent, e.session, e.local_id, e.outcome],
    )
}

fn park(tx: &Connection, c: &StoredCall) -> rusqlite::Result<()> {
    let r = &c.request;
    run(
        tx,
        "INSERT OR REPLACE INTO live (id, agent, session, local_id, grp, tool, arguments,
         timeout_s, deadline_ms, created_at, claimed_by, approval)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            r.id.as_str(),
            r.agent,
            r.session,
            c.local_id as i64,
            r.group,
            r.tool,
            r.arguments.get(),
            r.timeout_s.map(|t| t as i64),
            c.deadline_ms,
            r.created_at,
            c.claimed_by.as_deref(),
            c.approval,
        ],
    )
}
