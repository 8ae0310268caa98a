//! What one batch of queued changes writes, in one transaction: the statements of
//! SQLite's `write`, in PostgreSQL's words (`ON CONFLICT` for `INSERT OR REPLACE`), one
//! statement per change.
//!
//! **One round trip per batch.** `BEGIN`, the fence (`lease::FENCE`: the transaction fails
//! unless this instance still leads), every change's statement and `COMMIT` are sent
//! together, pipelined on one connection: tokio-postgres sends requests in the order their
//! futures are first polled, and `try_join_all` polls them in order, so the server runs them
//! in the order the core made the changes. If one fails, the server aborts the transaction and
//! answers the `COMMIT` with a rollback, so nothing of the batch is kept, as in SQLite; the
//! batch is answered with that first error, and the change it came from ([`Failed::op`]), so
//! the writer can drop a change the database cannot hold and write the rest. Statements are
//! prepared once per connection (the pool's cache), before the first batch that needs them.

use std::collections::HashMap;

use futures_util::future::try_join_all;
use tokio_postgres::Statement;

use super::{Fenced, PgError};
use crate::{Coalesced, Op, StoredCall};

/// A batch the database did not commit: why, and which of its changes the database refused
/// (an index into the `ops` given to [`commit`]) when the error came from one.
#[derive(Debug)]
pub struct Failed {
    pub error: PgError,
    pub op: Option<usize>,
}

impl From<PgError> for Failed {
    fn from(error: PgError) -> Failed {
        Failed { error, op: None }
    }
}

/// Keeps only the last `remember` endings, as in memory.
const TRIM: &str = "DELETE FROM ended WHERE n <= (SELECT MAX(n) FROM ended) - $1";

/// Writes `ops` in order and commits, fenced by `fence` (this instance and the epoch it leads
/// in: the transaction fails unless it still leads, see `lease`); `remember` bounds the
/// endings kept.
pub async fn commit(
    client: &deadpool_postgres::Client,
    fence: (&str, i64),
    ops: &[Op],
    remember: usize,
) -> Result<(), Failed> {
    let coalesced = Coalesced::new(ops.iter());
    let ops: Vec<(usize, &Op)> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !coalesced.skips(op))
        .collect();
    let (opened, tx) = Fenced::pipelined(client, fence).await?;
    let ended = ops.iter().any(|(_, op)| matches!(op, Op::End { .. }));
    let trim = ended.then_some(remember as i64);
    let prepared = prepare(&tx, &ops, trim.is_some()).await?;
    pipeline(opened, &tx, &prepared, &ops, trim).await
}

/// The batch's statements, each prepared once per connection (the pool's cache).
async fn prepare(
    tx: &Fenced<'_>,
    ops: &[(usize, &Op)],
    trim: bool,
) -> Result<HashMap<&'static str, Statement>, PgError> {
    let mut prepared = HashMap::new();
    let trim = trim.then_some(TRIM);
    for sql in ops.iter().map(|(_, op)| sql(op)).chain(trim) {
        if !prepared.contains_key(sql) {
            let statement = tx
                .prepare_cached(sql)
                .await
                .map_err(PgError::doing("prepare a statement"))?;
            prepared.insert(sql, statement);
        }
    }
    Ok(prepared)
}

/// Sends the opening (`BEGIN` and the fence), every change's statement, the trim (keeping the
/// last `trim` endings) and `COMMIT` together: `try_join!` polls them first in that order.
async fn pipeline(
    opened: impl Future<Output = Result<(), PgError>>,
    tx: &Fenced<'_>,
    prepared: &HashMap<&'static str, Statement>,
    ops: &[(usize, &Op)],
    trim: Option<i64>,
) -> Result<(), Failed> {
    let opened = async { opened.await.map_err(Failed::from) };
    let changes = try_join_all(ops.iter().map(|&(i, op)| {
        let statement = &prepared[sql(op)];
        async move {
            apply(tx, statement, op).await.map_err(|source| Failed {
                error: PgError::doing(op.name())(source),
                op: Some(i),
            })
        }
    }));
    let trimmed = async {
        match trim {
            Some(remember) => tx
                .execute(&prepared[TRIM], &[&remember])
                .await
                .map(drop)
                .map_err(PgError::doing("trim the ended requests"))
                .map_err(Failed::from),
            None => Ok(()),
        }
    };
    let end = async { tx.commit().await.map_err(Failed::from) };
    futures_util::try_join!(opened, changes, trimmed, end).map(drop)
}

