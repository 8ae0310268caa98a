#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use leo_protocol::content::AppError;
use serde_json::json;

use super::*;

fn call(id: &str, local_id: u64) -> StoredCall {
    StoredCall {
        request: Request {
            id: id.into(),
            agent: "claude".into(),
            session: "claude-1-ab".into(),
            group: "g".into(),
            tool: "t".into(),
            arguments: serde_json::value::to_raw_value(&json!({"a": [1, "two"]})).unwrap(),
            timeout_s: Some(600),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            owner: None,
            traceparent: None,
        },
        local_id,
        deadline_ms: Some(1_000),
        claimed_by: None,
        approval: None,
    }
}

fn msg(text: &str) -> Message {
    Message {
        text: text.into(),
        from: "ci".into(),
        at: "t".into(),
    }
}

async fn open(path: &Path) -> (Store, Restored) {
    Store::open(path, Synchronous::Normal, 4).unwrap()
}

#[tokio::test]
async fn an_empty_file_is_created_0600_and_reads_back_what_was_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    let (store, restored) = open(&path).await;
    assert!(restored.live.is_empty() && restored.mail.is_empty());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    store.send(vec![
        Op::Park(call("r1", 1)),
        Op::Park(call("r2", 2)),
        Op::Park(call("r3", 3)),
        Op::Claim {
            id: "r2".into(),
            by: "c_1".into(),
        },
        Op::End {
            id: "r3".into(),
            how: CallOutcome::Timeout,
            agent: "claude".into(),
            session: "claude-1-ab".into(),
            local_id: 3,
            outcome: Some(RawOutcome::Error {
                error: AppError {
                    code: "timeout".into(),
                    message: "m".into(),
                },
            }),
        },
        Op::Mail {
            agent: "claude".into(),
            message: msg("one"),
        },
        Op::Mail {
            agent: "claude".into(),
            message: msg("two"),
        },
        Op::Mail {
            agent: "other".into(),
            message: msg("x"),
        },
        Op::MailTaken {
            agent: "other".into(),
        },
    ]);
    store.committed().await.unwrap();
    for f in ["leo.db-wal", "leo.db-shm"] {
        let mode = std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    drop(store);

    let (_store, restored) = open(&path).await;
    let mut r2 = call("r2", 2);
    r2.claimed_by = Some("c_1".into());
    assert_eq!(restored.live, vec![call("r1", 1), r2]);
    assert_eq!(restored.ended.len(), 1);
    assert_eq!(restored.ended[0].how, CallOutcome::Timeout);
    assert!(
        restored.ended[0]
            .outcome
            .as_deref()
            .unwrap()
            .contains("timeout")
    );
    let texts: Vec<_> = restored
        .mail
        .iter()
        .map(|(a, m)| (a.as_str(), m.text.as_str()))
        .collect();
    assert_eq!(texts, [("claude", "one"), ("claude", "two")]);
}

fn ended(id: &str, local_id: u64) -> Op {
    Op::End {
        id: id.into(),
        how: CallOutcome::Result,
        agent: "claude".into(),
        session: "claude-1-ab".into(),
        local_id,
        outcome: None,
    }
}

/// A batch that parks and ends a call writes its ending only; one that ends a call an earlier
/// batch parked still removes its `live` row.
#[tokio::test]
async fn a_call_parked_and_ended_in_one_batch_leaves_the_file_as_if_each_change_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    let (store, _) = open(&path).await;
    store.send(vec![Op::Park(call("r1", 1))]);
    store.committed().await.unwrap();
    let claim = |id: &str| Op::Claim {
        id: id.into(),
        by: "c_1".into(),
    };
    store.send(vec![Op::Park(call("r2", 2)), claim("r2"), ended("r2", 2)]);
    store.send(vec![claim("r1"), ended("r1", 1), Op::Park(call("r3", 3))]);
    store.committed().await.unwrap();
    drop(store);
    let (_s, restored) = open(&path).await;
    assert_eq!(restored.live, vec![call("r3", 3)]);
    let ids: Vec<_> = restored.ended.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["r2", "r1"]);
}

