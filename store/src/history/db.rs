//! `state/history.db`: the schema, its migrations, and the statements the writer runs
//! ([`Sqlite`], the history's [`Log`](super::Log) on this file).
//!
//! The schema version is SQLite's `PRAGMA user_version`. `MIGRATIONS` is append-only: entry
//! `n` takes a file from version `n` to `n + 1`, so an empty file runs them all and an older
//! file runs the ones it lacks. A file of a newer version than this broker knows is refused,
//! never guessed at: a downgrade must not silently drop what a newer broker wrote.

use std::path::Path;

use leo_protocol::history::{AuditEntry, CallApp, CallOutcome, EndedRequest};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::Error;
use super::chain::{self, Chained};
use crate::sqlite;

/// Each entry takes the file one version up. Never edit one; add another.
pub const MIGRATIONS: &[&str] = &[
    // 1: ended calls.
    "CREATE TABLE calls (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tool TEXT NOT NULL,
        grp TEXT NOT NULL,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        client_id TEXT,
        app_name TEXT,
        outcome TEXT NOT NULL,
        error_code TEXT,
        reason TEXT,
        created_at TEXT NOT NULL,
        claimed_at TEXT,
        ended_at TEXT NOT NULL,
        ended_ms INTEGER NOT NULL,
        wait_ms INTEGER,
        work_ms INTEGER,
        duration_ms INTEGER NOT NULL,
        arguments_bytes INTEGER NOT NULL,
        result_bytes INTEGER,
        arguments TEXT,
        result TEXT
    );
    CREATE INDEX calls_by_end ON calls (ended_ms);",
    // 2: the audit trail.
    "CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        principal TEXT NOT NULL,
        token_kind TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT,
        detail TEXT
    );
    CREATE INDEX audit_by_time ON audit (at_ms);",
    // 3: the audit trail's chain (`chain`): each entry's hash, and the hash of the one before.
    // Entries written before this have neither, and are not part of the chain.
    "ALTER TABLE audit ADD COLUMN prev BLOB;
    ALTER TABLE audit ADD COLUMN hash BLOB;",
];

/// The version this broker writes (the tests check a file against it).
#[cfg(test)]
fn current_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// Opens (creating, mode 0600) and migrates the database at `path`. It is not checked page
/// by page at start as `state/leo.db` is: it grows with the retention, and a damaged history
/// loses no accepted work (its failed writes are logged and dropped).
pub fn open(path: &Path) -> Result<Connection, sqlite::Error> {
    // WAL with NORMAL is crash-safe (a power cut may lose the last commits, never corrupt).
    let options = sqlite::Options {
        full_sync: false,
        check: false,
    };
    sqlite::open(path, options, MIGRATIONS)
}

/// One ended call as the writer stores it.
#[derive(Debug, Clone)]
pub struct CallRow {
    pub id: String,
    pub tool: String,
    pub group: String,
    pub agent: String,
    pub session: String,
    pub client_id: Option<String>,
    pub app_name: Option<String>,
    pub outcome: CallOutcome,
    pub error_code: Option<String>,
    pub reason: Option<String>,
    pub created_at: String,
    pub claimed_at: Option<String>,
    pub ended_at: String,
    pub ended_ms: i64,
    pub wait_ms: Option<u64>,
    pub work_ms: Option<u64>,
    pub duration_ms: u64,
    pub arguments_bytes: u64,
    pub result_bytes: Option<u64>,
    pub arguments: Option<String>,
    pub result: Option<String>,
}

/// Stores `row`; a second row with the same id is ignored (a call ends once).
pub fn insert_call(conn: &Connection, r: &CallRow) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO calls (id, tool, grp, agent, session, client_id, app_name,
            outcome, error_code, reason, created_at, claimed_at, ended_at, ended_ms, wait_ms,
            work_ms, duration_ms, arguments_bytes, result_bytes, arguments, result)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
            ?18, ?19, ?20, ?21)",
    )?
    .execute(params![
        r.id,
        r.tool,
        r.group,
        r.agent,
        r.session,
        r.client_id,
        r.app_name,
        r.outcome.as_str(),
        r.error_code,
        r.reason,
        r.created_at,
        r.claimed_at,
        r.ended_at,
        r.ended_ms,
        r.wait_ms,
        r.work_ms,
        r.duration_ms,
        r.arguments_bytes,
        r.result_bytes,
        r.arguments,
        r.result,
    ])
}

