//! A broker killed with SIGKILL and started again on the same home loses nothing: a parked
//! call is offered again with the same id and arguments and its result reaches the harness
//! through the same `leo-mcp`, a claim whose app does not come back returns to parked, an
//! unread message is still there for `leo_messages`, and every call still ends exactly once.
//!
//! Each scenario runs twice: on SQLite (`state/leo.db`, the default) and on PostgreSQL
//! (`store.url`, a database of its own on the tests' server, `leo_testkit::postgres`).

use std::collections::BTreeSet;

use leo_testkit::postgres::database;
use leo_testkit::{Broker, Http};
use serde_json::{Value, json};

use crate::support::{
    Agent, AgentOpts, App, error_text, text_of, tool_with_timeout, wait_for_tools,
};

/// A short grace period, so the test that waits for it stays short.
const GRACE: &str = "client_tools:\n  resume_grace_s: 2\n";

async fn pending(http: &Http) -> Vec<Value> {
    http.get("/api/v1/client-tools/requests?pending=1")
        .await
        .data()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Restarts `broker` by SIGKILL on the same home; the app reconnects and registers again.
async fn kill_and_restart(broker: Broker) -> (Broker, App) {
    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    (broker, app)
}

fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

async fn a_parked_call_and_an_unread_message_survive_a_kill_on(store: &str) {
    let broker = Broker::start_with(store).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;

    let call = agent.spawn_call("wait", json!({"job": 7}));
    let before = app.next_request().await;
    let id = before.data["id"].as_str().unwrap().to_owned();
    let sent = broker
        .http()
        .post(
            "/web/agent/claude/message",
            &json!({"text": "the build is green", "from": "ci"}),
        )
        .await;
    assert_eq!(sent.status, 200, "{:?}", sent.body);

    let (broker, mut app) = kill_and_restart(broker).await;
    // The same call, offered again on the stream and listed as pending.
    let again = app.next_request().await;
    assert_eq!(again.data["id"], id.as_str());
    assert_eq!(again.data["arguments"], json!({"job": 7}));
    assert_eq!(again.data["created_at"], before.data["created_at"]);
    let listed = pending(&broker.http()).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["state"], "parked");

    // The harness's call was kept open; the app's answer after the restart reaches it.
    app.serve(&id, text("done after the restart")).await;
    let result = call.await.unwrap();
    assert_eq!(text_of(&result), "done after the restart");
    let twice = app.answer(&id, text("again")).await;
    assert_eq!(twice.code(409), "already_settled");

    let messages = agent.call("leo_messages", json!({})).await;
    assert!(
        text_of(&messages).contains("[message from ci] the build is green"),
        "{messages:?}"
    );
    let empty = agent.call("leo_messages", json!({})).await;
    assert!(!text_of(&empty).contains("the build is green"), "read once");
}

async fn a_claim_whose_app_does_not_come_back_is_parked_again_and_settles_once_on(store: &str) {
    let broker = Broker::start_with(&format!("{GRACE}{store}")).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let call = agent.spawn_call("wait", json!({}));
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    let old = app.id.clone();

    let (broker, mut app) = kill_and_restart(broker).await;
    let listed = pending(&broker.http()).await;
    assert_eq!(listed[0]["state"], "claimed");
    assert_eq!(listed[0]["claimed_by"], old.as_str());
    // The old claimant never comes back: after the grace period the call is offered again.
    let offered = app.next_request_id().await;
    assert_eq!(offered, id);
    app.serve(&id, text("second app")).await;
    assert_eq!(text_of(&call.await.unwrap()), "second app");
    assert_eq!(
        app.answer(&id, text("late")).await.code(409),
        "already_settled"
    );
}

