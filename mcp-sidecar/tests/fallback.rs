//! Fallback mode: `leo_app_tools` and `leo_app_call`, listed once some app has ever registered.

use leo_testkit::Broker;
use serde_json::{Value, json};

use crate::support::{Agent, AgentOpts, App, error_text, text_of, tool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_tools_appear_only_after_a_first_registration() {
    let broker = Broker::start().await;
    // A fresh home: no app ever registered, so only Leo's own leo_messages is listed.
    let early = Agent::start(broker.home(), AgentOpts::fallback("codex")).await;
    assert_eq!(early.tool_names().await, ["leo_messages"]);

    let mut app = App::connect(&broker.http()).await;
    let mut echo = tool("echo");
    echo["label"] = json!("Echo");
    app.register_ok("g", json!([echo])).await;

    // Sampled once per session: the early session still lists nothing, and gets no
    // notification (it would not re-list anyway)...
    assert_eq!(early.tool_names().await, ["leo_messages"]);
    assert_eq!(early.list_changed(), 0);
    // ...but a new session sees both.
    let agent = Agent::start(broker.home(), AgentOpts::fallback("codex")).await;
    assert_eq!(
        agent.tool_names().await,
        ["leo_app_call", "leo_app_tools", "leo_messages"]
    );

    // leo_app_tools: what apps offer now, with schemas, as JSON text.
    let listed: Value =
        serde_json::from_str(&text_of(&agent.call("leo_app_tools", json!({})).await))
            .expect("leo_app_tools answers JSON");
    assert_eq!(listed["tools"][0]["name"], "echo");
    assert_eq!(listed["tools"][0]["title"], "Echo");
    assert_eq!(listed["tools"][0]["description"], "The echo tool");
    assert_eq!(
        listed["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    );

    // leo_app_call forwards the inner call; the result passes through.
    let call = agent.spawn_call(
        "leo_app_call",
        json!({"tool": "echo", "args": {"text": "yo"}}),
    );
    let req = app.next_request().await;
    assert_eq!(req.data["tool"], "echo");
    assert_eq!(req.data["arguments"], json!({"text": "yo"}));
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "yo!"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "yo!");

    // Bad shapes are the caller's to fix.
    let result = agent.call("leo_app_call", json!({"args": {}})).await;
    assert_eq!(
        error_text(&result),
        "invalid_arguments: at $.tool: required"
    );
    let result = agent.call("leo_app_call", json!({"tool": "nope"})).await;
    assert_eq!(
        error_text(&result),
        "no_client: no connected app serves tool \"nope\"; tools served now: echo"
    );

    // Tools registered later show up in leo_app_tools without a restart.
    app.register_ok("h", json!([tool("later")])).await;
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let text = text_of(&agent.call("leo_app_tools", json!({})).await);
        if text.contains("\"later\"") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "later never listed: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