/// One audit entry as the writer stores it.
#[derive(Debug, Clone, Default)]
pub struct AuditRow {
    pub at: String,
    pub at_ms: i64,
    pub principal: String,
    pub token_kind: String,
    pub action: String,
    pub target: Option<String>,
    pub detail: Option<String>,
}

/// The hash the next audit entry chains to: the newest entry's, or [`chain::GENESIS`] when
/// there is none or it was written before the chain. Read inside the write's transaction.
pub fn audit_head(conn: &Connection) -> rusqlite::Result<Vec<u8>> {
    let head: Option<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    Ok(head.flatten().unwrap_or_else(|| chain::GENESIS.to_vec()))
}

/// Appends `r` after the entry whose hash is `prev`, inside a transaction that holds the
/// file's write lock; returns its hash.
pub fn insert_audit(conn: &Connection, prev: &[u8], r: &AuditRow) -> rusqlite::Result<Vec<u8>> {
    let hash = chain::link(prev, None, r);
    conn.prepare_cached(
        "INSERT INTO audit (at, at_ms, principal, token_kind, action, target, detail, prev, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        r.at,
        r.at_ms,
        r.principal,
        r.token_kind,
        r.action,
        r.target,
        r.detail,
        prev,
        hash,
    ])?;
    Ok(hash)
}

/// Appends one audit entry in its own transaction (a `leo` command's), under the file's write
/// lock, so it chains after whatever the broker wrote.
pub fn append_audit(conn: &Connection, r: &AuditRow) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let written = audit_head(conn).and_then(|prev| insert_audit(conn, &prev, r));
    match written {
        Ok(_) => sqlite::commit(conn),
        Err(e) => {
            sqlite::rollback(conn);
            Err(e)
        }
    }
}

/// Audit entries with their chain, oldest first, after `after` (`Log::audit_chain`).
pub fn audit_chain(conn: &Connection, after: u64, limit: u32) -> rusqlite::Result<Vec<Chained>> {
    let after = after.min(i64::MAX as u64) as i64;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, at, at_ms, principal, token_kind, action, target, detail, prev, hash
         FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit], |r| {
        Ok(Chained {
            seq: r.get(0)?,
            row: AuditRow {
                at: r.get(1)?,
                at_ms: r.get(2)?,
                principal: r.get(3)?,
                token_kind: r.get(4)?,
                action: r.get(5)?,
                target: r.get(6)?,
                detail: r.get(7)?,
            },
            instance: None,
            prev: r.get(8)?,
            hash: r.get(9)?,
        })
    })?;
    rows.collect()
}

/// What `GET …/requests?state=ended` asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallQuery {
    pub limit: u32,
    pub before: Option<u64>,
    pub tool: Option<String>,
    pub agent: Option<String>,
    pub outcome: Option<CallOutcome>,
}

/// Ended calls, newest first; `contents` includes the stored arguments and result.
pub fn list_calls(
    conn: &Connection,
    q: &CallQuery,
    contents: bool,
) -> rusqlite::Result<Vec<EndedRequest>> {
    let mut sql = String::from(
        "SELECT seq, id, tool, grp, agent, session, client_id, app_name, outcome, error_code,
            reason, created_at, claimed_at, ended_at, wait_ms, work_ms, duration_ms,
            arguments_bytes, result_bytes, arguments, result FROM calls WHERE 1",
    );
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    let mut add = |clause: &str, v: rusqlite::types::Value| {
        sql.push_str(clause);
        args.push(v);
    };
    if let Some(b) = q.before {
        add(" AND seq < ?", (b.min(i64::MAX as u64) as i64).into());
    }
    if let Some(t) = &q.tool {
        add(" AND tool = ?", t.clone().into());
    }
    if let Some(a) = &q.agent {
        add(" AND agent = ?", a.clone().into());
    }
    if let Some(o) = q.outcome {
        add(" AND outcome = ?", o.as_str().to_owned().into());
    }
    add(" ORDER BY seq DESC LIMIT ?", i64::from(q.limit).into());
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), |r| {
        let client_id: Option<String> = r.get(6)?;
        let outcome: String = r.get(8)?;
        let json = |i: usize| -> rusqlite::Result<Option<serde_json::Value>> {
            let text: Option<String> = r.get(i)?;
            Ok(text
                .filter(|_| contents)
                .and_then(|t| serde_json::from_str(&t).ok()))
        };
        Ok(EndedRequest {
            seq: r.get(0)?,
            id: r.get::<_, String>(1)?.into(),
            tool: r.get(2)?,
            group: r.get(3)?,
            agent: r.get(4)?,
            session: r.get(5)?,
            app: client_id.map(|client_id| CallApp {
                client_id: client_id.into(),
                name: r.get(7).ok().flatten(),
            }),
            outcome: CallOutcome::parse(&outcome).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    8,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?,
            error_code: r.get(9)?,
            reason: r.get(10)?,
            created_at: r.get(11)?,
            claimed_at: r.get(12)?,
            ended_at: r.get(13)?,
            wait_ms: r.get(14)?,
            work_ms: r.get(15)?,
            duration_ms: r.get(16)?,
            arguments_bytes: r.get(17)?,
            result_bytes: r.get(18)?,
            arguments: json(19)?,
            result: json(20)?,
            instance: None,
        })
    })?;
    rows.collect()
}