#[tokio::test]
async fn endings_are_bounded_and_delivered_outcomes_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    let (store, _) = open(&path).await;
    for i in 0..10u64 {
        store.send(vec![Op::End {
            id: format!("r{i}").into(),
            how: CallOutcome::Result,
            agent: "a".into(),
            session: "s".into(),
            local_id: i,
            outcome: Some(RawOutcome::Content {
                content: vec![],
                structured_content: None,
            }),
        }]);
    }
    store.send(vec![Op::Delivered { id: "r9".into() }]);
    for i in 0..5 {
        store.send(vec![Op::Mail {
            agent: "a".into(),
            message: msg(&i.to_string()),
        }]);
    }
    store.send(vec![Op::MailTrim {
        agent: "a".into(),
        keep: 2,
    }]);
    store.committed().await.unwrap();
    drop(store);
    let (_s, restored) = open(&path).await;
    let ids: Vec<_> = restored.ended.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["r6", "r7", "r8", "r9"], "the last `remember`");
    assert!(restored.ended[2].outcome.is_some());
    assert!(restored.ended[3].outcome.is_none());
    let texts: Vec<_> = restored.mail.iter().map(|(_, m)| m.text.as_str()).collect();
    assert_eq!(texts, ["3", "4"]);
}

#[test]
fn an_older_file_is_migrated_and_a_newer_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    {
        // A file as the first schema left it, with a live call in it.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(schema::MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO live (id, agent, session, local_id, grp, tool, arguments, created_at)
             VALUES ('r1', 'a', 's', 7, 'g', 't', '{}', 'now')",
            [],
        )
        .unwrap();
    }
    let (store, restored) = Store::open(&path, Synchronous::Full, 4).unwrap();
    assert_eq!(restored.live.len(), 1);
    assert_eq!(restored.live[0].local_id, 7);
    assert!(restored.clients.is_empty(), "the newer tables exist");
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, schema::current());
    conn.pragma_update(None, "user_version", schema::current() + 1)
        .unwrap();
    drop(conn);
    let err = Store::open(&path, Synchronous::Normal, 4)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("newer than this broker's")
            && err.contains(&format!("version {}", schema::current() + 1)),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    std::fs::write(
        &path,
        b"not a database, just some text that is long enough to matter",
    )
    .unwrap();
    let err = Store::open(&path, Synchronous::Normal, 4).unwrap_err();
    let err = leo_protocol::chain::error_chain(&err);
    assert!(err.contains("not a database"), "{err}");
}

#[tokio::test]
async fn a_damaged_index_page_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    {
        let (store, _) = Store::open(&path, Synchronous::Normal, 4).unwrap();
        let ops = (0..3000)
            .map(|i| Op::Mail {
                agent: format!("agent-{}", i % 7),
                message: msg(&format!("message {i}")),
            })
            .collect();
        store.send(ops);
        store.close().await;
    }
    crate::sqlite::tests::damage_index(&path, "mail_agent");
    let err = Store::open(&path, Synchronous::Normal, 4).unwrap_err();
    let err = leo_protocol::chain::error_chain(&err);
    assert!(err.contains("damaged"), "{err}");
}

/// Makes every insert into `table` fail from now on, through a second connection, as a
/// damaged page or a full disk would.
fn break_table(path: &Path, table: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "CREATE TRIGGER boom BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'boom'); END;"
    ))
    .unwrap();
}

#[tokio::test]
async fn a_failed_commit_is_never_acknowledged_nor_any_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    let (store, _) = open(&path).await;
    store.send(vec![Op::Park(call("r1", 1))]);
    store.committed().await.unwrap();
    break_table(&path, "mail");

    // Every waiter of the batch holding the failed change gets the error (or, queued after
    // it, the error of a later batch)...
    store.send(vec![
        Op::Claim {
            id: "r1".into(),
            by: "c_1".into(),
        },
        Op::Mail {
            agent: "a".into(),
            message: msg("lost"),
        },
    ]);
    let waiters = [store.committed(), store.committed(), store.committed()];
    for w in waiters {
        let e = w.await.unwrap_err();
        assert!(leo_protocol::chain::error_chain(&e).contains("boom"), "{e}");
    }
    // ...and so does every later one, even one whose own batch would commit: the changes
    // lost with the failed commit came before it.
    store.send(vec![Op::Delivered { id: "r1".into() }]);
    let e = store.committed().await.unwrap_err();
    assert!(matches!(e, Error::AfterFailure(_)), "{e:?}");
    assert!(store.committed().await.is_err());
    store.close().await;

    // Nothing of the failed batch or after it is on disk: the claim is not there.
    let (_s, restored) = Store::open(&path, Synchronous::Normal, 4).unwrap();
    assert_eq!(restored.live, vec![call("r1", 1)]);
    assert!(restored.mail.is_empty());
}

