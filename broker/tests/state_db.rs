//! `state/leo.db` at rest and when it fails: what a clean stop leaves on disk, a damaged file
//! refused at start, and a commit that fails answered as a failure, never as accepted.

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{App, agent, message, result_of, tool};

/// Whether any file of `state/` named `leo.db*` or `history.db*` holds `needle`, and which.
fn files_holding(home: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(home.join("state")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("leo.db") || name.starts_with("history.db")) {
            continue;
        }
        seen += 1;
        let bytes = std::fs::read(&path).unwrap();
        if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            found.push(name);
        }
    }
    assert!(seen >= 2, "leo.db and history.db exist");
    found
}

#[tokio::test]
async fn an_ended_calls_contents_are_not_on_disk_after_a_clean_stop() {
    // `history.store_content` is off by default; said here because the test is about it.
    let broker = Broker::start_with("history:\n  store_content: false\n").await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "ARGUMENT-d1st1nct-4417"}))
        .await;
    let id = app.next_request_id().await;
    app.serve(
        &id,
        json!([{"type": "text", "text": "RESULT-d1st1nct-4417"}]),
    )
    .await;
    let result = result_of(&mut ipc, 1).await;
    assert!(
        result.to_string().contains("RESULT-d1st1nct-4417"),
        "{result}"
    );
    // Read a message too: it is gone from the mailbox, so it must be gone from the disk.
    assert_eq!(
        message(&broker, "rocket", "MESSAGE-d1st1nct-4417")
            .await
            .status,
        200
    );
    let got = ipc.fetch_messages(2).await;
    assert!(got.to_string().contains("MESSAGE-d1st1nct-4417"), "{got}");

    let (status, home) = broker.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    for needle in [
        "ARGUMENT-d1st1nct-4417",
        "RESULT-d1st1nct-4417",
        "MESSAGE-d1st1nct-4417",
    ] {
        let found = files_holding(home.path(), needle);
        assert!(found.is_empty(), "{needle} is still in {found:?}");
    }
    // The WAL was checkpointed into the main file: it is gone or empty.
    let wal = home.path().join("state/leo.db-wal");
    assert!(std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0);
}

#[tokio::test]
async fn a_damaged_state_database_stops_start_naming_the_file() {
    let broker = Broker::start().await;
    let ipc = agent(&broker, "rocket").await;
    // Enough unread messages that the mailbox index spans pages of its own.
    for i in 0..600 {
        let text = format!("unread message number {i} with some words to fill a page");
        assert_eq!(message(&broker, "rocket", &text).await.status, 200);
    }
    ipc.close().await;
    let (status, home) = broker.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    let path = home.path().join("state/leo.db");
    damage_index(&path, "mail_agent");

    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    assert!(
        err.contains("state/leo.db") && err.contains("damaged"),
        "{err}"
    );
}

/// Overwrites half of `index`'s root page with garbage, as a bad sector would.
fn damage_index(path: &std::path::Path, index: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let page: i64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = ?1",
            [index],
            |r| r.get(0),
        )
        .unwrap();
    let size: i64 = conn
        .pragma_query_value(None, "page_size", |r| r.get(0))
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(path).unwrap();
    let start = ((page - 1) * size) as usize;
    bytes[start + 8..start + size as usize / 2].fill(0xA5);
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn a_message_whose_commit_fails_is_answered_500_and_not_kept() {
    let broker = Broker::start().await;
    let ipc = agent(&broker, "rocket").await;
    assert_eq!(message(&broker, "rocket", "before").await.status, 200);
    // From now on every insert into the mailbox table fails, as on a damaged page.
    let db = rusqlite::Connection::open(broker.home().join("state/leo.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER boom BEFORE INSERT ON mail BEGIN SELECT RAISE(ABORT, 'boom'); END;",
    )
    .unwrap();
    let r = message(&broker, "rocket", "never acknowledged").await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(r.body["code"], "internal", "{r:?}");
    // The file takes writes again (a full disk freed, say), but what the failed commit held
    // is lost: nothing after it is acknowledged until a restart, as its commit may hold a
    // change that needed the lost one.
    db.execute_batch("DROP TRIGGER boom;").unwrap();
    drop(db);
    let r = message(&broker, "rocket", "after").await;
    assert_eq!(r.status, 500, "{r:?}");
    drop(ipc);

    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let mut ipc = agent(&broker, "rocket").await;
    let got = ipc.fetch_messages(1).await;
    let texts: Vec<_> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts.len(), 1, "{got}");
    assert!(texts[0].ends_with("before"), "{got}");
}
