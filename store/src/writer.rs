//! The writers' policy, written once for both databases ([`Batch`], [`Gate`], [`LINGER`],
//! [`urgent`]), and the SQLite writer on it (`crate::sqlite::writer` runs the thread): it
//! applies a batch of queued changes in one transaction, commits, and only then answers the
//! `Sync` jobs of that batch. Under load a commit covers many calls; alone, a call waits for
//! one commit. PostgreSQL's writer (`postgres`) takes its batches apart and keeps the gate the
//! same way, and adds its own rules: the fence, the outage, a change whose data it refuses.
//!
//! A commit that fails is rolled back whole, so every change queued with it is lost. Its
//! waiters get the error, and so does every later waiter: a claim queued after a lost park
//! must not be acknowledged as if the call were on disk. From the first failure on nothing
//! more is written (the file keeps the state of the last good commit, which a restart reads)
//! and every operation that accepts work is refused until the broker is restarted.

use std::ops::ControlFlow;

use rusqlite::{Connection, params};
use tracing::{debug, error};

use tokio::sync::oneshot;

use super::{Coalesced, DbError, Error, Job, Op, StoredCall};
use crate::sqlite;

/// Most jobs in one transaction.
pub const BATCH: usize = 4096;

/// How long changes nobody waits for (the note that an outcome was delivered) may wait for a
/// commit somebody waits for (a park, a claim, a result, a result frame), so that they share
/// it; then they are committed alone. A delivered outcome that is not forgotten is only sent
/// again to a sidecar that resumes its call, so it needs no commit of its own. A park is not
/// such a change: the call is published to the apps at once, and one killed before its park
/// is committed would be lost to a harness that keeps waiting for it across the restart (a
/// `leo-mcp` re-attaches its calls), so a park is committed at once, as before (see
/// [`urgent`]).
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether a batch holding `ops` must be committed without lingering: it parks a call.
pub fn urgent(ops: &[Op]) -> bool {
    ops.iter().any(|op| matches!(op, Op::Park(_)))
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
/// park). Both writers keep their gate; an outage does not shut it, a refusal does.
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
    pub(crate) fn shut(&mut self, e: DbError, why: &str) -> Error {
        error!(
            error = %leo_protocol::chain::error_chain(&e),
            "{why}"
        );
        self.failed = Some(e.clone());
        Error::Database(e)
    }

    /// A batch that wrote `ops` changes was committed.
    pub(crate) fn committed(&self, ops: usize) {
        crate::committed();
        debug!(ops, "state committed");
    }
}

/// The gate's reason when the database refused a commit.
pub(crate) const CANNOT_RECORD: &str = "cannot record the broker's state; no further change is \
     acknowledged until the broker is restarted";

/// The writer's state between batches.
pub struct Writer {
    /// How many ended requests are kept.
    remember: usize,
    gate: Gate,
}

impl Writer {
    pub fn new(remember: usize) -> Writer {
        Writer {
            remember,
            gate: Gate::default(),
        }
    }

    /// Commits the batch's changes (unless the gate is shut) and says how it went.
    fn commit_batch(&mut self, conn: &mut Connection, ops: &[Op]) -> Result<(), Error> {
        self.gate.open()?;
        match commit(conn, ops, self.remember) {
            Ok(written) => {
                self.gate.committed(written);
                Ok(())
            }
            Err(e) => Err(self.gate.shut(e.into(), CANNOT_RECORD)),
        }
    }
}

impl sqlite::writer::Batches for Writer {
    type Job = Job;

    fn urgent(&self, job: &Job) -> bool {
        match job {
            Job::Ops(ops) => urgent(ops),
            Job::Sync(_) | Job::Close(_) => true,
        }
    }

    fn batch(
        &mut self,
        conn: &mut Connection,
        jobs: Vec<Job>,
    ) -> (bool, ControlFlow<sqlite::writer::Done>) {
        let mut batch = Batch::of(jobs);
        let result = self.commit_batch(conn, &batch.ops);
        batch.answer(&result);
        let flow = match batch.close {
            Some(done) => ControlFlow::Break(Box::new(move || {
                let _ = done.send(result);
            }) as sqlite::writer::Done),
            None => ControlFlow::Continue(()),
        };
        (!self.gate.is_shut(), flow)
    }
}

pub(super) fn commit(
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
            apply(conn, op, &coalesced).map_err(sqlite::Error::doing(op_name(op)))?;
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

pub(super) fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Park(_) => "record a parked call",
        Op::Claim { .. } => "record a claim",
        Op::Unclaim { .. } => "record a claim given back",
        Op::Approval { .. } => "record an approval",
        Op::End { .. } => "record an ending",
        Op::Delivered { .. } => "record a delivered outcome",
        Op::Mail { .. } => "record a message",
        Op::MailTaken { .. } => "record a mailbox read",
        Op::MailTrim { .. } => "trim a mailbox",
        Op::Client(_) => "record a client",
        Op::ClientGone { .. } => "record a client gone",
        Op::Owner { .. } => "record an owner",
        Op::OwnersReleased { .. } => "release owners",
        Op::Seen(_) => "record an offered definition",
        Op::Unseen { .. } => "forget an offered definition",
        Op::Registered { .. } => "record a registration",
        Op::Unregistered { .. } => "forget a registration",
        Op::RegistrationsCleared => "forget the registrations before the start",
    }
}