#[tokio::test]
async fn a_clean_close_leaves_no_ended_contents_in_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    let (store, _) = open(&path).await;
    let mut secret = call("r1", 1);
    secret.request.arguments =
        serde_json::value::to_raw_value(&json!({"q": "ARG-5ecret-77"})).unwrap();
    store.send(vec![Op::Park(secret), Op::Park(call("r2", 2))]);
    store.committed().await.unwrap();
    store.send(vec![
        Op::End {
            id: "r1".into(),
            how: CallOutcome::Result,
            agent: "claude".into(),
            session: "claude-1-ab".into(),
            local_id: 1,
            outcome: Some(RawOutcome::Error {
                error: AppError {
                    code: "x".into(),
                    message: "RESULT-5ecret-77".into(),
                },
            }),
        },
        Op::Mail {
            agent: "a".into(),
            message: msg("MAIL-5ecret-77"),
        },
    ]);
    store.committed().await.unwrap();
    store.send(vec![
        Op::Delivered { id: "r1".into() },
        Op::MailTaken { agent: "a".into() },
    ]);
    store.close().await;
    let mut files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        files += 1;
        for needle in ["ARG-5ecret-77", "RESULT-5ecret-77", "MAIL-5ecret-77"] {
            let needle = needle.as_bytes();
            assert!(!bytes.windows(needle.len()).any(|w| w == needle));
        }
    }
    assert!(files >= 1);
    let (_s, restored) = Store::open(&path, Synchronous::Normal, 4).unwrap();
    assert_eq!(restored.live, vec![call("r2", 2)], "what is live stays");
}

/// Not a test: what `secure_delete` and the start's `quick_check` cost, on this machine and
/// build. `cargo test -p leo-broker --lib store::tests::measure -- --ignored --nocapture`
#[test]
#[ignore = "a measurement"]
#[allow(clippy::print_stdout)]
fn measure_secure_delete_and_quick_check() {
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let options = crate::sqlite::Options {
        full_sync: false,
        check: false,
    };
    let calls = 2000u64;
    for round in 0..2 {
        for secure in ["OFF", "ON"] {
            let path = dir.path().join(format!("{secure}{round}.db"));
            let mut conn = crate::sqlite::open(&path, options, schema::MIGRATIONS).unwrap();
            conn.pragma_update(None, "secure_delete", secure).unwrap();
            let t = Instant::now();
            for n in 0..calls {
                let id = format!("r{n}");
                let steps = [
                    vec![Op::Park(call(&id, n))],
                    vec![
                        Op::Claim {
                            id: id.clone(),
                            by: "c".into(),
                        },
                        Op::End {
                            id: id.clone().into(),
                            how: CallOutcome::Result,
                            agent: "a".into(),
                            session: "s".into(),
                            local_id: n,
                            outcome: Some(RawOutcome::Error {
                                error: AppError {
                                    code: "x".into(),
                                    message: "y".repeat(100),
                                },
                            }),
                        },
                    ],
                    vec![Op::Delivered { id }],
                ];
                for ops in steps {
                    write::commit(&mut conn, &ops, 4096).unwrap();
                }
            }
            let per = t.elapsed().as_micros() as f64 / calls as f64;
            println!("secure_delete={secure} round {round}: {per:.1} µs per call (3 commits)");
        }
    }
    let path = dir.path().join("big.db");
    let mut conn = crate::sqlite::open(&path, options, schema::MIGRATIONS).unwrap();
    let ops: Vec<Op> = (0..100_000u64)
        .map(|n| Op::Park(call(&format!("req_{n:08}"), n)))
        .chain((0..100_000u64).map(|n| Op::Mail {
            agent: format!("agent-{}", n % 50),
            message: msg(&format!(
                "an unread message, number {n}, of about eighty bytes"
            )),
        }))
        .collect();
    write::commit(&mut conn, &ops, 4096).unwrap();
    crate::sqlite::checkpoint(&conn);
    drop(conn);
    let size = std::fs::metadata(&path).unwrap().len();
    for _ in 0..3 {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let t = Instant::now();
        crate::sqlite::quick_check(&conn).unwrap();
        println!(
            "quick_check of {} MiB (100k live calls, 100k messages): {} ms",
            size >> 20,
            t.elapsed().as_millis()
        );
    }
}

