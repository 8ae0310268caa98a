//! The broker down, late or restarted: leo-mcp starts anyway, answers `no_client`, reconnects
//! by itself and refreshes its tools. What a restart keeps (calls, claims, messages) is in
//! `durable`.

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{Agent, AgentOpts, App, error_text, text_of, tool, wait_until};

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