async fn a_hundred_calls_in_flight_survive_a_kill_each_settled_once_on(store: &str) {
    let broker = Broker::start_with(store).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let calls: Vec<_> = (0..100)
        .map(|i| agent.spawn_call("wait", json!({"n": i})))
        .collect();
    let mut ids = BTreeSet::new();
    while ids.len() < 100 {
        ids.insert(app.next_request_id().await);
    }
    // A park is not acknowledged to anyone, so an app may see a call a kill at that instant
    // forgets (its harness then hears `no_client`). An acknowledged operation is the barrier
    // the contract gives: once it is answered, everything queued before it is committed.
    let sent = broker
        .http()
        .post(
            "/web/agent/claude/message",
            &json!({"text": "barrier", "from": "test"}),
        )
        .await;
    assert_eq!(sent.status, 200, "{:?}", sent.body);
    let (broker, app) = kill_and_restart(broker).await;
    let listed = pending(&broker.http()).await;
    let listed_ids: BTreeSet<String> = listed
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed_ids, ids, "none lost");
    for r in &listed {
        let n = r["arguments"]["n"].as_u64().unwrap();
        app.serve(r["id"].as_str().unwrap(), text(&format!("answer {n}")))
            .await;
    }
    for (i, call) in calls.into_iter().enumerate() {
        let result = call.await.unwrap();
        assert_eq!(
            text_of(&result),
            format!("answer {i}"),
            "{}",
            error_text(&result)
        );
    }
    for id in &ids {
        assert_eq!(
            app.answer(id, text("twice")).await.code(409),
            "already_settled"
        );
    }
}

async fn a_claimed_call_stays_with_its_app_when_it_resumes_after_a_kill_on(store: &str) {
    let broker = Broker::start_with(store).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let call = agent.spawn_call("wait", json!({}));
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;
    let (client_id, key) = (app.id.clone(), app.resume.clone());

    // The app keeps working while the broker is killed and started again; then it resumes.
    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let app = App::resume(&broker.http(), &key).await;
    assert_eq!(app.id, client_id);
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let listed = pending(&broker.http()).await;
    assert_eq!(listed[0]["claimed_by"], client_id.as_str());
    app.answer(&id, text("worked through the restart"))
        .await
        .data();
    assert_eq!(text_of(&call.await.unwrap()), "worked through the restart");
    assert_eq!(
        app.answer(&id, text("again")).await.code(409),
        "already_settled"
    );
}

/// Sends `signal` (`STOP`, `CONT`) to the `leo-mcp` of `agent`.
fn signal_agent(agent: &Agent, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), agent.pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn a_result_not_yet_written_to_its_sidecar_when_the_broker_is_killed_is_sent_on_resume_on(
    store: &str,
) {
    let broker = Broker::start_with(store).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;
    let call = agent.spawn_call("wait", json!({}));
    let id = app.next_request_id().await;
    app.claim_ok(&id).await;

    // leo-mcp stops reading: a result larger than the socket's buffers stays half-written in
    // the broker, which is then killed. The accepted result must not be lost with it.
    signal_agent(&agent, "STOP");
    let big = "x".repeat(900 * 1024);
    app.answer(&id, text(&big)).await.data();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let home = broker.kill_keep_home().await;
    signal_agent(&agent, "CONT");
    let broker = Broker::start_in(home).await;
    let result = call.await.unwrap();
    let got = text_of(&result);
    assert!(got == big, "got {got:.200}");
    let app = App::resume(&broker.http(), &app.resume).await;
    assert_eq!(
        app.answer(&id, text("again")).await.code(409),
        "already_settled"
    );
}

/// Each scenario as a test on SQLite and one on PostgreSQL.
macro_rules! on_both_stores {
    ($($scenario:ident: $sqlite:ident, $postgres:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $scenario("").await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let Some(db) = database().await else { return };
            $scenario(&db.config()).await;
        }
    )*};
}

on_both_stores! {
    a_parked_call_and_an_unread_message_survive_a_kill_on: a_parked_call_and_an_unread_message_survive_a_kill, a_parked_call_and_an_unread_message_survive_a_kill_on_postgres;
    a_claim_whose_app_does_not_come_back_is_parked_again_and_settles_once_on: a_claim_whose_app_does_not_come_back_is_parked_again_and_settles_once, a_claim_whose_app_does_not_come_back_is_parked_again_and_settles_once_on_postgres;
    a_hundred_calls_in_flight_survive_a_kill_each_settled_once_on: a_hundred_calls_in_flight_survive_a_kill_each_settled_once, a_hundred_calls_in_flight_survive_a_kill_each_settled_once_on_postgres;
    a_claimed_call_stays_with_its_app_when_it_resumes_after_a_kill_on: a_claimed_call_stays_with_its_app_when_it_resumes_after_a_kill, a_claimed_call_stays_with_its_app_when_it_resumes_after_a_kill_on_postgres;
    a_result_not_yet_written_to_its_sidecar_when_the_broker_is_killed_is_sent_on_resume_on: a_result_not_yet_written_to_its_sidecar_when_the_broker_is_killed_is_sent_on_resume, a_result_not_yet_written_to_its_sidecar_when_the_broker_is_killed_is_sent_on_resume_on_postgres;
}
