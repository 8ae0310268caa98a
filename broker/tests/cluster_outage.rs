//! PostgreSQL away in a cluster (a throwaway server of the test's own). An instance started
//! while it is down serves `503` until it is back, then joins by itself. And PostgreSQL
//! stopped and started again under load: three instances, the agent's session on a follower's
//! socket and the app's stream and posts through the other follower. Every call made before,
//! during and after the outage ends exactly once: answered by the app, or (made while the
//! leader knew the database was away) refused at once with `store_unavailable`; none lost,
//! none doubled.

use std::collections::HashMap;
use std::time::Duration;

use leo_testkit::agent::{Agent, AgentOpts, error_text};
use leo_testkit::cluster;
use leo_testkit::postgres::{Database, Throwaway};
use serde_json::json;

use crate::postgres::until_stored;
use crate::support::{App, agent, eventually, message, outcome_code, readiness, result_of, tool};

/// A PostgreSQL server of the test's own (it stops it) with a database on it.
async fn throwaway() -> Option<(Throwaway, Database)> {
    let server = Throwaway::start().await?;
    let db = server.database().await;
    Some((server, db))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_and_started_under_load_through_followers_ends_every_call_once() {
    let Some((server, db)) = throwaway().await else {
        return;
    };
    let nodes = cluster::start(&db.config(), 3).await;
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut app = App::connect(&b.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    // The app claims and answers every call with its id through B, posting again while the
    // store is away (a claim kept from a refused attempt is its own: `already_claimed`).
    let serving = tokio::spawn(async move {
        loop {
            let id = app.next_request_id().await;
            until_stored(|| app.claim(&id)).await;
            let content = json!([{"type": "text", "text": id}]);
            until_stored(|| app.answer(&id, content.clone())).await;
        }
    });
    let mut ipc = agent(c, "rocket").await;
    for n in 1..=20 {
        ipc.call(n, "wait", json!({"n": n})).await;
    }
    server.stop();
    for n in 21..=40 {
        ipc.call(n, "wait", json!({"n": n})).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every instance is alive and says it cannot take work, and why.
    for node in &nodes {
        let not = readiness(&node.http(), 503).await;
        assert_eq!(not["reason"], "the database cannot be reached", "{not}");
    }
    server.start_again().await;
    eventually(|| async { message(a, "rocket", "back").await.status == 200 }).await;
    for node in &nodes {
        readiness(&node.http(), 200).await;
    }
    for n in 41..=60 {
        ipc.call(n, "wait", json!({"n": n})).await;
    }
    let mut ended = HashMap::new();
    while ended.len() < 60 {
        let f = ipc.recv_of("result").await;
        let n = f["id"].as_u64().unwrap();
        assert!(
            ended.insert(n, f["outcome"].clone()).is_none(),
            "call {n} ended twice"
        );
    }
    // Nothing more comes: no call ends a second time.
    while let Some(f) = ipc.within(Duration::from_millis(1500)).await {
        assert_ne!(f["type"], "result", "{f}");
    }
    serving.abort();
    // Each answer is the app's answer to one call (it answers with the call's id).
    let mut answers = std::collections::HashSet::new();
    for outcome in ended.values() {
        if let Some(id) = outcome["content"][0]["text"].as_str() {
            assert!(answers.insert(id.to_owned()), "{id} answered two calls");
        }
    }
    let mut refused = 0;
    for (n, outcome) in &ended {
        let answered = outcome["content"][0]["text"].as_str().is_some();
        let unavailable = outcome_code(outcome) == "store_unavailable";
        refused += usize::from(unavailable);
        if *n > 40 {
            assert!(answered, "call {n}: {outcome}");
        } else {
            assert!(answered || unavailable, "call {n}: {outcome}");
        }
    }
    eprintln!("60 calls through followers, {refused} refused during the outage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_while_postgres_is_down_serves_once_it_is_back() {
    let Some((server, db)) = throwaway().await else {
        return;
    };
    server.stop();
    // It starts, listens, and says what it waits for.
    let mut broker = leo_testkit::Broker::start_with(&db.config()).await;
    eventually(|| async { broker.stderr().contains("waiting for the database") }).await;
    // So does one whose database does not exist: that is known once the server answers.
    let missing = leo_testkit::postgres::with_database(&db.url, "leo_no_such_database");
    let (home, refusing) = crate::postgres::broker_on(&missing);
    let log = home.path().join("broker.stderr");
    eventually(|| async {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("waiting for the database"))
    })
    .await;
    let waiting = readiness(&broker.http(), 503).await;
    assert_eq!(waiting["role"], "follower", "{waiting}");
    // What it could not keep, it refuses: an app's request is answered 503, on TCP and on the
    // API socket, and an agent's session is closed, so a real `leo-mcp` answers a tool error.
    let register = json!({"client_id": "c_early", "group": "g", "tools": [tool("wait")]});
    let refused = broker.http().post("/api/v1/client-tools", &register).await;
    assert_eq!(refused.code(503), "store_unavailable", "{refused:?}");
    let refused = broker.http_unix().get("/api/v1/status").await;
    assert_eq!(refused.code(503), "store_unavailable", "{refused:?}");
    let path = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    let mut early = leo_testkit::Ipc::connect(&path).await;
    let closed = tokio::time::timeout(Duration::from_secs(5), early.recv_or_end()).await;
    assert!(matches!(closed, Ok(None)), "{closed:?}");
    let harness = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let refused = error_text(&harness.call("leo_messages", json!({})).await);
    assert!(refused.contains("broker not running"), "{refused}");

    // The database comes up: the instance joins (it leads, alone) without a restart.
    server.start_again().await;
    let (status, said) = crate::postgres::stopped(home.path(), refusing).await;
    assert!(
        !status.success() && said.contains("(SQLSTATE 3D000)") && said.contains("CREATE DATABASE"),
        "{said}"
    );
    eventually(|| async { broker.http().try_status("/api/v1/status").await == Some(200) }).await;
    assert_eq!(readiness(&broker.http(), 200).await["role"], "leader");
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "wait", json!({"n": 1})).await;
    let id = app.next_request_id().await;
    app.serve(&id, json!([{"type": "text", "text": "after"}]))
        .await;
    assert_eq!(result_of(&mut ipc, 1).await["content"][0]["text"], "after");
    assert!(broker.is_running());
}
