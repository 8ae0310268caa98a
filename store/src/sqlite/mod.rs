//! The one SQLite layer under `state/leo.db` (the live state, `store`) and `state/history.db`
//! (the history and the audit trail, `history`).
//!
//! Both files are kept the same way, so the rules are written here once: the file is created
//! 0600 (SQLite gives its `-wal` and `-shm` files the main file's mode), switched to WAL (retried
//! on `SQLITE_BUSY`, which SQLite returns at once when several processes open a new file), its
//! schema checked and migrated under `BEGIN IMMEDIATE` (append-only migrations numbered by
//! `PRAGMA user_version`; a newer file is refused, never guessed at), optionally checked page by
//! page (`PRAGMA quick_check`), and written with `secure_delete` on so deleted rows do not
//! linger in free space. One writer thread owns each connection (`writer`): it commits what has
//! queued in one transaction, checkpoints the WAL into the main file (`TRUNCATE`) on a period
//! and when it stops, so what was deleted leaves the WAL too.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{ErrorCode, TransactionBehavior};
use tracing::{debug, warn};

pub mod writer;

/// The connection a [`writer::Batches`] writes on, named here so the broker's history (the
/// one user outside this crate) needs no SQLite crate of its own.
pub use rusqlite::Connection;

/// How long a statement waits for another connection's lock, and the WAL switch retries.
const BUSY: Duration = Duration::from_secs(5);

/// Why a database could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot create the file")]
    Create(#[source] std::io::Error),
    #[error("cannot {doing}")]
    Sqlite {
        doing: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot use WAL (journal_mode is {0})")]
    NotWal(String),
    #[error(
        "the database has schema version {found}, newer than this broker's {known}; it was \
         written by a newer leo, so run that one (or move the file away to start empty)"
    )]
    Newer { found: u32, known: u32 },
    #[error("migration to version {to} failed")]
    Migration {
        to: u32,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the database is damaged ({0}); move it away with its -wal and -shm files to start \
         empty, or recover what it holds with `sqlite3 FILE .recover`"
    )]
    Damaged(String),
    #[error("cannot start the writer thread")]
    Thread(#[source] std::io::Error),
}

impl Error {
    /// Wraps a rusqlite error with what was being done.
    pub fn doing(doing: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
        move |source| Error::Sqlite { doing, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a file is opened.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `PRAGMA synchronous`: `NORMAL` survives a crash, `FULL` a power loss too.
    pub full_sync: bool,
    /// Run `PRAGMA quick_check` after migrating and refuse a damaged file.
    pub check: bool,
}

/// Opens (creating, mode 0600) the database at `path`, in WAL mode, with `secure_delete`, and
/// brings its schema to `migrations.len()`.
pub fn open(path: &Path, options: Options, migrations: &[&str]) -> Result<Connection> {
    create_private(path)?;
    let mut conn = Connection::open(path).map_err(Error::doing("open the file"))?;
    conn.busy_timeout(BUSY)
        .map_err(Error::doing("set a busy timeout"))?;
    to_wal(&conn)?;
    let level = if options.full_sync { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", level)
        .map_err(Error::doing("set synchronous"))?;
    // Deleted rows are overwritten with zeros (in the page and on the free list), so an
    // ended call's arguments do not stay in the file once a checkpoint has moved the page.
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(Error::doing("set secure_delete"))?;
    migrate(&mut conn, migrations)?;
    if options.check {
        quick_check(&conn)?;
    }
    Ok(conn)
}

/// Begins a transaction. `BEGIN` and `COMMIT` are prepared once per connection: parsed at each
/// transaction (`execute_batch`, as rusqlite's `Transaction` does), they cost about 3,000
/// instructions each (bench/callgrind.sh), and a relayed call makes two transactions.
pub fn begin(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("BEGIN")?.execute([]).map(drop)
}

/// Commits the transaction [`begin`] began; if that fails, rolls it back, so the connection is
/// never left inside a transaction.
pub fn commit(conn: &Connection) -> rusqlite::Result<()> {
    let done = conn
        .prepare_cached("COMMIT")
        .and_then(|mut s| s.execute([]).map(drop));
    if done.is_err() {
        rollback(conn);
    }
    done
}

/// Rolls back the transaction under way, if any (after a failed statement).
pub fn rollback(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(e) = conn.execute_batch("ROLLBACK")
    {
        warn!(error = %e, "cannot roll back");
    }
}

/// Creates the file with mode 0600 if it is missing, and tightens one that is looser.
fn create_private(path: &Path) -> Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(Error::Create)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(Error::Create)
}

/// Switches the file to WAL. When several processes open a new file at once, SQLite refuses
/// the switch with `SQLITE_BUSY` at once rather than waiting for the busy timeout, so the
/// switch is retried for as long as that timeout would have waited.
fn to_wal(conn: &Connection) -> Result<()> {
    let deadline = Instant::now() + BUSY;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => return Err(Error::NotWal(mode)),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::DatabaseBusy && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(source) => {
                return Err(Error::Sqlite {
                    doing: "switch to WAL",
                    source,
                });
            }
        }
    }
}

/// Brings `conn` to version `migrations.len()`: entry `i` takes a file from version `i` to
/// `i + 1`. The version is read under the write lock (`BEGIN IMMEDIATE`): the broker and a
/// `leo` command may open a new file at once, and the second must see the first one's
/// migration rather than run it again. The missing migrations run in one transaction.
pub fn migrate(conn: &mut Connection, migrations: &[&str]) -> Result<()> {
    let known = migrations.len() as u32;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(Error::doing("start the migration"))?;
    let found: u32 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(Error::doing("read the schema version"))?;
    if found > known {
        return Err(Error::Newer { found, known });
    }
    if found == known {
        return Ok(());
    }
    for (i, sql) in migrations.iter().enumerate().skip(found as usize) {
        tx.execute_batch(sql).map_err(|source| Error::Migration {
            to: i as u32 + 1,
            source,
        })?;
    }
    tx.pragma_update(None, "user_version", known)
        .map_err(Error::doing("write the schema version"))?;
    tx.commit().map_err(Error::doing("commit the migration"))
}

/// `PRAGMA quick_check`: every page, cell and free-list entry is well formed (it skips only
/// the comparison of each index with its table, which `integrity_check` adds).
pub fn quick_check(conn: &Connection) -> Result<()> {
    let started = Instant::now();
    let mut s = conn
        .prepare("PRAGMA quick_check(5)")
        .map_err(Error::doing("check the file"))?;
    let found: Vec<String> = s
        .query_map([], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(Error::doing("check the file"))?;
    debug!(took_ms = started.elapsed().as_millis(), "quick_check");
    match found.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        _ => Err(Error::Damaged(found.join("; "))),
    }
}

/// Moves every committed page from the WAL into the main file and truncates the WAL to zero
/// bytes. A reader of an older snapshot (a `sqlite3` shell, say) makes it wait up to the busy
/// timeout, then it is left for the next time and logged.
pub fn checkpoint(conn: &Connection) {
    let got = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
    });
    match got {
        Ok((0, _)) => debug!("checkpointed"),
        Ok((_, frames)) => warn!(frames, "checkpoint blocked by a reader; retried later"),
        Err(e) => warn!(error = %e, "cannot checkpoint"),
    }
}

#[cfg(test)]
pub(crate) mod tests;
