#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const SCHEMA: &[&str] = &["CREATE TABLE t (n INTEGER PRIMARY KEY, k TEXT NOT NULL);
     CREATE INDEX t_k ON t (k);"];

fn options(check: bool) -> Options {
    Options {
        full_sync: false,
        check,
    }
}

/// Overwrites the middle of `index`'s root page with garbage, as a bad sector or a stray
/// write would.
pub fn damage_index(path: &Path, index: &str) {
    let (page, size): (i64, i64) = {
        let conn = Connection::open(path).unwrap();
        let page = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = ?1",
                [index],
                |r| r.get(0),
            )
            .unwrap();
        let size = conn
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .unwrap();
        (page, size)
    };
    let mut bytes = std::fs::read(path).unwrap();
    let start = ((page - 1) * size) as usize;
    for b in &mut bytes[start + 8..start + size as usize / 2] {
        *b = 0xA5;
    }
    std::fs::write(path, bytes).unwrap();
}

fn filled(path: &Path, rows: usize) {
    let mut conn = open(path, options(false), SCHEMA).unwrap();
    let tx = conn.transaction().unwrap();
    for n in 0..rows {
        tx.execute("INSERT INTO t (k) VALUES (?1)", [format!("key-{n:08}")])
            .unwrap();
    }
    tx.commit().unwrap();
    checkpoint(&conn);
}

#[test]
fn a_damaged_index_page_is_refused_at_open_and_a_sound_file_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    filled(&path, 2000);
    open(&path, options(true), SCHEMA).unwrap();
    damage_index(&path, "t_k");
    // Opening without the check does not see it: only a read or write of the index would.
    open(&path, options(false), SCHEMA).unwrap();
    let e = open(&path, options(true), SCHEMA).unwrap_err();
    assert!(matches!(e, Error::Damaged(_)), "{e:?}");
    assert!(e.to_string().contains("damaged"), "{e}");
}

#[test]
fn deleted_rows_leave_the_file_and_the_wal_after_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let conn = open(&path, options(true), SCHEMA).unwrap();
    for n in 0..50 {
        conn.execute("INSERT INTO t (k) VALUES (?1)", [format!("keep-{n}")])
            .unwrap();
    }
    conn.execute("INSERT INTO t (k) VALUES ('SECRET-c0ffee')", [])
        .unwrap();
    conn.execute("DELETE FROM t WHERE k = 'SECRET-c0ffee'", [])
        .unwrap();
    checkpoint(&conn);
    let wal = std::fs::metadata(dir.path().join("x.db-wal"))
        .unwrap()
        .len();
    assert_eq!(wal, 0, "TRUNCATE empties the WAL");
    let main = std::fs::read(&path).unwrap();
    let needle = b"SECRET-c0ffee";
    assert!(!main.windows(needle.len()).any(|w| w == needle));
    assert!(main.windows(6).any(|w| w == b"keep-4"));
}

#[test]
fn a_newer_file_is_refused_and_an_older_one_migrated_in_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let two = [SCHEMA[0], "CREATE TABLE u (x);"];
    drop(open(&path, options(true), &two[..1]).unwrap());
    let conn = open(&path, options(true), &two).unwrap();
    let v: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, 2);
    drop(conn);
    let e = open(&path, options(true), &two[..1]).unwrap_err();
    assert!(matches!(e, Error::Newer { found: 2, known: 1 }), "{e:?}");
}

/// Writes one row of `bytes` per job, each batch in a transaction.
struct Rows;

impl writer::Batches for Rows {
    type Job = usize;

    fn batch(
        &mut self,
        conn: &mut Connection,
        jobs: Vec<usize>,
    ) -> (bool, std::ops::ControlFlow<writer::Done>) {
        let tx = conn.transaction().unwrap();
        for bytes in jobs {
            tx.execute("INSERT INTO t (k) VALUES (?1)", ["x".repeat(bytes)])
                .unwrap();
        }
        tx.commit().unwrap();
        (true, std::ops::ControlFlow::Continue(()))
    }
}

/// A writer on a new file at `dir/w.db` whose checkpoint thread waits `gap`, and its queue.
fn writer_on(
    dir: &Path,
    gap: Duration,
) -> (
    std::sync::mpsc::SyncSender<usize>,
    std::thread::JoinHandle<()>,
) {
    let conn = open(&dir.join("w.db"), options(false), SCHEMA).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let settings = writer::Settings {
        name: "test-writer",
        batch: 1,
        every: Duration::from_secs(3600),
        linger: Duration::ZERO,
        checkpoint_gap: gap,
    };
    (tx, writer::spawn(settings, conn, rx, Rows).unwrap())
}

/// Sends 400 rows of 16 KiB, a commit each (1,600 pages and more: past the automatic
/// checkpoint's mark of 1,000), and waits until another connection sees them all.
fn write_rows(dir: &Path, tx: &std::sync::mpsc::SyncSender<usize>) -> Connection {
    for _ in 0..400 {
        tx.send(16 << 10).unwrap();
    }
    let other = Connection::open(dir.join("w.db")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while other
        .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
        .unwrap()
        < 400
    {
        assert!(std::time::Instant::now() < deadline, "the rows never came");
        std::thread::sleep(Duration::from_millis(10));
    }
    other
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The writer's commits never checkpoint: with its checkpoint thread held back, the rows stay
/// in the WAL, past the 1,000 pages at which SQLite's automatic checkpoint would have copied
/// them into the file inside a commit.
#[test]
fn the_writers_commits_do_not_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, thread) = writer_on(dir.path(), Duration::from_secs(3600));
    let before = size(&dir.path().join("w.db"));
    let _other = write_rows(dir.path(), &tx);
    assert!(
        size(&dir.path().join("w.db-wal")) > 6 << 20,
        "the WAL was checkpointed"
    );
    assert_eq!(
        size(&dir.path().join("w.db")),
        before,
        "a commit checkpointed"
    );
    drop(tx);
    drop(_other);
    thread.join().unwrap();
    assert!(
        size(&dir.path().join("w.db")) > 6 << 20,
        "the last checkpoint at the stop"
    );
}

/// The checkpoint thread moves the WAL's pages into the file soon after the commits.
#[test]
fn the_checkpoint_thread_moves_the_wal_into_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, thread) = writer_on(dir.path(), Duration::from_millis(10));
    let _other = write_rows(dir.path(), &tx);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while size(&dir.path().join("w.db")) < 6 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing checkpointed the WAL"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(tx);
    thread.join().unwrap();
}
