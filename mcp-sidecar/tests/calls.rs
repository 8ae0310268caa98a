//! Calls end to end: harness → leo-mcp → broker → app and back, and every way a call can end.

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{
    Agent, AgentOpts, App, content_json, error_text, text_of, tool, tool_with_timeout, wait_until,
};

/// A 1×1 PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_calls_with_text_and_image_results() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let mut snap = tool("snap");
    snap["label"] = json!("Take a snapshot");
    app.register_ok("camera", json!([tool("echo"), snap])).await;

    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let tools = agent.tools().await;
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(names, ["echo", "leo_messages", "snap"]);
    let snap_tool = tools.iter().find(|t| t.name == "snap").unwrap();
    assert_eq!(snap_tool.title.as_deref(), Some("Take a snapshot"));
    assert_eq!(snap_tool.description.as_deref(), Some("The snap tool"));
    assert_eq!(
        serde_json::Value::Object((*snap_tool.input_schema).clone()),
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    );

    // Text.
    let call = agent.spawn_call("echo", json!({"text": "hi"}));
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "claude");
    assert_eq!(req.data["tool"], "echo");
    assert_eq!(req.data["group"], "camera");
    assert_eq!(req.data["arguments"], json!({"text": "hi"}));
    assert!(
        req.data["session"].as_str().unwrap().starts_with("claude-"),
        "{}",
        req.data
    );
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "hi back"}]),
    )
    .await;
    let result = call.await.unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(text_of(&result), "hi back");

    // Image and text together, passed through verbatim.
    let content = json!([
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "text", "text": "a pixel", "annotations": {"audience": ["user"], "priority": 0.5}}
    ]);
    let call = agent.spawn_call("snap", json!({}));
    let req = app.next_request().await;
    app.serve(req.data["id"].as_str().unwrap(), content.clone())
        .await;
    let result = call.await.unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(content_json(&result), content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_errors_are_tool_errors_with_code_and_message() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("camera", json!([tool("snap")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let call = agent.spawn_call("snap", json!({}));
    let req = app.next_request().await;
    app.serve_error(
        req.data["id"].as_str().unwrap(),
        "camera_busy",
        "the camera is in use",
    )
    .await;
    let result = call.await.unwrap();
    assert_eq!(error_text(&result), "camera_busy: the camera is in use");

    // The broker's own refusals look the same.
    let result = agent.call("nope", json!({})).await;
    assert_eq!(
        error_text(&result),
        "no_client: no connected app serves tool \"nope\"; tools served now: snap"
    );
    let result = agent.call("snap", json!({"text": 5})).await;
    assert!(
        error_text(&result).starts_with("invalid_arguments: at $.text"),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_nobody_answers_times_out() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("slow", json!([tool_with_timeout("wait", 1)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let call = agent.spawn_call("wait", json!({}));
    let req = app.next_request().await;
    assert_eq!(req.data["timeout_s"], 1);
    let result = call.await.unwrap();
    assert_eq!(error_text(&result), "timeout: no result within 1 s");
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["reason"], "timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_cancel_reaches_the_app() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("slow", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let call = agent.spawn_call("wait", json!({}));
    let req = app.next_request().await;
    assert_eq!(req.data["timeout_s"], serde_json::Value::Null, "a handoff");
    // Dropping rmcp's call future sends notifications/cancelled for it.
    call.abort();
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], req.data["id"]);
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");

    // The session carries on.
    let call = agent.spawn_call("wait", json!({}));
    let req = app.next_request().await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "done"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_tool_cancels_its_call() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("gone")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let call = agent.spawn_call("gone", json!({}));
    app.next_request().await;
    app.register_ok("g", json!([])).await;
    let result = call.await.unwrap();
    assert_eq!(
        error_text(&result),
        "cancelled: tool \"gone\" was withdrawn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_agent_cancels_its_calls() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let _call = agent.spawn_call("wait", json!({}));
    let req = app.next_request().await;
    agent.kill();
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], req.data["id"]);
    assert_eq!(cancelled.data["reason"], "agent_gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_call_reports_progress() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool_with_timeout("wait", 0)]))
        .await;
    let agent = Agent::start(
        broker.home(),
        AgentOpts::native("claude").env("LEO_MCP_PROGRESS_MS", "100"),
    )
    .await;

    let call = agent.spawn_call("wait", json!({}));
    let req = app.next_request().await;
    wait_until("two progress notifications", || agent.progress() >= 2).await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "ok"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "ok");
    // No progress after the call ended.
    let after = agent.progress();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(agent.progress(), after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_with_local_refs_is_listed_inlined_and_checks_calls() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let mut place = tool("place");
    place["input_schema"] = json!({
        "type": "object",
        "$defs": {"point": {"type": "object", "required": ["x"],
                            "properties": {"x": {"$ref": "#/$defs/coord"}}},
                  "coord": {"type": "integer", "minimum": 0}},
        "required": ["at"],
        "properties": {"at": {"$ref": "#/$defs/point"}}
    });
    let mut remote = place.clone();
    remote["input_schema"]["properties"]["at"]["$ref"] = json!("https://example.com/point.json");
    let refused = app.register("map", json!([remote])).await;
    assert_eq!(refused.status, 422, "{refused:?}");
    assert_eq!(refused.body["code"], "invalid_tool");
    assert!(
        refused.body["error"].as_str().unwrap().contains(
            "at $.properties.at.$ref: $ref \"https://example.com/point.json\" is not local"
        ),
        "{refused:?}"
    );
    app.register_ok("map", json!([place])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    // Fallback harnesses see the inlined form too.
    let fallback = Agent::start(broker.home(), AgentOpts::fallback("claude")).await;
    let described = text_of(&fallback.call("leo_app_tools", json!({})).await);
    assert!(
        described.contains("minimum") && !described.contains("$ref"),
        "{described}"
    );

    let tools = agent.tools().await;
    // `$defs` is listed too, each definition inlined: no `$ref` is left anywhere.
    let point = json!({"type": "object", "required": ["x"],
                       "properties": {"x": {"type": "integer", "minimum": 0}}});
    let listed = tools
        .iter()
        .find(|t| t.name == "place")
        .expect("place listed");
    assert_eq!(
        serde_json::Value::Object((*listed.input_schema).clone()),
        json!({"type": "object", "required": ["at"], "properties": {"at": point.clone()},
               "$defs": {"point": point, "coord": {"type": "integer", "minimum": 0}}})
    );
    // The referenced definition checks the arguments.
    let result = agent.call("place", json!({"at": {"x": -1}})).await;
    assert!(
        error_text(&result).starts_with("invalid_arguments: at $.at.x"),
        "{result:?}"
    );
    let call = agent.spawn_call("place", json!({"at": {"x": 3}}));
    let req = app.next_request().await;
    assert_eq!(req.data["arguments"], json!({"at": {"x": 3}}));
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "ok"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "ok");
}