/// Stores an ending with `how` spelled as given, as an earlier version (or a stranger) wrote it.
async fn ended_spelled(path: &Path, how: &str) {
    let (store, _) = open(path).await;
    store.send(vec![Op::End {
        id: "r1".into(),
        how: CallOutcome::Error,
        agent: "a".into(),
        session: "s".into(),
        local_id: 1,
        outcome: None,
    }]);
    store.committed().await.unwrap();
    store.close().await;
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute("UPDATE ended SET how = ?1 WHERE id = 'r1'", [how])
        .unwrap();
}

#[tokio::test]
async fn an_ending_reads_back_in_either_spelling_and_an_unknown_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    // Earlier versions wrote an app's error as `app_error`: such a file still opens.
    ended_spelled(&path, "app_error").await;
    let (store, restored) = open(&path).await;
    assert_eq!(restored.ended[0].how, CallOutcome::Error);
    store.close().await;
    ended_spelled(&path, "error").await;
    let (store, restored) = open(&path).await;
    assert_eq!(restored.ended[0].how, CallOutcome::Error);
    store.close().await;
    // An outcome no version wrote is an error, not a guess.
    ended_spelled(&path, "internal").await;
    let err = Store::open(&path, Synchronous::Normal, 4).err().unwrap();
    let err = leo_protocol::chain::error_chain(&err);
    assert!(err.contains("\"internal\" is not an outcome"), "{err}");
}

/// A change PostgreSQL cannot hold (a U+0000 in a text column, which the edges refuse) costs
/// its batch's waiters an error, never the store: the rest of its batch is written, and every
/// later change is written and acknowledged as usual.
#[tokio::test]
async fn postgres_drops_a_change_it_cannot_hold_and_keeps_writing() {
    let Some(db) = leo_testkit::postgres::database().await else {
        return;
    };
    let (store, _) = Store::open_postgres(
        &postgres::Database::open(&db.url).unwrap(),
        postgres::Settings::for_test(),
    )
    .unwrap();
    let mail = |agent: &str, text: &str| Op::Mail {
        agent: agent.into(),
        message: msg(text),
    };
    store.send(vec![
        mail("a", "before"),
        mail("a", "nul\0text"),
        mail("a", "after"),
    ]);
    let refused = store.committed().await.unwrap_err();
    assert!(
        matches!(refused, Error::Database(ref e) if e.is_data()),
        "{refused:?}"
    );
    let mut bad = call("r_bad", 1);
    bad.request.session = "nul\0sess".into();
    store.send(vec![Op::Park(call("r1", 1))]);
    store.committed().await.unwrap();
    store.send(vec![Op::Park(bad)]);
    assert!(store.committed().await.is_err());
    store.send(vec![mail("b", "later"), Op::Park(call("r2", 2))]);
    store.committed().await.unwrap();
    let pg = db.client().await;
    let column = async |sql: &str| -> Vec<String> {
        let rows = pg.query(sql, &[]).await.unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    };
    let texts = column("SELECT text FROM mail ORDER BY n").await;
    assert_eq!(texts, ["before", "after", "later"]);
    assert_eq!(
        column("SELECT id FROM live ORDER BY id").await,
        ["r1", "r2"]
    );
    store.close().await;
}

#[tokio::test]
async fn an_approval_and_its_edited_arguments_read_back_with_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leo.db");
    let (store, _) = open(&path).await;
    let mut awaiting = call("r1", 1);
    awaiting.approval = Some(r#"{"state":"awaiting"}"#.into());
    store.send(vec![
        Op::Park(awaiting.clone()),
        Op::Park(call("r2", 2)),
        Op::Approval {
            id: "r2".into(),
            approval: r#"{"state":"approved","edited":true}"#.into(),
            arguments: Some(r#"{"a":2}"#.into()),
        },
        // Parked and ended in one batch: its approval has no row to change.
        Op::Park(call("r3", 3)),
        Op::Approval {
            id: "r3".into(),
            approval: "{}".into(),
            arguments: None,
        },
        Op::End {
            id: "r3".into(),
            how: CallOutcome::Cancelled,
            agent: "claude".into(),
            session: "claude-1-ab".into(),
            local_id: 3,
            outcome: None,
        },
    ]);
    store.committed().await.unwrap();
    drop(store);

    let (_store, restored) = open(&path).await;
    assert_eq!(restored.live.len(), 2);
    assert_eq!(restored.live[0], awaiting);
    let r2 = &restored.live[1];
    assert_eq!(
        r2.approval.as_deref(),
        Some(r#"{"state":"approved","edited":true}"#)
    );
    assert_eq!(r2.request.arguments.get(), r#"{"a":2}"#);
}
