//! Upgrading a running cluster (docs/cluster.md, "Upgrades"): a two-instance cluster moves from
//! the previous schema version to this one with calls in every state in flight, and none is
//! lost or answered twice; an instance that knows an older schema never takes the lead.
//!
//! Building the previous release here would take minutes, so the previous version is what it
//! leaves in the database: the database is created with the real previous migration set
//! (`MIGRATIONS` but its newest), the cluster runs and is stopped cleanly with its calls in
//! flight, and the newest migration is then undone (its exact inverse, checked against the
//! catalog the previous set made), so the new binary that starts next finds the database as
//! an instance of the previous version left it, migrates it while those calls wait, and
//! serves them. What this cannot show is the previous release's own code writing into a
//! migrated schema, which the procedure avoids (docs/cluster.md says why).

use std::time::Duration;

use leo_store::postgres::schema::{MIGRATIONS, current};
use leo_testkit::cluster::{instance_id, leader};
use leo_testkit::postgres::database;
use leo_testkit::{Broker, WAIT};
use serde_json::{Value, json};

use crate::cluster::{agent_on, no_more_results};
use crate::support::{App, eventually, tool};

/// The newest migration and its inverse. A new migration means a new line here: the test
/// fails until its inverse is written, and the catalog check below proves the inverse exact.
const NEWEST: (i32, &str) = (9, "ALTER TABLE live DROP COLUMN approval");

/// Agents (raw sidecar sessions on B's socket) and the calls each makes before the stop.
const AGENTS: usize = 3;
const CALLS: u64 = 4;

fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

/// The app's answer to agent `agent`'s call `n`, so that each agent can tell it got its own.
fn answer(agent: &str, n: u64) -> String {
    format!("{agent}/{n} answered")
}

/// What a `client_tool.request` is for: its agent and the `n` of its arguments.
fn key_of(request: &Value) -> (String, u64) {
    let agent = request["agent"].as_str().unwrap().to_owned();
    let n = request["arguments"]["n"].as_u64().unwrap();
    (agent, n)
}

/// The tables, columns, indexes and functions of the database, as the migrations made them.
async fn catalog(pg: &tokio_postgres::Client) -> Vec<String> {
    let sql = [
        "SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
                || ' ' || COALESCE(column_default, '')
         FROM information_schema.columns WHERE table_schema = 'public'",
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'",
        "SELECT routine_name FROM information_schema.routines WHERE routine_schema = 'public'",
        "SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace",
    ];
    let mut all = Vec::new();
    for q in sql {
        for row in pg.query(q, &[]).await.unwrap() {
            all.push(row.get::<_, String>(0));
        }
    }
    all.sort();
    all
}