/// The one statement that writes `op`.
fn sql(op: &Op) -> &'static str {
    match op {
        Op::Park(_) => {
            "INSERT INTO live (id, agent, session, local_id, grp, tool, arguments,
             timeout_s, deadline_ms, created_at, claimed_by, approval)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (id) DO UPDATE SET claimed_by = EXCLUDED.claimed_by,
             deadline_ms = EXCLUDED.deadline_ms, approval = EXCLUDED.approval"
        }
        Op::Claim { .. } => "UPDATE live SET claimed_by = $2 WHERE id = $1",
        Op::Unclaim { .. } => "UPDATE live SET claimed_by = NULL WHERE id = $1",
        Op::Approval { .. } => {
            "UPDATE live SET approval = $2, arguments = COALESCE($3, arguments) WHERE id = $1"
        }
        // The call leaves `live` and is remembered in `ended`, its outcome by name: one
        // statement (a data-modifying CTE), so the pipeline keeps one request per change.
        Op::End { .. } => {
            "WITH gone AS (DELETE FROM live WHERE id = $1)
             INSERT INTO ended (id, how, agent, session, local_id, outcome)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (id) DO UPDATE SET how = EXCLUDED.how, agent = EXCLUDED.agent,
             session = EXCLUDED.session, local_id = EXCLUDED.local_id,
             outcome = EXCLUDED.outcome"
        }
        Op::Delivered { .. } => "UPDATE ended SET outcome = NULL WHERE id = $1",
        Op::Mail { .. } => "INSERT INTO mail (agent, text, sender, at) VALUES ($1, $2, $3, $4)",
        Op::MailTaken { .. } => "DELETE FROM mail WHERE agent = $1",
        Op::MailTrim { .. } => {
            "DELETE FROM mail WHERE agent = $1 AND n NOT IN
             (SELECT n FROM mail WHERE agent = $1 ORDER BY n DESC LIMIT $2)"
        }
        Op::Client(_) => {
            "INSERT INTO clients (client_id, resume_key, principal, name)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (client_id) DO UPDATE SET resume_key = EXCLUDED.resume_key,
             principal = EXCLUDED.principal, name = EXCLUDED.name"
        }
        Op::ClientGone { .. } => "DELETE FROM clients WHERE client_id = $1",
        Op::Owner { .. } => {
            "INSERT INTO owners (agent, grp, client_id) VALUES ($1, $2, $3)
             ON CONFLICT (agent, grp) DO UPDATE SET client_id = EXCLUDED.client_id"
        }
        Op::OwnersReleased { .. } => {
            "DELETE FROM owners WHERE client_id = $1 AND ($2::TEXT IS NULL OR grp = $2)"
        }
        Op::Seen(_) => {
            "INSERT INTO definitions (name, grp, digest, definition) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO UPDATE SET grp = EXCLUDED.grp, digest = EXCLUDED.digest,
             definition = EXCLUDED.definition"
        }
        Op::Unseen { .. } => "DELETE FROM definitions WHERE name = $1",
        Op::Registered { .. } => {
            "INSERT INTO registrations (client_id, grp, tools, via) VALUES ($1, $2, $3, $4)
             ON CONFLICT (client_id, grp) DO UPDATE SET tools = EXCLUDED.tools, via = EXCLUDED.via"
        }
        Op::Unregistered { .. } => {
            "DELETE FROM registrations WHERE client_id = $1 AND ($2::TEXT IS NULL OR grp = $2)"
        }
        Op::RegistrationsCleared => "DELETE FROM registrations",
    }
}

/// Sends `op`'s statement with its parameters (at the first poll) and waits for its answer.
async fn apply(
    client: &Fenced<'_>,
    statement: &Statement,
    op: &Op,
) -> Result<(), tokio_postgres::Error> {
    macro_rules! run {
        ($($param:expr),*) => {
            client.execute(statement, &[$($param),*]).await.map(drop)
        };
    }
    match op {
        Op::Park(call) => park(client, statement, call).await,
        Op::Claim { id, by } => run!(id, by),
        Op::Unclaim { id } | Op::Delivered { id } => run!(id),
        Op::Approval {
            id,
            approval,
            arguments,
        } => run!(id, approval, arguments),
        Op::End { .. } => {
            let Some(e) = op.end_row() else {
                return Ok(());
            };
            run!(&e.id, &e.how, &e.agent, &e.session, &e.local_id, &e.outcome)
        }
        Op::Mail { agent, message } => {
            run!(agent, &message.text, &message.from, &message.at)
        }
        Op::MailTaken { agent } => run!(agent),
        Op::MailTrim { agent, keep } => run!(agent, &(*keep as i64)),
        Op::Client(c) => run!(&c.client_id.as_str(), &c.resume_key, &c.principal, &c.name),
        Op::ClientGone { client_id } => run!(client_id),
        Op::Owner {
            agent,
            group,
            client_id,
        } => run!(agent, group, client_id),
        Op::OwnersReleased { client_id, group } => run!(client_id, group),
        Op::Seen(d) => run!(&d.name, &d.group, &d.digest, &d.definition),
        Op::Unseen { name } => run!(name),
        Op::Registered {
            client_id,
            group,
            tools,
            via,
        } => run!(client_id, group, tools, via),
        Op::Unregistered { client_id, group } => run!(client_id, group),
        Op::RegistrationsCleared => run!(),
    }
}

async fn park(
    client: &Fenced<'_>,
    statement: &Statement,
    c: &StoredCall,
) -> Result<(), tokio_postgres::Error> {
    let r = &c.request;
    client
        .execute(
            statement,
            &[
                &r.id.as_str(),
                &r.agent,
                &r.session,
                &(c.local_id as i64),
                &r.group,
                &r.tool,
                &r.arguments.get(),
                &r.timeout_s.map(|t| t as i64),
                &c.deadline_ms,
                &r.created_at,
                &c.claimed_by.as_deref(),
                &c.approval,
            ],
        )
        .await
        .map(drop)
}
