//! The PostgreSQL store (`store.url`) on a real server (`leo_testkit::postgres`, a database
//! per test): the live state is in the database and survives a SIGKILL, a newer schema is
//! refused at start, a bad URL too, and an outage refuses work with `503 store_unavailable`
//! until the database is back, when the broker resumes by itself and loses nothing it had
//! acknowledged. The durability tests of `leo-mcp` (`mcp-sidecar/tests/durable.rs`) run on
//! PostgreSQL too.

use leo_testkit::postgres::{Throwaway, database, store_config};
use leo_testkit::{Broker, WAIT};
use serde_json::json;

use crate::support::{App, agent, eventually, message, outcome_code, result_of, tool};

fn text(t: &str) -> serde_json::Value {
    json!([{"type": "text", "text": t}])
}

/// The outcome of call `id`, keeping the result frames of other calls read meanwhile.
async fn outcome(
    ipc: &mut leo_testkit::Ipc,
    seen: &mut std::collections::HashMap<u64, serde_json::Value>,
    id: u64,
) -> serde_json::Value {
    loop {
        if let Some(o) = seen.remove(&id) {
            return o;
        }
        let f = ipc.recv_of("result").await;
        seen.insert(f["id"].as_u64().unwrap(), f["outcome"].clone());
    }
}