async fn schema_version(pg: &tokio_postgres::Client) -> i32 {
    pg.query_one("SELECT version FROM leo_schema", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until `broker` says it leads.
async fn leads(broker: &Broker) {
    let id = instance_id(broker.home());
    eventually(|| async { leader(&broker.http()).await.as_ref() == Some(&id) }).await;
}

/// What the home's brokers logged, every run of it.
fn logs(home: &std::path::Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(home).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "stderr") {
            all.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
    }
    all
}

/// `leo call work {"n": n} --wait 60` as agent `cli-n`, on `home`'s sidecar socket.
fn leo_call(home: &std::path::Path, n: u64) -> tokio::process::Child {
    tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(["call", "work", &json!({"n": n}).to_string(), "--wait", "60"])
        .args(["--agent", &format!("cli-{n}")])
        .env("LEO_HOME", home)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_upgrades_from_the_previous_schema_with_calls_in_flight_and_loses_none() {
    assert_eq!(
        (current(), MIGRATIONS.len()),
        (NEWEST.0, NEWEST.0 as usize),
        "a migration was added: write its inverse in NEWEST"
    );
    let Some(db) = database().await else { return };
    let pg = db.client().await;
    // The database as the previous version makes it, with its real migrations.
    pg.batch_execute("CREATE TABLE leo_schema (version INTEGER NOT NULL)")
        .await
        .unwrap();
    for sql in &MIGRATIONS[..MIGRATIONS.len() - 1] {
        pg.batch_execute(sql).await.unwrap();
    }
    pg.execute("INSERT INTO leo_schema VALUES ($1)", &[&(NEWEST.0 - 1)])
        .await
        .unwrap();
    let previous = catalog(&pg).await;

    // Two instances of this version (the first migrates), with calls in flight in every
    // state: agents on B's socket, piped to A; the app on B.
    let mut nodes = leo_testkit::cluster::start(&db.config(), 2).await;
    let b = nodes.remove(1);
    let a = nodes.remove(0);
    assert_eq!(schema_version(&pg).await, NEWEST.0);
    let mut app = App::connect(&b.http()).await;
    app.register_ok("g", json!([tool("work")])).await;
    let names: Vec<String> = (0..AGENTS).map(|i| format!("agent-{i}")).collect();
    let mut agents = Vec::new();
    for name in &names {
        let mut ipc = agent_on(&b, name, &[]).await;
        for n in 1..=CALLS {
            ipc.call(n, "work", json!({"n": n})).await;
        }
        agents.push(ipc);
    }
    let cli_before = leo_call(b.home(), 1);
    let mut ids = std::collections::HashMap::new();
    while ids.len() < AGENTS * CALLS as usize + 1 {
        let request = app.next_request().await.data;
        let id = request["id"].as_str().unwrap().to_owned();
        assert!(ids.insert(key_of(&request), id).is_none(), "{request}");
    }
    // Call 1 of each agent is answered now, call 2 claimed, 3 and 4 (and the `leo call`)
    // left parked.
    for name in &names {
        app.serve(&ids[&(name.clone(), 1)], text(&answer(name, 1)))
            .await;
        app.claim_ok(&ids[&(name.clone(), 2)]).await;
    }
    for (name, ipc) in names.iter().zip(&mut agents) {
        let frame = ipc.recv_of("result").await;
        assert_eq!(frame["id"], 1);
        assert_eq!(frame["outcome"]["content"][0]["text"], answer(name, 1));
    }

    // The upgrade: the follower stops, then the leader, cleanly: it hands its calls over.
    let (stopped, home_b) = b.stop_keep_home().await;
    assert!(stopped.success(), "{stopped:?}");
    let (stopped, home_a) = a.stop_keep_home().await;
    assert!(stopped.success(), "{stopped:?}");
    assert!(
        logs(home_a.path()).contains("stay in the database for the next leader"),
        "{}",
        logs(home_a.path())
    );
    let live: i64 = pg
        .query_one("SELECT count(*) FROM live", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, (AGENTS * 3 + 1) as i64, "every unanswered call stays");
    let cancelled: i64 = pg
        .query_one("SELECT count(*) FROM ended WHERE how <> 'result'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(cancelled, 0, "a clean stop ended a call");
    for ipc in &mut agents {
        assert!(
            ipc.within(WAIT).await.is_none(),
            "the session outlived its leader"
        );
    }
    // A call made while no instance runs.
    let cli_during = leo_call(home_b.path(), 2);

    // The database as an instance of the previous version leaves it: the newest migration's
    // columns hold nothing that version could not have written, and are undone.
    let approvals: i64 = pg
        .query_one("SELECT count(*) FROM live WHERE approval IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(approvals, 0);
    pg.batch_execute(NEWEST.1).await.unwrap();
    pg.execute("UPDATE leo_schema SET version = $1", &[&(NEWEST.0 - 1)])
        .await
        .unwrap();
    assert_eq!(
        catalog(&pg).await,
        previous,
        "NEWEST's inverse is not exact"
    );

    // The new binary starts on B's home, migrates while the calls wait, leads and restores
    // them; the agents resume, the app resumes with its key and keeps its claims.
    let b = Broker::start_in(home_b).await;
    leads(&b).await;
    assert_eq!(schema_version(&pg).await, NEWEST.0);
    let mut agents = Vec::new();
    for name in &names {
        agents.push(agent_on(&b, name, &[2, 3, 4]).await);
    }
    let mut app = App::resume(&b.http(), &app.resume).await;
    app.register_ok("g", json!([tool("work")])).await;
    for name in &names {
        let id = &ids[&(name.clone(), 2)];
        assert_eq!(app.answer(id, text(&answer(name, 2))).await.status, 200);
    }
    let mut parked: std::collections::HashSet<(String, u64)> = names
        .iter()
        .flat_map(|name| [(name.clone(), 3), (name.clone(), 4)])
        .chain([("cli-1".to_owned(), 1), ("cli-2".to_owned(), 2)])
        .collect();
    while !parked.is_empty() {
        let request = app.next_request().await.data;
        let key = key_of(&request);
        if !parked.remove(&key) {
            continue;
        }
        let id = request["id"].as_str().unwrap().to_owned();
        if let Some(before) = ids.get(&key) {
            assert_eq!(before, &id, "a call parked before the upgrade kept its id");
        }
        ids.insert(key.clone(), id.clone());
        app.serve(&id, text(&answer(&key.0, key.1))).await;
    }
    // The instance stopped first comes back on the new binary and follows.
    let a = Broker::start_in(home_a).await;
    eventually(|| async { a.stderr().contains("forwarding to it") }).await;

    // Every call is answered once, with its own answer.
    for (name, ipc) in names.iter().zip(&mut agents) {
        let mut got = std::collections::HashMap::new();
        while got.len() < 3 {
            let frame = ipc.recv_of("result").await;
            let n = frame["id"].as_u64().unwrap();
            let said = frame["outcome"]["content"][0]["text"].clone();
            assert!(
                got.insert(n, said).is_none(),
                "{name}: call {n} answered twice"
            );
        }
        for n in 2..=CALLS {
            assert_eq!(got[&n], answer(name, n), "{name}: call {n}");
        }
        no_more_results(ipc).await;
    }
    for (child, n) in [(cli_before, 1), (cli_during, 2)] {
        let out = tokio::time::timeout(WAIT, child.wait_with_output())
            .await
            .expect("leo call did not end")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(stdout.trim(), answer(&format!("cli-{n}"), n));
    }
    // The history lists each call once, answered.
    let rows = || async {
        pg.query("SELECT id, outcome FROM history", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    eventually(|| async { rows().await.len() >= ids.len() }).await;
    let rows = rows().await;
    assert_eq!(rows.len(), ids.len(), "{rows:?}");
    assert!(rows.iter().all(|(_, o)| o == "result"), "{rows:?}");
    for id in ids.values() {
        assert_eq!(rows.iter().filter(|(r, _)| r == id).count(), 1, "{id}");
    }

    // An instance that knows an older schema than the database never takes the lead: with
    // the schema moved past this version (as a newer one would), A refuses to lead once B
    // is gone, and says why.
    pg.execute("UPDATE leo_schema SET version = version + 1", &[])
        .await
        .unwrap();
    let _home_b = b.kill_keep_home().await;
    let mut a = a;
    let deadline = tokio::time::Instant::now() + WAIT;
    while a.is_running() {
        assert!(tokio::time::Instant::now() < deadline, "{}", a.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        a.stderr().contains("newer than this broker's"),
        "{}",
        a.stderr()
    );
    let leader: Option<String> = pg
        .query_one("SELECT leader FROM cluster", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leader, Some(instance_id(_home_b.path())));
}