/// Audit entries, newest first.
pub fn list_audit(
    conn: &Connection,
    limit: u32,
    before: Option<u64>,
) -> rusqlite::Result<Vec<AuditEntry>> {
    let before = before.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    let mut stmt = conn.prepare_cached(
        "SELECT seq, at, principal, token_kind, action, target, detail FROM audit
         WHERE seq < ?1 ORDER BY seq DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![before, limit], |r| {
        Ok(AuditEntry {
            seq: r.get(0)?,
            at: r.get(1)?,
            principal: r.get(2)?,
            token_kind: r.get(3)?,
            action: r.get(4)?,
            target: r.get(5)?,
            detail: r.get(6)?,
            instance: None,
        })
    })?;
    rows.collect()
}

/// The history's statements on an open `state/history.db`.
pub struct Sqlite<'a>(pub &'a Connection);

impl super::Log for Sqlite<'_> {
    /// A row that fails alone is logged and skipped, the others written.
    fn write(&mut self, calls: &[CallRow], audits: &[AuditRow]) -> Result<Vec<bool>, Error> {
        // The writer may have begun the transaction already, to hold the write lock while
        // an audit entry lingered (`Batches::ordered`).
        // Under the write lock from the start, so the chain's head read below is still the
        // head when this batch's entries are appended (`leo` commands append too).
        let conn = self.0;
        if conn.is_autocommit() {
            conn.prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.execute([]))
                .map_err(sqlite::Error::doing("begin a transaction"))?;
        }
        let mut new = Vec::with_capacity(calls.len());
        for row in calls {
            new.push(match insert_call(conn, row) {
                Ok(n) => n > 0,
                Err(e) => {
                    tracing::warn!(error = %e, request = %row.id, "history: cannot write");
                    false
                }
            });
        }
        if !audits.is_empty() {
            let mut prev = match audit_head(conn) {
                Ok(head) => head,
                Err(e) => {
                    sqlite::rollback(conn);
                    return Err(sqlite::Error::doing("read the audit trail's head")(e).into());
                }
            };
            for row in audits {
                match insert_audit(conn, &prev, row) {
                    Ok(hash) => prev = hash,
                    Err(e) => tracing::warn!(error = %e, "history: cannot write an audit entry"),
                }
            }
        }
        sqlite::commit(conn).map_err(sqlite::Error::doing("commit"))?;
        Ok(new)
    }

    fn calls(&mut self, q: &CallQuery, contents: bool) -> Result<Vec<EndedRequest>, Error> {
        list_calls(self.0, q, contents)
            .map_err(|e| sqlite::Error::doing("read the history")(e).into())
    }

    fn audits(&mut self, limit: u32, before: Option<u64>) -> Result<Vec<AuditEntry>, Error> {
        list_audit(self.0, limit, before)
            .map_err(|e| sqlite::Error::doing("read the history")(e).into())
    }

    fn audit_chain(&mut self, after: u64, limit: u32) -> Result<Vec<Chained>, Error> {
        audit_chain(self.0, after, limit)
            .map_err(|e| sqlite::Error::doing("read the audit trail")(e).into())
    }

    fn prune(
        &mut self,
        table: Table,
        cutoff_ms: i64,
        max_rows: Option<u64>,
    ) -> Result<usize, Error> {
        prune(self.0, table, cutoff_ms, max_rows)
            .map_err(|e| sqlite::Error::doing("prune the history")(e).into())
    }

    fn count(&mut self, table: Table) -> Result<u64, Error> {
        count(self.0, table).map_err(|e| sqlite::Error::doing("count the history")(e).into())
    }

    fn per_minute(&mut self, since_ms: i64) -> Result<Vec<super::MinuteCount>, Error> {
        per_minute(self.0, since_ms)
            .map_err(|e| sqlite::Error::doing("count the history")(e).into())
    }
}

