//! The broker down, late or restarted: leo-mcp starts anyway, answers `no_client`, reconnects
//! by itself and refreshes its tools; a new call made before the restarted broker has its app
//! back is made again once the tool is listed. What a restart keeps (calls, claims, messages) is in
//! `durable`.

use std::time::{Duration, Instant};

use leo_testkit::{Broker, WAIT};
use serde_json::json;

use crate::support::{
    Agent, AgentOpts, App, error_text, text_of, tool, wait_for_tools, wait_until,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_without_a_broker_and_connects_when_it_comes() {
    let home = tempfile::tempdir().unwrap();
    let agent = Agent::start(home.path(), AgentOpts::native("claude")).await;
    assert!(agent.tool_names_without_messages().await.is_empty());
    let result = agent.call("echo", json!({})).await;
    assert_eq!(error_text(&result), "no_client: broker not running");

    let broker = Broker::start_in(home).await;
    let mut app = App::connect(&broker.http()).await;
    let before = agent.list_changed();
    app.register_ok("g", json!([tool("echo")])).await;
    wait_until("list_changed once the broker is up", || {
        agent.list_changed() > before
    })
    .await;
    assert_eq!(agent.tool_names_without_messages().await, ["echo"]);

    let call = agent.spawn_call("echo", json!({"text": "a"}));
    let req = app.next_request().await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "b"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_reads_the_state_file_while_the_broker_is_down() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    drop(app);
    let home = broker.kill_keep_home().await;

    let agent = Agent::start(home.path(), AgentOpts::fallback("codex")).await;
    assert_eq!(
        agent.tool_names_without_messages().await,
        ["leo_app_call", "leo_app_tools"]
    );
    let result = agent.call("leo_app_call", json!({"tool": "echo"})).await;
    assert_eq!(error_text(&result), "no_client: broker not running");

    // Once the broker is back, the same fixed tools work.
    let broker = Broker::start_in(home).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    let call = loop {
        let call = agent.spawn_call("leo_app_call", json!({"tool": "echo"}));
        // Other events (the registration's client_tools.changed) are skipped, not mistaken
        // for a missing request: a parked call only ends when it is answered.
        let window = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
        let mut request = None;
        while let Some(e) = app.sse.within(window - tokio::time::Instant::now()).await {
            if e.event == "client_tool.request" {
                request = Some(e);
                break;
            }
        }
        if let Some(req) = request {
            break (call, req);
        }
        let ended = call.await.unwrap();
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reconnected: {ended:?}"
        );
    };
    let (call, req) = call;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "ok"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "ok");
}

/// After a restart the broker has no app until they reconnect on their own backoff: a new call
/// that reaches it first is refused `no_client` there, and `leo-mcp`, back from a lost
/// connection moments ago, makes it again once the tool is listed. The harness sees the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_call_right_after_a_restart_waits_for_its_app_to_register_again() {
    let (broker, agent) = restarted_without_its_app().await;
    let call = agent.spawn_call("echo", json!({"text": "a"}));
    // Refused by the broker, held by leo-mcp: not answered while the app is away.
    tokio::time::sleep(Duration::from_secs(2)).await;
    if call.is_finished() {
        panic!("answered before its app came back: {:?}", call.await);
    }

    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let req = app.next_request().await;
    assert_eq!(req.data["arguments"], json!({"text": "a"}));
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "b"}]),
    )
    .await;
    let result = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
    assert_eq!(text_of(&result), "b");
}

/// The harness may cancel a call held that way: it ends, and is not made once the tool is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_after_a_restart_ends_when_the_harness_cancels_it() {
    let (broker, agent) = restarted_without_its_app().await;
    let call = agent.spawn_call("echo", json!({}));
    wait_until("leo-mcp to hold the refused call", || {
        agent.stderr().contains("calling again soon")
    })
    .await;
    // Dropping rmcp's call future sends notifications/cancelled for it.
    call.abort();
    wait_until("leo-mcp to end the held call", || {
        agent
            .stderr()
            .contains("cancelled while waiting to call again")
    })
    .await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let sent = app.next_request_within(Duration::from_secs(3)).await;
    assert!(sent.is_none(), "a cancelled call was made: {sent:?}");
}

/// Without a reconnect a call to a tool nobody serves is answered `no_client` at once: a
/// harness calling a wrong name must not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_tool_nobody_serves_is_answered_at_once() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "echo")).await;
    let started = Instant::now();
    let result = agent.call("nothing", json!({})).await;
    assert!(
        error_text(&result).starts_with("no_client: no connected app serves tool \"nothing\""),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

/// A broker that served `echo` to a connected `leo-mcp`, SIGKILLed and started again on the
/// same home, and that `leo-mcp` connected to it again; no app has come back yet.
async fn restarted_without_its_app() -> (Broker, Agent) {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "echo")).await;
    drop(app);
    let broker = Broker::start_in(broker.kill_keep_home().await).await;
    wait_until("leo-mcp to connect again", || {
        agent.stderr().matches("connected to the broker").count() >= 2
    })
    .await;
    assert!(
        !agent.tool_names().await.iter().any(|n| n == "echo"),
        "the restarted broker lists echo before its app came back"
    );
    (broker, agent)
}
