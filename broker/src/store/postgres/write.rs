//! What one batch of queued changes writes, in one transaction: the statements of
//! `store::writer`, in PostgreSQL's words (`ON CONFLICT` for `INSERT OR REPLACE`).

use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::PgError;
use crate::store::{Op, StoredCall};

/// Writes `ops` in order and commits; `remember` bounds the endings kept.
pub async fn commit(
    client: &mut deadpool_postgres::Client,
    ops: &[Op],
    remember: usize,
) -> Result<(), PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::doing("begin a transaction"))?;
    let mut ended = false;
    for op in ops {
        ended |= matches!(op, Op::End { .. });
        apply(&tx, op).await.map_err(PgError::doing(op_name(op)))?;
    }
    if ended {
        // Only the last `remember` endings are kept, as in memory.
        exec(
            &tx,
            "DELETE FROM ended WHERE n <= (SELECT MAX(n) FROM ended) - $1",
            &[&(remember as i64)],
        )
        .await
        .map_err(PgError::doing("trim the ended requests"))?;
    }
    tx.commit().await.map_err(PgError::doing("commit"))
}

async fn exec(
    tx: &Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<(), tokio_postgres::Error> {
    let statement = tx.prepare_cached(sql).await?;
    tx.execute(&statement, params).await.map(drop)
}

fn op_name(op: &Op) -> &'static str {
    crate::store::writer::op_name(op)
}

async fn apply(tx: &Transaction<'_>, op: &Op) -> Result<(), tokio_postgres::Error> {
    match op {
        Op::Park(call) => park(tx, call).await,
        Op::Claim { id, by } => {
            exec(
                tx,
                "UPDATE live SET claimed_by = $2 WHERE id = $1",
                &[id, by],
            )
            .await
        }
        Op::Unclaim { id } => {
            exec(tx, "UPDATE live SET claimed_by = NULL WHERE id = $1", &[id]).await
        }
        Op::End { .. } => end(tx, op).await,
        Op::Delivered { id } => {
            exec(tx, "UPDATE ended SET outcome = NULL WHERE id = $1", &[id]).await
        }
        Op::Mail { agent, message } => {
            exec(
                tx,
                "INSERT INTO mail (agent, text, sender, at) VALUES ($1, $2, $3, $4)",
                &[agent, &message.text, &message.from, &message.at],
            )
            .await
        }
        Op::MailTaken { agent } => exec(tx, "DELETE FROM mail WHERE agent = $1", &[agent]).await,
        Op::MailTrim { agent, keep } => {
            exec(
                tx,
                "DELETE FROM mail WHERE agent = $1 AND n NOT IN
                 (SELECT n FROM mail WHERE agent = $1 ORDER BY n DESC LIMIT $2)",
                &[agent, &(*keep as i64)],
            )
            .await
        }
        Op::Client(c) => {
            exec(
                tx,
                "INSERT INTO clients (client_id, resume_key, principal, name)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (client_id) DO UPDATE SET resume_key = EXCLUDED.resume_key,
                 principal = EXCLUDED.principal, name = EXCLUDED.name",
                &[&c.client_id.as_str(), &c.resume_key, &c.principal, &c.name],
            )
            .await
        }
        Op::ClientGone { client_id } => {
            exec(tx, "DELETE FROM clients WHERE client_id = $1", &[client_id]).await
        }
        Op::Owner {
            agent,
            group,
            client_id,
        } => {
            exec(
                tx,
                "INSERT INTO owners (agent, grp, client_id) VALUES ($1, $2, $3)
                 ON CONFLICT (agent, grp) DO UPDATE SET client_id = EXCLUDED.client_id",
                &[agent, group, client_id],
            )
            .await
        }
        Op::OwnersReleased { client_id, group } => {
            exec(
                tx,
                "DELETE FROM owners WHERE client_id = $1 AND ($2::TEXT IS NULL OR grp = $2)",
                &[client_id, group],
            )
            .await
        }
    }
}

/// `Op::End`: the call leaves `live` and is remembered in `ended`, its outcome by name.
async fn end(tx: &Transaction<'_>, op: &Op) -> Result<(), tokio_postgres::Error> {
    let Some(e) = op.end_row() else {
        return Ok(());
    };
    exec(tx, "DELETE FROM live WHERE id = $1", &[&e.id]).await?;
    exec(
        tx,
        "INSERT INTO ended (id, how, agent, session, local_id, outcome)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET how = EXCLUDED.how, agent = EXCLUDED.agent,
         session = EXCLUDED.session, local_id = EXCLUDED.local_id, outcome = EXCLUDED.outcome",
        &[&e.id, &e.how, &e.agent, &e.session, &e.local_id, &e.outcome],
    )
    .await
}

async fn park(tx: &Transaction<'_>, c: &StoredCall) -> Result<(), tokio_postgres::Error> {
    let r = &c.request;
    exec(
        tx,
        "INSERT INTO live (id, agent, session, local_id, grp, tool, arguments,
         timeout_s, deadline_ms, created_at, claimed_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (id) DO UPDATE SET claimed_by = EXCLUDED.claimed_by,
         deadline_ms = EXCLUDED.deadline_ms",
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
        ],
    )
    .await
}