/// How many calls ended in each minute from `since_ms` on, by outcome (`Log::per_minute`).
pub fn per_minute(conn: &Connection, since_ms: i64) -> rusqlite::Result<Vec<super::MinuteCount>> {
    let mut stmt = conn.prepare_cached(
        "SELECT ended_ms / 60000, outcome, COUNT(*) FROM calls WHERE ended_ms >= ?1
         GROUP BY 1, 2",
    )?;
    let rows = stmt.query_map(params![since_ms], |r| {
        let outcome: String = r.get(1)?;
        let outcome = CallOutcome::parse(&outcome).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, Box::new(e))
        })?;
        Ok((r.get(0)?, outcome, r.get(2)?))
    })?;
    rows.collect()
}

/// How many rows `table` holds.
pub fn count(conn: &Connection, table: Table) -> rusqlite::Result<u64> {
    conn.query_row(&format!("SELECT COUNT(*) FROM {}", table.name()), [], |r| {
        r.get(0)
    })
}

/// The two logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Calls,
    Audit,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Calls => "calls",
            Table::Audit => "audit",
        }
    }

    fn time_column(self) -> &'static str {
        match self {
            Table::Calls => "ended_ms",
            Table::Audit => "at_ms",
        }
    }
}

/// Deletes rows older than `cutoff_ms` and all but the newest `max_rows`; returns how many
/// rows were deleted.
pub fn prune(
    conn: &Connection,
    table: Table,
    cutoff_ms: i64,
    max_rows: Option<u64>,
) -> rusqlite::Result<usize> {
    let (name, time) = (table.name(), table.time_column());
    let mut gone = conn.execute(
        &format!("DELETE FROM {name} WHERE {time} < ?1"),
        params![cutoff_ms],
    )?;
    if let Some(max) = max_rows {
        let edge: Option<i64> = conn
            .query_row(
                &format!("SELECT seq FROM {name} ORDER BY seq DESC LIMIT 1 OFFSET ?1"),
                params![max.min(i64::MAX as u64) as i64],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(edge) = edge {
            gone += conn.execute(
                &format!("DELETE FROM {name} WHERE seq <= ?1"),
                params![edge],
            )?;
        }
    }
    Ok(gone)
}

#[cfg(test)]
impl CallRow {
    /// A row of tool `t`, ended at 1 ms, for the tests of both databases.
    pub(crate) fn for_test(id: &str) -> CallRow {
        CallRow {
            id: id.into(),
            tool: "t".into(),
            group: String::new(),
            agent: String::new(),
            session: String::new(),
            client_id: None,
            app_name: None,
            outcome: CallOutcome::Result,
            error_code: None,
            reason: None,
            created_at: String::new(),
            claimed_at: None,
            ended_at: String::new(),
            ended_ms: 1,
            wait_ms: None,
            work_ms: None,
            duration_ms: 0,
            arguments_bytes: 0,
            result_bytes: None,
            arguments: None,
            result: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn version(conn: &Connection) -> u32 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    use leo_protocol::names::RequestId;

    fn row(id: &str) -> CallRow {
        CallRow::for_test(id)
    }

    #[test]
    fn an_empty_file_gets_every_migration_and_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        std::fs::write(&path, b"").unwrap();
        let conn = open(&path).unwrap();
        assert_eq!(version(&conn), current_version());
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let perms = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(perms & 0o777, 0o600);
        assert_eq!(insert_call(&conn, &row("r_1")).unwrap(), 1);
        assert_eq!(
            insert_call(&conn, &row("r_1")).unwrap(),
            0,
            "a call ends once"
        );
    }

    #[test]
    fn processes_opening_a_new_file_at_once_migrate_it_once() {
        // The broker and a `leo client add` may both find the file new.
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("history.db");
            let openers: Vec<_> = (0..4)
                .map(|_| {
                    let path = path.clone();
                    std::thread::spawn(move || open(&path).map(|c| version(&c)))
                })
                .collect();
            for opener in openers {
                assert_eq!(opener.join().unwrap().unwrap(), current_version());
            }
        }
    }

    #[test]
    fn a_row_with_an_outcome_no_version_wrote_fails_the_listing() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("history.db")).unwrap();
        insert_call(&conn, &row("r_1")).unwrap();
        let q = CallQuery {
            limit: 10,
            ..CallQuery::default()
        };
        assert_eq!(
            list_calls(&conn, &q, false).unwrap()[0].outcome,
            CallOutcome::Result
        );
        conn.execute("UPDATE calls SET outcome = 'internal'", [])
            .unwrap();
        // Read as an error, never shown as some other ending.
        let err = list_calls(&conn, &q, false).unwrap_err().to_string();
        assert!(err.contains("\"internal\" is not an outcome"), "{err}");
    }

    #[test]
    fn an_older_file_keeps_its_rows_and_gains_the_audit_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            insert_call(&conn, &row("r_old")).unwrap();
        }
        let conn = open(&path).unwrap();
        assert_eq!(version(&conn), current_version());
        let q = CallQuery {
            limit: 10,
            ..CallQuery::default()
        };
        let calls = list_calls(&conn, &q, false).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "r_old");
        assert_eq!(count(&conn, Table::Audit).unwrap(), 0);
    }

    fn audit_row(action: &str) -> AuditRow {
        AuditRow {
            action: action.into(),
            ..AuditRow::default()
        }
    }

    /// A file whose entries were written before the chain keeps them, counted as such; the
    /// entries after the migration chain from the start.
    #[test]
    fn entries_before_the_chain_are_counted_and_the_chain_starts_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(MIGRATIONS[1]).unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
            for action in ["old_1", "old_2"] {
                conn.execute(
                    "INSERT INTO audit (at, at_ms, principal, token_kind, action)
                     VALUES ('', 0, '', '', ?1)",
                    [action],
                )
                .unwrap();
            }
        }
        let conn = open(&path).unwrap();
        append_audit(&conn, &audit_row("new_1")).unwrap();
        super::super::Log::write(&mut Sqlite(&conn), &[], &[audit_row("new_2")]).unwrap();
        let verdict = chain::verify(&mut Sqlite(&conn)).unwrap();
        let chain::Verdict::Chains {
            entries,
            before_chain,
            head_seq,
            pruned,
            ..
        } = verdict
        else {
            panic!("{verdict:?}")
        };
        assert_eq!(
            (entries, before_chain, head_seq, pruned),
            (2, 2, Some(4), false)
        );
        let first: Vec<u8> = conn
            .query_row("SELECT prev FROM audit WHERE seq = 3", [], |r| r.get(0))
            .unwrap();
        assert_eq!(first, chain::GENESIS);
    }

    /// Processes appending at once (the broker's writer and `leo` commands) never fork the
    /// chain: each appends under the file's write lock.
    #[test]
    fn processes_appending_at_once_keep_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        drop(open(&path).unwrap());
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let conn = open(&path).unwrap();
                    for n in 0..10 {
                        let row = audit_row(&format!("w{w}_{n}"));
                        if n % 2 == 0 {
                            append_audit(&conn, &row).unwrap();
                        } else {
                            super::super::Log::write(&mut Sqlite(&conn), &[], &[row]).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let conn = open(&path).unwrap();
        let verdict = chain::verify(&mut Sqlite(&conn)).unwrap();
        assert!(
            matches!(verdict, chain::Verdict::Chains { entries: 40, .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_newer_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", current_version() + 1)
                .unwrap();
        }
        let e = open(&path).unwrap_err().to_string();
        assert!(e.contains("newer than this broker's"), "{e}");
    }

    #[test]
    fn prune_keeps_the_newest_rows_and_drops_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("h.db")).unwrap();
        for n in 0..10 {
            let mut r = row(&format!("r_{n}"));
            r.ended_ms = n;
            insert_call(&conn, &r).unwrap();
        }
        assert_eq!(prune(&conn, Table::Calls, 2, None).unwrap(), 2);
        assert_eq!(prune(&conn, Table::Calls, 0, Some(3)).unwrap(), 5);
        let q = CallQuery {
            limit: 10,
            ..CallQuery::default()
        };
        let ids: Vec<RequestId> = list_calls(&conn, &q, false)
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, ["r_9", "r_8", "r_7"]);
    }
}
