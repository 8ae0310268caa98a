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