#[tokio::test]
async fn the_live_state_is_in_postgres_and_survives_a_kill() {
    let Some(db) = database().await else { return };
    let broker = Broker::start_with(&db.config()).await;
    let ipc = agent(&broker, "rocket").await;
    assert_eq!(
        message(&broker, "rocket", "kept in postgres").await.status,
        200
    );
    let pg = db.client().await;
    let row = pg.query_one("SELECT text FROM mail", &[]).await.unwrap();
    assert!(row.get::<_, String>(0).ends_with("kept in postgres"));
    assert!(
        !broker.home().join("state/leo.db").exists(),
        "no SQLite file beside a PostgreSQL store"
    );
    // The instance is recorded under the id kept in its home.
    let id = std::fs::read_to_string(broker.home().join("state/instance-id")).unwrap();
    let rows = pg
        .query("SELECT id, pid FROM instances", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let recorded: String = rows[0].get(0);
    assert!(
        id.trim().starts_with(&recorded["i_".len()..]),
        "{recorded} from {id}"
    );
    assert_eq!(rows[0].get::<_, i64>(1), i64::from(broker.pid()));
    drop(ipc);

    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let mut ipc = agent(&broker, "rocket").await;
    let got = ipc.fetch_messages(1).await;
    assert_eq!(got["messages"].as_array().unwrap().len(), 1, "{got}");
    let again = pg.query("SELECT id FROM instances", &[]).await.unwrap();
    assert_eq!(again.len(), 1, "the same instance after a restart");
    // The server's notices of a restart (`relation … already exists, skipping`) are its
    // chatter: logged at DEBUG, never at INFO.
    let logs = logs_of(broker.home());
    let notices: Vec<&str> = logs.lines().filter(|l| l.contains("NOTICE")).collect();
    assert!(notices.iter().all(|l| l.contains("DEBUG")), "{notices:#?}");
}

/// A definition agents were offered is the database's: an instance killed and started again
/// (or a new leader) holds a changed one back and remembers an approval.
#[tokio::test]
async fn pinning_outlives_a_killed_instance() {
    let Some(db) = database().await else { return };
    crate::scope::pinning_outlives_kills(&format!("{}{}", crate::scope::PIN, db.config())).await;
}

#[tokio::test]
async fn a_schema_newer_than_the_broker_is_refused_at_start() {
    let Some(db) = database().await else { return };
    let broker = Broker::start_with(&db.config()).await;
    let (status, home) = broker.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    let pg = db.client().await;
    pg.execute("UPDATE leo_schema SET version = version + 1", &[])
        .await
        .unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    assert!(err.contains("newer than this broker's"), "{err}");
    // Put back, the database opens again: the refusal changed nothing.
    pg.execute("UPDATE leo_schema SET version = version - 1", &[])
        .await
        .unwrap();
    let broker = Broker::start_in(home).await;
    assert_eq!(broker.http().get("/api/v1/status").await.status, 200);
}

#[tokio::test]
async fn a_store_url_that_is_not_postgres_is_refused_at_start() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        store_config("mysql://h/db"),
    )
    .unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    assert!(
        err.contains("config.yaml: store.url: must be a postgres://"),
        "{err}"
    );
    // From LEO_STORE_URL, the variable is named, not a config.yaml that does not exist.
    let home = tempfile::tempdir().unwrap();
    for args in [&["broker", "--port", "0"][..], &["agent", "list"]] {
        let out = std::process::Command::new(leo_testkit::bin("leo"))
            .args(args)
            .env("LEO_HOME", home.path())
            .env("LEO_STORE_URL", "mysql://h/db")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(
            said.contains("LEO_STORE_URL must be a postgres://") && !said.contains("config.yaml"),
            "{args:?}: {said}"
        );
    }
    // A PostgreSQL URL that does not answer is named by its variable too.
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .args(["agent", "list"])
        .env("LEO_HOME", home.path())
        .env("LEO_STORE_URL", "postgres://leo@127.0.0.1:1/none")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.starts_with("leo: LEO_STORE_URL (PostgreSQL): "),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_answered_503_and_the_broker_resumes_by_itself() {
    // A server of its own, since this test stops it.
    let Some(server) = Throwaway::start().await else {
        return;
    };
    let db = server.database().await;
    let broker = Broker::start_with(&db.config()).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let before = app.next_request_id().await;
    app.claim_ok(&before).await;

    server.stop();
    // The first operation after the stop may find out through its own commit; either way
    // it is refused, and so is everything after it while the database is away.
    let first = app.answer(&before, text("during the outage")).await;
    assert_eq!(first.code(503), "store_unavailable", "{first:?}");
    let r = message(&broker, "rocket", "refused").await;
    assert_eq!(r.code(503), "store_unavailable", "{r:?}");
    ipc.call(2, "wait", json!({"n": 2})).await;
    let mut seen = std::collections::HashMap::new();
    let refused = outcome(&mut ipc, &mut seen, 2).await;
    assert_eq!(outcome_code(&refused), "store_unavailable", "{refused}");
    // A result the outage caught in flight is kept to be written once the database is back,
    // and its frame waits for that commit: the agent, which got the later refusal, has none.
    assert!(
        !seen.contains_key(&1),
        "a result frame before its commit: {seen:?}"
    );

    server.start_again().await;
    // The broker finds the database back by itself; work is accepted again.
    eventually(|| async { message(&broker, "rocket", "after").await.status == 200 }).await;
    // The result refused during the outage is posted again and accepted once.
    let again = app.answer(&before, text("after the outage")).await;
    let settled = if again.status == 200 {
        "after the outage"
    } else {
        assert_eq!(again.code(409), "already_settled", "{again:?}");
        "during the outage"
    };
    let first = outcome(&mut ipc, &mut seen, 1).await;
    assert_eq!(first["content"][0]["text"], settled, "{first}");
    ipc.call(3, "wait", json!({"n": 3})).await;
    let id = app.next_request_id().await;
    app.serve(&id, text("three")).await;
    let three = outcome(&mut ipc, &mut seen, 3).await;
    assert_eq!(three["content"][0]["text"], "three", "{three}");

    // What was acknowledged is in the database: a restart on it finds the messages.
    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let mut ipc = agent(&broker, "rocket").await;
    let got = ipc.fetch_messages(9).await;
    let texts: Vec<String> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(texts.iter().any(|t| t.ends_with("after")), "{got}");
    assert!(!texts.iter().any(|t| t.ends_with("refused")), "{got}");
    drop(db);
}