fn apply(tx: &Connection, op: &Op, coalesced: &Coalesced<'_>) -> rusqlite::Result<()> {
    match op {
        Op::Park(call) => park(tx, call),
        Op::Claim { id, by } => tx
            .prepare_cached("UPDATE live SET claimed_by = ?2 WHERE id = ?1")?
            .execute(params![id, by])
            .map(drop),
        Op::Unclaim { id } => tx
            .prepare_cached("UPDATE live SET claimed_by = NULL WHERE id = ?1")?
            .execute(params![id])
            .map(drop),
        Op::Approval {
            id,
            approval,
            arguments,
        } => tx
            .prepare_cached(
                "UPDATE live SET approval = ?2, arguments = COALESCE(?3, arguments) WHERE id = ?1",
            )?
            .execute(params![id, approval, arguments])
            .map(drop),
        Op::End { id, .. } => end(tx, op, coalesced.has_live_row(id.as_str())),
        Op::Delivered { id } => tx
            .prepare_cached("UPDATE ended SET outcome = NULL WHERE id = ?1")?
            .execute(params![id])
            .map(drop),
        Op::Mail { agent, message } => tx
            .prepare_cached("INSERT INTO mail (agent, text, sender, at) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![agent, message.text, message.from, message.at])
            .map(drop),
        Op::MailTaken { agent } => tx
            .prepare_cached("DELETE FROM mail WHERE agent = ?1")?
            .execute(params![agent])
            .map(drop),
        Op::MailTrim { agent, keep } => tx
            .prepare_cached(
                "DELETE FROM mail WHERE agent = ?1 AND n NOT IN
                 (SELECT n FROM mail WHERE agent = ?1 ORDER BY n DESC LIMIT ?2)",
            )?
            .execute(params![agent, *keep as i64])
            .map(drop),
        Op::Client(c) => tx
            .prepare_cached(
                "INSERT OR REPLACE INTO clients (client_id, resume_key, principal, name)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                c.client_id.as_str(),
                c.resume_key,
                c.principal,
                c.name
            ])
            .map(drop),
        Op::ClientGone { client_id } => tx
            .prepare_cached("DELETE FROM clients WHERE client_id = ?1")?
            .execute(params![client_id])
            .map(drop),
        Op::Owner {
            agent,
            group,
            client_id,
        } => tx
            .prepare_cached(
                "INSERT OR REPLACE INTO owners (agent, grp, client_id) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![agent, group, client_id])
            .map(drop),
        Op::OwnersReleased { client_id, group } => tx
            .prepare_cached("DELETE FROM owners WHERE client_id = ?1 AND (?2 IS NULL OR grp = ?2)")?
            .execute(params![client_id, group])
            .map(drop),
        Op::Seen(_)
        | Op::Unseen { .. }
        | Op::Registered { .. }
        | Op::Unregistered { .. }
        | Op::RegistrationsCleared => registry(tx, op),
    }
}

/// The registry's changes: the definitions agents were offered, and who serves what.
fn registry(tx: &Connection, op: &Op) -> rusqlite::Result<()> {
    match op {
        Op::Seen(d) => tx
            .prepare_cached(
                "INSERT OR REPLACE INTO definitions (name, grp, digest, definition)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![d.name, d.group, d.digest, d.definition])
            .map(drop),
        Op::Unseen { name } => tx
            .prepare_cached("DELETE FROM definitions WHERE name = ?1")?
            .execute(params![name])
            .map(drop),
        Op::Registered {
            client_id,
            group,
            tools,
            via,
        } => tx
            .prepare_cached(
                "INSERT OR REPLACE INTO registrations (client_id, grp, tools, via)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![client_id, group, tools, via])
            .map(drop),
        Op::Unregistered { client_id, group } => tx
            .prepare_cached(
                "DELETE FROM registrations WHERE client_id = ?1 AND (?2 IS NULL OR grp = ?2)",
            )?
            .execute(params![client_id, group])
            .map(drop),
        Op::RegistrationsCleared => tx.execute("DELETE FROM registrations", []).map(drop),
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
        tx.prepare_cached("DELETE FROM live WHERE id = ?1")?
            .execute(params![e.id])?;
    }
    tx.prepare_cached(
        "INSERT OR REPLACE INTO ended (id, how, agent, session, local_id, outcome)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        e.id, e.how, e.agent, e.session, e.local_id, e.outcome
    ])
    .map(drop)
}

fn park(tx: &Connection, c: &StoredCall) -> rusqlite::Result<()> {
    let r = &c.request;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO live (id, agent, session, local_id, grp, tool, arguments,
         timeout_s, deadline_ms, created_at, claimed_by, approval)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
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
    ])
    .map(drop)
}
