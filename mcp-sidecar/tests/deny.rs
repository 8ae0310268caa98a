//! `deny_tools`: a denied tool is neither listed nor callable, client tool or fallback tool.

use leo_testkit::Broker;
use serde_json::{Value, json};

use crate::support::{Agent, AgentOpts, App, error_text, text_of, tool};

const CONFIG: &str = "agents:
  native_denied:
    deny_tools: [secret]
  fallback_denied:
    deny_tools: [secret, leo_app_call]
  tools_denied:
    deny_tools: [leo_app_tools]
";

/// A broker whose config denies tools: the names must have been registered once before the
/// broker starts (deny_tools is checked against `state/client-tools.json` at start).
async fn broker_with_denials() -> (Broker, App) {
    let first = Broker::start().await;
    let app = App::connect(&first.http()).await;
    app.register_ok("g", json!([tool("secret"), tool("open")]))
        .await;
    drop(app);
    let home = first.kill_keep_home().await;
    std::fs::write(home.path().join("config.yaml"), CONFIG).unwrap();
    let broker = Broker::start_in(home).await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("secret"), tool("open")]))
        .await;
    (broker, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_tools_are_hidden_and_refused_in_native_mode() {
    let (broker, mut app) = broker_with_denials().await;

    let denied = Agent::start(broker.home(), AgentOpts::native("native_denied")).await;
    assert_eq!(denied.tool_names_without_messages().await, ["open"]);
    let result = denied.call("secret", json!({})).await;
    assert_eq!(
        error_text(&result),
        "denied: tool \"secret\" is denied to agent \"native_denied\""
    );

    // Another agent is not affected.
    let other = Agent::start(broker.home(), AgentOpts::native("someone_else")).await;
    assert_eq!(
        other.tool_names_without_messages().await,
        ["open", "secret"]
    );
    let call = other.spawn_call("secret", json!({}));
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "someone_else");
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "s"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_tools_are_hidden_and_refused_in_fallback_mode() {
    let (broker, _app) = broker_with_denials().await;

    // leo_app_call denied: only leo_app_tools is listed, and it does not show `secret`.
    let agent = Agent::start(broker.home(), AgentOpts::fallback("fallback_denied")).await;
    assert_eq!(agent.tool_names_without_messages().await, ["leo_app_tools"]);
    let listed: Value =
        serde_json::from_str(&text_of(&agent.call("leo_app_tools", json!({})).await)).unwrap();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["open"]);
    let result = agent.call("leo_app_call", json!({"tool": "open"})).await;
    assert_eq!(
        error_text(&result),
        "denied: tool \"leo_app_call\" is denied to agent \"fallback_denied\""
    );

    // leo_app_tools denied: leo_app_call stays, and a denied inner tool is refused.
    let agent = Agent::start(broker.home(), AgentOpts::fallback("tools_denied")).await;
    assert_eq!(agent.tool_names_without_messages().await, ["leo_app_call"]);
    let result = agent.call("leo_app_tools", json!({})).await;
    assert!(error_text(&result).starts_with("denied: "), "{result:?}");

    let agent = Agent::start(broker.home(), AgentOpts::fallback("native_denied")).await;
    assert_eq!(
        agent.tool_names_without_messages().await,
        ["leo_app_call", "leo_app_tools"]
    );
    let result = agent.call("leo_app_call", json!({"tool": "secret"})).await;
    assert_eq!(
        error_text(&result),
        "denied: tool \"secret\" is denied to agent \"native_denied\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_hold_while_the_broker_is_down() {
    let (broker, _app) = broker_with_denials().await;
    let home = broker.kill_keep_home().await;
    // No broker: the sidecar reads config.yaml and client-tools.json itself.
    let agent = Agent::start(home.path(), AgentOpts::fallback("fallback_denied")).await;
    assert_eq!(agent.tool_names_without_messages().await, ["leo_app_tools"]);
    let result = agent.call("leo_app_call", json!({"tool": "open"})).await;
    assert!(error_text(&result).starts_with("denied: "), "{result:?}");
    let result = agent.call("leo_app_tools", json!({})).await;
    assert_eq!(error_text(&result), "no_client: broker not running");
}