/// The text of every stderr log a broker started in `home` wrote.
fn logs_of(home: &std::path::Path) -> String {
    std::fs::read_dir(home)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".stderr"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_follows_and_takes_over_the_calls_of_a_killed_one() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let mut app = App::connect(&a.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent(&a, "rocket").await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let parked = app.next_request_id().await;
    ipc.call(2, "wait", json!({"n": 2})).await;
    let claimed = app.next_request_id().await;
    app.claim_ok(&claimed).await;

    // B, on its own home and the same database, serves at once and forwards to A, which
    // holds the lease.
    let home_b = tempfile::tempdir().unwrap();
    std::fs::write(home_b.path().join("config.yaml"), db.config()).unwrap();
    let path_b = home_b.path().to_path_buf();
    let b = Broker::start_in(home_b).await;
    eventually(|| async { logs_of(&path_b).contains("forwarding to it") }).await;
    assert_eq!(
        a.http().get("/api/v1/status").await.status,
        200,
        "A still serves"
    );

    // A is killed; its lease lapses (aged here rather than waited for), and B takes over.
    let _home_a = a.kill_keep_home().await;
    db.client()
        .await
        .execute(
            "UPDATE instances SET seen_at = seen_at - interval '1 minute'",
            &[],
        )
        .await
        .unwrap();
    eventually(|| async { b.http().try_status("/api/v1/status").await == Some(200) }).await;
    assert!(logs_of(&path_b).contains("this instance leads"));

    // Everything A committed is B's now: the app resumes there with its key and keeps its
    // claim; the call parked on A is claimed and answered through B.
    let app = App::resume(&b.http(), &app.resume).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let listed = b
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await
        .data()
        .clone();
    let state = |id: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(state(&claimed).as_deref(), Some("claimed"), "{listed}");
    assert_eq!(state(&parked).as_deref(), Some("parked"), "{listed}");
    app.answer(&claimed, text("answered on B")).await.data();
    app.serve(&parked, text("claimed and answered on B")).await;
    for id in [&claimed, &parked] {
        assert_eq!(
            app.answer(id, text("again")).await.code(409),
            "already_settled"
        );
    }
}

/// Posts with `post` until the answer is not `503 store_unavailable`; it must then be a
/// success or a `409` (the change was kept from an attempt the outage refused).
pub(crate) async fn until_stored<F, Fut>(mut post: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = leo_testkit::Reply>,
{
    loop {
        let r = post().await;
        if r.status == 200 || r.status == 409 {
            return;
        }
        assert_eq!(r.code(503), "store_unavailable", "{r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_and_started_under_load_ends_every_call_once() {
    let Some(server) = Throwaway::start().await else {
        return;
    };
    let db = server.database().await;
    let broker = Broker::start_with(&db.config()).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    // The app claims and answers every call with its id, posting again while the store is
    // away (a claim kept from a refused attempt is its own: `already_claimed` then).
    let serving = tokio::spawn(async move {
        loop {
            let id = app.next_request_id().await;
            until_stored(|| app.claim(&id)).await;
            until_stored(|| app.answer(&id, text(&id))).await;
        }
    });
    let mut ipc = agent(&broker, "rocket").await;
    for n in 1..=20 {
        ipc.call(n, "wait", json!({"n": n})).await;
    }
    server.stop();
    for n in 21..=40 {
        ipc.call(n, "wait", json!({"n": n})).await;
    }
    server.start_again().await;
    eventually(|| async { message(&broker, "rocket", "back").await.status == 200 }).await;
    for n in 41..=60 {
        ipc.call(n, "wait", json!({"n": n})).await;
    }
    let mut ended = std::collections::HashMap::new();
    while ended.len() < 60 {
        let f = ipc.recv_of("result").await;
        let n = f["id"].as_u64().unwrap();
        assert!(
            ended.insert(n, f["outcome"].clone()).is_none(),
            "call {n} ended twice"
        );
    }
    serving.abort();
    for (n, outcome) in &ended {
        let answered = outcome["content"][0]["text"].as_str().is_some();
        let refused = outcome_code(outcome) == "store_unavailable";
        if *n > 40 {
            // Made after the recovery: the app's answer.
            assert!(answered, "call {n}: {outcome}");
        } else {
            // Made before or during the outage: parked and answered, or (reaching the broker
            // once it knew the database was away) refused at once.
            assert!(answered || refused, "call {n}: {outcome}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_gives_the_lease_up_to_a_follower() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let id_a = std::fs::read_to_string(a.home().join("state/instance-id")).unwrap();
    let home_b = tempfile::tempdir().unwrap();
    std::fs::write(home_b.path().join("config.yaml"), db.config()).unwrap();
    let path_b = home_b.path().to_path_buf();
    let b = Broker::start_in(home_b).await;
    eventually(|| async { logs_of(&path_b).contains("forwarding to it") }).await;
    let (status, _home_a) = a.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    let lapsed: bool = db
        .client()
        .await
        .query_one(
            "SELECT seen_at <= now() - interval '15 seconds' FROM instances
             WHERE id = 'i_' || left($1, 16)",
            &[&id_a.trim()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(lapsed, "A's lease is given up at its clean stop");
    eventually(|| async { b.http().try_status("/api/v1/status").await == Some(200) }).await;
}

/// `line` with each `@FF@` replaced by the byte 0xff: a frame or body that is not UTF-8.
fn not_utf8(line: &str) -> Vec<u8> {
    line.split("@FF@")
        .collect::<Vec<_>>()
        .join("\u{1}")
        .bytes()
        .map(|b| if b == 1 { 0xff } else { b })
        .collect()
}

/// Bodies holding U+0000 (`\u0000` in JSON) or the byte 0xff (`@FF@`) in each string that
/// reaches the database, with the answer each gets; CLIENT, TOOL and REQUEST stand for the
/// app's id, a good tool and a call it claimed.
#[rustfmt::skip]
const BAD_BODIES: [(&str, &str, u16, &str); 20] = [
    (TOOLS, r#"{"client_id": "CLIENT", "group": "g\u0000", "tools": [TOOL]}"#, 422, "invalid_tool"),
    (TOOLS, r#"{"client_id": "CLIENT", "group": "g@FF@", "tools": [TOOL]}"#, 400, "invalid_parameter"),
    (TOOLS, r#"{"client_id": "CLIENT", "group": "g", "tools": [{"name": "t\u0000", "description": "d", "input_schema": {}}]}"#, 422, "invalid_tool"),
    (TOOLS, r#"{"client_id": "CLIENT", "group": "g", "tools": [{"name": "t@FF@", "description": "d", "input_schema": {}}]}"#, 400, "invalid_parameter"),
    (TOOLS, r#"{"client_id": "CLIENT", "group": "g", "tools": [TOOL], "agents": ["a\u0000"]}"#, 400, "invalid_parameter"),
    (TOOLS, r#"{"client_id": "CLIENT", "group": "g", "tools": [TOOL], "agents": ["a@FF@"]}"#, 400, "invalid_parameter"),
    (TOOLS, r#"{"client_id": "c\u0000", "group": "g", "tools": [TOOL]}"#, 404, "unknown_client"),
    (HOOKS, r#"{"name": "w\u0000", "url": "http://127.0.0.1:9/", "group": "wg", "tools": [TOOL]}"#, 400, "invalid_parameter"),
    (HOOKS, r#"{"name": "w", "url": "http://127.0.0.1:9/\u0000", "group": "wg", "tools": [TOOL]}"#, 400, "invalid_parameter"),
    (HOOKS, r#"{"name": "w", "url": "http://127.0.0.1:9/@FF@", "group": "wg", "tools": [TOOL]}"#, 400, "invalid_parameter"),
    (TO_ROCKET, r#"{"text": "ok", "from": "ops\u0000"}"#, 400, "invalid_parameter"),
    (TO_ROCKET, r#"{"text": "ok", "from": "ops#s\u0000"}"#, 400, "invalid_parameter"),
    (TO_ROCKET, r#"{"text": "bad@FF@", "from": "ops"}"#, 400, "invalid_parameter"),
    ("/web/agent/roc%00ket/message", r#"{"text": "ok", "from": "ops"}"#, 400, "invalid_parameter"),
    (CLAIM, r#"{"client_id": "c\u0000"}"#, 404, "unknown_client"),
    (CLAIM, r#"{"client_id": "c@FF@"}"#, 400, "invalid_parameter"),
    ("/api/v1/client-tools/requests/r%00/claim", r#"{"client_id": "CLIENT"}"#, 404, "unknown_request"),
    (RESULT, r#"{"client_id": "CLIENT", "ok": false, "error": {"code": "e\u0000", "message": "m"}}"#, 422, "invalid_result"),
    (RESULT, r#"{"client_id": "CLIENT", "ok": false, "error": {"code": "e", "message": "m@FF@"}}"#, 400, "invalid_parameter"),
    (RESULT, r#"{"client_id": "c\u0000", "ok": true, "content": []}"#, 404, "unknown_client"),
];
const TOOLS: &str = "/api/v1/client-tools";
const HOOKS: &str = "/api/v1/client-tools/webhooks";
const TO_ROCKET: &str = "/web/agent/rocket/message";
const CLAIM: &str = "/api/v1/client-tools/requests/REQUEST/claim";
const RESULT: &str = "/api/v1/client-tools/requests/REQUEST/result";

/// Hellos with U+0000 or 0xff in the session id or the agent's name: each is answered an
/// `invalid_frame` error, and the connection closed.
async fn bad_hellos_are_refused(broker: &Broker) {
    let sock = broker.home().join("run/sidecar.sock");
    let token = broker.agent_token();
    let hello = |agent: &str, session: &str| {
        json!({"type": "hello", "v": 1, "agent": agent, "session": session, "token": token,
            "mode": "native", "harness": {"name": "h", "version": "1"}})
        .to_string()
    };
    for (line, at) in [
        (hello("rocket", "nul\0sess").into_bytes(), "$.session"),
        (not_utf8(&hello("rocket", "bad@FF@sess")), ""),
        (hello("roc\0ket", "s").into_bytes(), "$.agent"),
        (not_utf8(&hello("roc@FF@ket", "s")), ""),
    ] {
        let mut ipc = leo_testkit::Ipc::connect(&sock).await;
        ipc.send_bytes(&line).await;
        let f = ipc.recv().await;
        assert_eq!(
            (&f["type"], &f["code"]),
            (&json!("error"), &json!("invalid_frame"))
        );
        assert!(f["message"].as_str().unwrap().contains(at), "{f}");
        assert!(
            ipc.recv_or_end().await.is_none(),
            "closed after a refused hello"
        );
    }
}

/// Each `ipc_frame` fuzz seed as the first line of a session of its own on `sidecar.sock`,
/// with the broker's agent token; a hello that is welcomed is followed by the other seeds.
/// Every first line is answered (a seed whose session id the store cannot hold is refused
/// `invalid_frame`), and none leaves a session hanging.
async fn ipc_seeds_are_answered(broker: &Broker) {
    let seeds = crate::attacks::fuzz_inputs("ipc_frame");
    let token = broker.agent_token();
    let with_token = |data: &[u8]| -> Vec<u8> {
        let at = data.windows(11).position(|w| w == br#""token":"t""#);
        at.map_or_else(
            || data.to_vec(),
            |i| [&data[..i + 9], token.as_bytes(), &data[i + 10..]].concat(),
        )
    };
    let sock = broker.home().join("run/sidecar.sock");
    let (mut welcomed, mut refused) = (0, 0);
    for (name, data) in &seeds {
        let mut ipc = leo_testkit::Ipc::connect(&sock).await;
        ipc.send_bytes(&with_token(data)).await;
        let first = ipc.within(WAIT).await;
        let first = first.unwrap_or_else(|| panic!("{name}: no answer"));
        match first["type"].as_str() {
            Some("welcome") => welcomed += 1,
            Some("error") if first["code"] == "invalid_frame" => refused += 1,
            _ => {}
        }
        if first["type"] == "welcome" {
            for (_, next) in seeds.iter().filter(|(n, _)| !n.starts_with("hello")) {
                ipc.send_bytes(next).await;
            }
        }
        ipc.close().await;
    }
    assert!(
        welcomed >= 1 && refused >= 2,
        "{welcomed} welcomed, {refused} refused"
    );
}

/// A session's frames: a tool name no registration holds answers `no_client`, bytes that are
/// not UTF-8 an `invalid_frame` error; free text inside JSON the store keeps as JSON text
/// (arguments, content) is written escaped, and an app error's message has its controls
/// replaced: those calls go through.
async fn bad_frames_and_free_text(ipc: &mut leo_testkit::Ipc, app: &mut App) {
    ipc.call(1, "ec\0ho", json!({})).await;
    assert_eq!(outcome_code(&result_of(ipc, 1).await), "no_client");
    for line in [
        r#"{"type": "call", "id": 2, "tool": "ec@FF@ho", "arguments": {}}"#,
        r#"{"type": "call", "id": 2, "tool": "echo", "arguments": {"text": "@FF@"}}"#,
    ] {
        ipc.send_bytes(&not_utf8(line)).await;
        assert_eq!(ipc.recv_of("error").await["code"], "invalid_frame");
    }
    ipc.call(3, "echo", json!({"text": "a\0b"})).await;
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    app.answer(&id, text("x\0y")).await.data();
    assert_eq!(result_of(ipc, 3).await["content"][0]["text"], "x\0y");
    ipc.call(4, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    app.fail(&id, "oops", "bad\0news").await.data();
    assert_eq!(outcome_code(&result_of(ipc, 4).await), "oops");
}

/// `BAD_BODIES`, each answered as it says, about a call of `ipc` the app claimed.
async fn bad_bodies_are_refused(
    http: &leo_testkit::Http,
    ipc: &mut leo_testkit::Ipc,
    app: &mut App,
) {
    ipc.call(5, "echo", json!({})).await;
    let claimed = app.next_request_id().await;
    app.claim_ok(&claimed).await;
    let good_tool = tool("t").to_string();
    let fill = |t: &str| {
        t.replace("CLIENT", &app.id)
            .replace("TOOL", &good_tool)
            .replace("REQUEST", &claimed)
    };
    let mut wrong = Vec::new();
    for (path, body, status, code) in BAD_BODIES {
        let r = http.post_raw(&fill(path), not_utf8(&fill(body))).await;
        if (r.status, r.body["code"].as_str()) != (status, Some(code)) {
            wrong.push(format!("{path} {body}: {} {}", r.status, r.body));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    app.answer(&claimed, text("5")).await.data();
    assert_eq!(result_of(ipc, 5).await["content"][0]["text"], "5");
}

/// Query parameters: the history's filters and an app's name holding U+0000 are refused;
/// percent-encoded bytes that are not UTF-8 read as U+FFFD, which matches nothing.
async fn bad_queries_are_refused(http: &leo_testkit::Http) {
    for (query, status) in [
        ("tool=%00", 400),
        ("agent=x%00", 400),
        ("tool=%ff", 200),
        ("agent=%ff", 200),
    ] {
        let r = http
            .get(&format!(
                "/api/v1/client-tools/requests?state=ended&{query}"
            ))
            .await;
        assert_eq!(r.status, status, "{query}: {:?}", r.body);
        if status == 400 {
            assert_eq!(r.code(400), "invalid_parameter");
        }
    }
    let named = http.get("/api/v1/events?client_tools=1&name=a%00b").await;
    assert_eq!(named.code(400), "invalid_parameter");
}

/// Every string that reaches PostgreSQL, holding U+0000 (which PostgreSQL's `text` cannot
/// hold) or bytes that are not UTF-8, is refused where it comes in with its documented code,
/// or stored escaped where it is free text inside stored JSON; the store keeps writing for
/// every session (once, a session id with U+0000 stopped the store acknowledging anything).
#[tokio::test]
async fn text_postgres_cannot_hold_is_refused_at_the_edge_and_the_store_keeps_writing() {
    let Some(db) = database().await else { return };
    let broker = Broker::start_with(&db.config()).await;
    bad_hellos_are_refused(&broker).await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    bad_frames_and_free_text(&mut ipc, &mut app).await;
    bad_bodies_are_refused(&http, &mut ipc, &mut app).await;
    // A message's text is stamped with its controls replaced, so it is stored.
    assert_eq!(message(&broker, "rocket", "a\0b").await.status, 200);
    bad_queries_are_refused(&http).await;
    // The fuzz targets' seeds, HTTP requests and IPC frames, driven into this store.
    crate::attacks::replay_fuzz_inputs(broker.addr, &broker).await;
    ipc_seeds_are_answered(&broker).await;
    // `/mcp`: a harness's name and a tool's name holding U+0000.
    let mcp = leo_testkit::mcp::client(broker.addr, &broker.agent_token())
        .with_header("leo-agent", "nova");
    let session = leo_testkit::mcp::open_session(&mcp, "nul\0harness").await;
    let called = leo_testkit::mcp::call_in(&mcp, &session, 2, "ec\0ho").await;
    assert_eq!(called["result"]["isError"], true, "{called}");
    leo_testkit::mcp::call_answered(&mcp, &session, 3, "echo", &mut app, "via mcp").await;

    // The store still writes for everyone: another session's call, a message, the history.
    let mut other = agent(&broker, "comet").await;
    other.call(1, "echo", json!({"text": "fine"})).await;
    let id = app.next_request_id().await;
    app.serve(&id, text("still fine")).await;
    assert_eq!(
        result_of(&mut other, 1).await["content"][0]["text"],
        "still fine"
    );
    assert_eq!(message(&broker, "comet", "hello").await.status, 200);
    eventually(|| async {
        let r = http
            .get("/api/v1/client-tools/requests?state=ended&agent=comet")
            .await;
        r.status == 200 && r.data()["calls"].as_array().is_some_and(|c| c.len() == 1)
    })
    .await;
    let logs = logs_of(broker.home());
    assert!(
        !logs.contains("cannot record") && !logs.contains("cannot hold"),
        "{logs}"
    );
}

/// `url` with its user replaced by `user` (the part before `@`, or a new one).
fn with_user(url: &str, user: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let host = url[start..end]
        .rsplit_once('@')
        .map_or(&url[start..end], |(_, h)| h);
    format!("{}{user}@{host}{}", &url[..start], &url[end..])
}

/// `leo broker` started on a new home (returned, to outlive it) with `LEO_STORE_URL=url`,
/// logging warnings to `broker.stderr` there.
pub(crate) fn broker_on(url: &str) -> (tempfile::TempDir, tokio::process::Child) {
    let home = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(home.path().join("broker.stderr")).unwrap();
    let child = tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(["broker", "--port", "0"])
        .env("LEO_HOME", home.path())
        .env("LEO_STORE_URL", url)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    (home, child)
}

/// How `broker`, started by [`broker_on`] in `home`, stopped by itself (within 30 s): its
/// exit status and what it said.
pub(crate) async fn stopped(
    home: &std::path::Path,
    mut broker: tokio::process::Child,
) -> (std::process::ExitStatus, String) {
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), broker.wait())
        .await
        .unwrap_or_else(|_| panic!("the broker waits instead of stopping"))
        .unwrap();
    let said = std::fs::read_to_string(home.join("broker.stderr")).unwrap();
    (status, said)
}

/// `leo broker` with `LEO_STORE_URL=url`, which must stop by itself at start.
async fn refused_start(url: &str) -> (std::process::ExitStatus, String) {
    let (home, broker) = broker_on(url);
    stopped(home.path(), broker).await
}

/// What no wait would end stops the start with the server's words and the fix, naming the
/// variable the URL came from: a database that does not exist, a role the server does not
/// know, a role without the rights to create the tables. (The server the tests use trusts
/// every local role, so a wrong password cannot fail here; it is the same path, 28P01.)
#[tokio::test]
async fn a_missing_database_role_or_right_stops_the_start_with_the_fix() {
    let Some(db) = database().await else { return };
    let role = format!("{}_r", db.name);
    let pg = db.client().await;
    pg.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC"
    ))
    .await
    .unwrap();
    let admin = &db.server().admin_url;
    let cases = [
        (
            leo_testkit::postgres::with_database(admin, "leo_no_such_database"),
            "3D000",
            "CREATE DATABASE",
        ),
        (
            with_user(&db.url, "leo_no_such_role"),
            "28000",
            "CREATE ROLE",
        ),
        (
            with_user(&db.url, &role),
            "42501",
            "GRANT USAGE, CREATE ON SCHEMA",
        ),
    ];
    for (url, code, fix) in cases {
        let (status, said) = refused_start(&url).await;
        assert!(!status.success(), "{url}: {said}");
        assert!(
            said.contains("leo: LEO_STORE_URL (PostgreSQL): the server refused: ")
                && said.contains(&format!("(SQLSTATE {code})"))
                && said.contains(fix)
                && said.contains("exists in LEO_STORE_URL")
                    | said.contains("named in LEO_STORE_URL"),
            "{url}: {said}"
        );
    }
    let _ = pg
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
        .await;
    // A server that does not answer is an outage: waited for, the instance serving 503.
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        leo_testkit::postgres::free_port()
    );
    let broker = Broker::start_with_env("", &[("LEO_STORE_URL", &url)]).await;
    let status = broker.http().get("/api/v1/status").await;
    assert_eq!(status.status, 503, "{}", status.body);
    let waiting = crate::support::readiness(&broker.http(), 503).await;
    assert_eq!(
        waiting["reason"], "the database cannot be reached",
        "{waiting}"
    );
}
