//! The writer thread: owns the connection, commits queued changes in batches.
//!
//! It blocks on the channel for the first job, takes whatever else is queued by then (up to
//! `BATCH`), applies it in one transaction, commits, and only then answers the `Sync` jobs
//! of that batch. Under load a commit covers many calls; alone, a call waits for one commit.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::mpsc;

use rusqlite::{Connection, Transaction, params};
use tracing::{debug, error};

use super::{Job, Op, StoredCall, Synchronous};

/// Most jobs in one transaction.
const BATCH: usize = 4096;

/// Opens `path` (created 0600), in WAL mode with the chosen `synchronous`.
pub fn connect(path: &Path, sync: Synchronous) -> Result<Connection, String> {
    let shown = path.display();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {shown}: {e}"))?;
    // SQLite gives its -wal and -shm files the main file's mode.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set the mode of {shown}: {e}"))?;
    let conn = Connection::open(path).map_err(|e| format!("cannot open {shown}: {e}"))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| format!("cannot switch {shown} to WAL: {e}"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("{shown} cannot use WAL (journal_mode is {mode})"));
    }
    let level = match sync {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", level)
        .map_err(|e| format!("cannot set synchronous on {shown}: {e}"))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| format!("cannot set a busy timeout on {shown}: {e}"))?;
    Ok(conn)
}

/// Runs until every `Store` handle is gone.
pub fn run(mut conn: Connection, rx: mpsc::Receiver<Job>, remember: usize) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let result = commit(&mut conn, &jobs, remember);
        if let Err(e) = &result {
            error!(error = %e, "cannot record the broker's state");
        }
        for job in jobs {
            if let Job::Sync(done) = job {
                let _ = done.send(result.clone());
            }
        }
    }
}

fn commit(conn: &mut Connection, jobs: &[Job], remember: usize) -> Result<(), String> {
    let ops = jobs.iter().filter_map(|j| match j {
        Job::Ops(ops) => Some(ops),
        Job::Sync(_) => None,
    });
    let mut n = 0usize;
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    let mut ended = false;
    for batch in ops {
        for op in batch {
            ended |= matches!(op, Op::End { .. });
            apply(&tx, op).map_err(|e| format!("{e} (in {})", op_name(op)))?;
            n += 1;
        }
    }
    if ended {
        // Only the last `remember` endings are kept, as in memory.
        tx.prepare_cached("DELETE FROM ended WHERE n <= (SELECT MAX(n) FROM ended) - ?1")
            .and_then(|mut s| s.execute(params![remember as i64]))
            .map_err(|e| e.to_string())?;
    }
    tx.commit().map_err(|e| e.to_string())?;
    debug!(ops = n, "state committed");
    Ok(())
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Park(_) => "park",
        Op::Claim { .. } => "claim",
        Op::Unclaim { .. } => "unclaim",
        Op::End { .. } => "end",
        Op::Delivered { .. } => "delivered",
        Op::Mail { .. } => "mail",
        Op::MailTaken { .. } => "mail taken",
        Op::MailTrim { .. } => "mail trim",
        Op::Client(_) => "client",
        Op::ClientGone { .. } => "client gone",
        Op::Owner { .. } => "owner",
        Op::OwnersReleased { .. } => "owners released",
    }
}

fn apply(tx: &Transaction<'_>, op: &Op) -> rusqlite::Result<()> {
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
        Op::End { .. } => end(tx, op),
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
    }
}

/// `Op::End`: the call leaves `live` and is remembered in `ended`, its outcome by name.
fn end(tx: &Transaction<'_>, op: &Op) -> rusqlite::Result<()> {
    let Op::End {
        id,
        how,
        agent,
        session,
        local_id,
        outcome,
    } = op
    else {
        return Ok(());
    };
    tx.prepare_cached("DELETE FROM live WHERE id = ?1")?
        .execute(params![id.as_str()])?;
    let outcome = outcome
        .as_ref()
        .map(|o| serde_json::to_string(o).unwrap_or_default());
    tx.prepare_cached(
        "INSERT OR REPLACE INTO ended (id, how, agent, session, local_id, outcome)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        id.as_str(),
        how.as_str(),
        agent,
        session,
        *local_id as i64,
        outcome
    ])
    .map(drop)
}

fn park(tx: &Transaction<'_>, c: &StoredCall) -> rusqlite::Result<()> {
    let r = &c.request;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO live (id, agent, session, local_id, grp, tool, arguments,
         timeout_s, deadline_ms, created_at, claimed_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
    ])
    .map(drop)
}
