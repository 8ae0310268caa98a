//! History and audit belong to the cluster: two homes whose `store.url` names one database (a
//! database per test on a real server) show the same history of ended calls and the same audit
//! trail, whichever instance answers. Calls ended on A are listed by B after A stops and B takes
//! the lease, through the route, `leo requests --ended` and `leo audit`, each row naming the
//! instance that wrote it; a `leo client add` run on B's host is in the trail A reads; pages
//! walk across both instances' rows. While the database is away the rows are held, reads are
//! answered `503 store_unavailable`, and the rows are written when it is back.

use std::path::Path;

use leo_broker::home::{Home, instance_id};
use leo_testkit::postgres::database;
use leo_testkit::{Broker, Http};
use serde_json::{Value, json};

use crate::security::leo;
use crate::support::{App, agent, eventually, result_of, tool};

const ENDED: &str = "/api/v1/client-tools/requests?state=ended";

/// Runs `leo ARGS` on `home`, which must succeed; its stdout.
async fn leo_ok(home: &Path, args: &[&str]) -> String {
    let (ok, out, err) = leo(home, args).await;
    assert!(ok, "leo {args:?}: {out}{err}");
    assert!(!out.contains("Warning"), "leo {args:?}: {out}");
    out
}

/// The `field` of every item of `list[key]`, as text.
fn fields(list: &Value, key: &str, field: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|v| v[field].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `GET path` on `http`, which must answer 200; its data.
async fn get(http: &Http, path: &str) -> Value {
    let r = http.get(path).await;
    assert_eq!(r.status, 200, "{path}: {r:?}");
    r.data().clone()
}

/// The audit trail `http` reads, once it holds an entry for `action` on `target`.
async fn audit_with(http: &Http, action: &str, target: &str) -> Value {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let found = get(http, "/api/v1/audit?limit=500").await;
        let has = found["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == action && e["target"] == target);
        if has {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{found}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The entry of `list` for `action` on `target`.
fn entry<'a>(list: &'a Value, action: &str, target: &str) -> &'a Value {
    list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == action && e["target"] == target)
        .unwrap_or_else(|| panic!("no {action} {target} in {list}"))
}

/// Makes call `n` of `echo` as `agent_name` on `broker`, which `app` answers; its request id.
async fn answered_call(broker: &Broker, app: &mut App, agent_name: &str, n: u64) -> String {
    let mut ipc = agent(broker, agent_name).await;
    ipc.call(n, "echo", json!({"n": n})).await;
    let id = app.next_request_id().await;
    app.serve(&id, json!([{"type": "text", "text": "done"}]))
        .await;
    result_of(&mut ipc, n).await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_instance_lists_the_calls_and_audit_entries_of_the_one_before() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let id_a = instance_id(&Home::new(a.home())).unwrap();
    let home_b = tempfile::tempdir().unwrap();
    std::fs::write(home_b.path().join("config.yaml"), db.config()).unwrap();
    let path_b = home_b.path().to_path_buf();

    // A `leo client add` on B's host, no broker running there, is in the trail A reads.
    leo_ok(&path_b, &["client", "add", "ci", "--can-message", "rocket"]).await;
    let id_b = instance_id(&Home::new(&path_b)).unwrap();
    assert_ne!(id_a, id_b);
    let trail = audit_with(&a.http(), "client_add", "ci").await;
    let added = entry(&trail, "client_add", "ci");
    assert_eq!(added["instance"], id_b.as_str(), "{trail}");
    assert_eq!(added["token_kind"], "local");

    // Two calls end on A: one answered, one cancelled by the operator.
    let mut app = App::connect(&a.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let answered = answered_call(&a, &mut app, "rocket", 1).await;
    let mut ipc = agent(&a, "scout").await;
    ipc.call(2, "echo", json!({})).await;
    let cancelled = app.next_request_id().await;
    let path = format!("/api/v1/client-tools/requests/{cancelled}/cancel");
    a.http().post(&path, &json!({})).await.data();
    result_of(&mut ipc, 2).await;
    drop((ipc, app));
    eventually(|| async {
        get(&a.http(), ENDED).await["calls"]
            .as_array()
            .unwrap()
            .len()
            == 2
    })
    .await;

    // A stops (giving up its lease); B starts on the same database and takes it.
    let (status, _home_a) = a.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    let b = Broker::start_in(home_b).await;
    let http = b.http();
    let list = get(&http, ENDED).await;
    assert_eq!(
        fields(&list, "calls", "id"),
        [cancelled.as_str(), answered.as_str()]
    );
    assert_eq!(fields(&list, "calls", "outcome"), ["cancelled", "result"]);
    assert_eq!(
        fields(&list, "calls", "instance"),
        [id_a.clone(), id_a.clone()]
    );
    let trail = get(&http, "/api/v1/audit?limit=500").await;
    assert_eq!(entry(&trail, "register", "g")["instance"], id_a.as_str());
    assert_eq!(
        entry(&trail, "cancel", &cancelled)["instance"],
        id_a.as_str()
    );
    assert_eq!(entry(&trail, "client_add", "ci")["instance"], id_b.as_str());

    // B's `leo requests --ended --json` and `leo audit --json` show A's rows with A's id.
    let out = leo_ok(&path_b, &["requests", "--ended", "--json"]).await;
    let calls: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(calls[1]["id"], answered.as_str(), "{out}");
    assert_eq!(calls[1]["instance"], id_a.as_str(), "{out}");
    let out = leo_ok(&path_b, &["audit", "--json", "--limit", "500"]).await;
    let cancel = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["action"] == "cancel")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(cancel["instance"], id_a.as_str(), "{out}");
    let text = leo_ok(&path_b, &["audit"]).await;
    assert!(text.contains(&format!("on {id_a}")), "{text}");

    // A call ended on B joins them; pages of one walk across both instances' rows.
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let on_b = answered_call(&b, &mut app, "rocket", 3).await;
    eventually(|| async { get(&http, ENDED).await["calls"].as_array().unwrap().len() == 3 }).await;
    let (mut walked, mut instances, mut before) = (Vec::new(), Vec::new(), None::<u64>);
    loop {
        let page = match before {
            Some(b) => get(&http, &format!("{ENDED}&limit=1&before={b}")).await,
            None => get(&http, &format!("{ENDED}&limit=1")).await,
        };
        walked.extend(fields(&page, "calls", "id"));
        instances.extend(fields(&page, "calls", "instance"));
        match page["next_before"].as_u64() {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(
        walked,
        [on_b.as_str(), cancelled.as_str(), answered.as_str()]
    );
    assert_eq!(instances, [id_b.clone(), id_a.clone(), id_a.clone()]);
    let filtered = get(&http, &format!("{ENDED}&outcome=cancelled")).await;
    assert_eq!(fields(&filtered, "calls", "id"), [cancelled.as_str()]);
    let by_agent = get(&http, &format!("{ENDED}&agent=rocket")).await;
    assert_eq!(
        fields(&by_agent, "calls", "id"),
        [on_b.as_str(), answered.as_str()]
    );
    let full = get(&http, "/api/v1/audit?limit=500").await;
    let newest = get(&http, "/api/v1/audit?limit=1").await;
    let next = newest["next_before"].as_u64().unwrap();
    let older = get(&http, &format!("/api/v1/audit?limit=500&before={next}")).await;
    assert_eq!(
        older["entries"].as_array().unwrap().len() + 1,
        full["entries"].as_array().unwrap().len(),
        "{older}"
    );
    assert_eq!(older["entries"][0], full["entries"][1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_an_outage_are_held_and_written_when_the_database_is_back() {
    // A server of its own, since this test stops it.
    let Some(server) = leo_testkit::postgres::Throwaway::start().await else {
        return;
    };
    let db = server.database().await;
    let broker = Broker::start_with(&db.config()).await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([leo_testkit::app::tool_with_timeout("slow", 1)]))
        .await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "slow", json!({})).await;
    let id = app.next_request_id().await;

    // The call times out while the database is away: the broker keeps serving, the history
    // answers 503 store_unavailable, and the row waits.
    server.stop();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let away = http.get(ENDED).await;
    assert_eq!(away.code(503), "store_unavailable", "{away:?}");
    assert_eq!(http.get("/api/v1/status").await.status, 200);

    // Back: the held row is written, and listed.
    server.start_again().await;
    let mut list = json!({"calls": []});
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    while fields(&list, "calls", "id") != [id.as_str()] {
        assert!(tokio::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let r = http.get(ENDED).await;
        list = if r.status == 200 {
            r.data().clone()
        } else {
            json!({"calls": []})
        };
    }
    assert_eq!(fields(&list, "calls", "outcome"), ["timeout"]);
    let log = broker.stderr();
    assert!(log.contains("its rows are held"), "{log}");
    assert!(log.contains("the rows held meanwhile are written"), "{log}");
    drop(ipc);
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rows_and_store_content_apply_to_the_database_and_the_console_reads_it() {
    let Some(db) = database().await else { return };
    let config = format!(
        "{}history:\n  max_rows: 2\n  store_content: true\n",
        db.config()
    );
    let broker = Broker::start_with(&config).await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut ids = Vec::new();
    for n in 1..=3u64 {
        ids.push(answered_call(&broker, &mut app, "rocket", n).await);
    }
    let newest = [ids[2].clone(), ids[1].clone()];
    eventually(|| async { fields(&get(&http, ENDED).await, "calls", "id") == newest }).await;
    let rows: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM history", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 2);
    // Contents are kept, and shown to the operator only.
    let list = get(&http, ENDED).await;
    assert_eq!(list["calls"][0]["arguments"], json!({"n": 3}), "{list}");
    assert_eq!(
        list["calls"][0]["result"]["content"][0]["text"], "done",
        "{list}"
    );
    let console = crate::support::Console::login(&broker).await;
    let panel = get(&console.http, "/console/history").await;
    assert_eq!(fields(&panel, "calls", "id"), newest);
    assert!(panel["calls"][0].get("arguments").is_none(), "{panel}");
    // The chart's hour counts the database's rows, a minute a bar.
    let minutes = panel["per_minute"].as_array().unwrap();
    let results: u64 = minutes.iter().map(|m| m["result"].as_u64().unwrap()).sum();
    assert_eq!((minutes.len(), results), (60, 2), "{panel}");
}

/// On PostgreSQL the trail is one chain for the cluster: instances and `leo` commands on
/// several hosts append to it in turn; `leo audit verify` on any host walks it, and names the
/// entry an `UPDATE` of the table changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leo_audit_verify_walks_the_clusters_chain_and_names_an_entry_changed_in_the_table() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let home_b = tempfile::tempdir().unwrap();
    std::fs::write(home_b.path().join("config.yaml"), db.config()).unwrap();
    let mut app = App::connect(&a.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    // `leo` on another host writes while A's calls are audited.
    let cli = {
        let path = home_b.path().to_path_buf();
        tokio::spawn(async move {
            for name in ["c1", "c2", "c3"] {
                leo_ok(&path, &["client", "add", name, "--can-message", "rocket"]).await;
            }
        })
    };
    for n in 1..=3 {
        answered_call(&a, &mut app, "rocket", n).await;
    }
    cli.await.unwrap();
    eventually(|| async {
        let trail = get(&a.http(), "/api/v1/audit?limit=500").await;
        trail["entries"].as_array().unwrap().len() == 10
    })
    .await;
    let out = leo_ok(home_b.path(), &["audit", "verify", "--json"]).await;
    let verdict: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(verdict["verdict"], "chains", "{out}");
    // register, 3 claims, 3 results, 3 client_add.
    assert_eq!(verdict["entries"], 10, "{out}");

    let admin = db.client().await;
    let row = admin
        .query_one(
            "UPDATE audit SET principal = 'operator' WHERE seq =
                (SELECT min(seq) FROM audit WHERE action = 'client_add') RETURNING seq",
            &[],
        )
        .await
        .unwrap();
    let seq: i64 = row.get(0);
    let (ok, out, _) = leo(a.home(), &["audit", "verify"]).await;
    assert!(!ok);
    assert!(
        out.starts_with(&format!("Audit entry #{seq} does not chain: its content")),
        "{out}"
    );
}
