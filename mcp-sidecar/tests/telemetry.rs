//! OpenTelemetry traces end to end: the real broker with `telemetry.otlp_endpoint` pointing at
//! the test kit's OTLP/HTTP receiver, the real `leo-mcp` (which learns the endpoint from the
//! broker's welcome), and the test's app. One trace per call: leo-mcp's `tools/call <tool>`
//! server span, the broker's `client_tool.request <tool>` span under it, and the broker span's
//! context handed to the app in `client_tool.request`.

use leo_testkit::Broker;
use leo_testkit::otlp::{KIND_SERVER, ReceivedSpan, Receiver};
use serde_json::json;

use crate::support::{Agent, AgentOpts, App, Raw, text_of, tool};

fn config(endpoint: &str) -> String {
    format!("telemetry:\n  otlp_endpoint: {endpoint}\n")
}

/// The sidecar exports every 100 ms, so the test need not wait for the default 5 s batch.
fn quick(agent: &str) -> AgentOpts {
    AgentOpts::native(agent).env("OTEL_BSP_SCHEDULE_DELAY", "100")
}

async fn mcp_span(receiver: &Receiver, tool: &str, request: &str) -> ReceivedSpan {
    let name = format!("tools/call {tool}");
    receiver
        .wait_for(&name, |s| {
            s.service == "leo-mcp"
                && s.name == name
                && s.attr("jsonrpc.request.id") == Some(request)
        })
        .await
}

async fn broker_span(receiver: &Receiver, request_id: &str) -> ReceivedSpan {
    receiver
        .wait_for(&format!("of the broker for {request_id}"), |s| {
            s.service == "leo-broker" && s.attr("leo.request.id") == Some(request_id)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_one_trace_from_leo_mcp_through_the_broker_to_the_app() {
    let receiver = Receiver::start().await;
    let broker = Broker::start_with(&config(&receiver.url())).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("camera", json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), quick("claude")).await;

    let call = agent.spawn_call("echo", json!({"text": "hi"}));
    let req = app.next_request().await;
    let id = req.data["id"].as_str().unwrap().to_owned();
    let traceparent = req.data["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("client_tool.request carries no traceparent: {}", req.data));
    app.serve(&id, json!([{"type": "text", "text": "hi back"}]))
        .await;
    assert_eq!(text_of(&call.await.unwrap()), "hi back");

    let relayed = broker_span(&receiver, &id).await;
    // The rmcp client numbers its requests: initialize 0, tools/list 1, this call 2.
    let mcp = receiver
        .wait_for("tools/call echo", |s| {
            s.service == "leo-mcp" && s.name == "tools/call echo"
        })
        .await;
    assert_eq!(mcp.kind, KIND_SERVER, "{mcp:#?}");
    assert_eq!(mcp.parent_span_id, "", "no harness context: a root span");
    for (key, want) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "echo"),
        ("gen_ai.operation.name", "execute_tool"),
        ("network.transport", "pipe"),
        ("mcp.protocol.version", "2025-11-25"),
    ] {
        assert_eq!(mcp.attr(key), Some(want), "{key} in {mcp:#?}");
    }
    assert!(mcp.attr("jsonrpc.request.id").is_some(), "{mcp:#?}");
    let session = mcp.attr("mcp.session.id").unwrap();
    assert!(session.starts_with("claude-"), "{mcp:#?}");
    assert_eq!(mcp.attr("error.type"), None, "{mcp:#?}");

    assert_eq!(relayed.name, "client_tool.request echo");
    assert_eq!(relayed.trace_id, mcp.trace_id, "one trace");
    assert_eq!(
        relayed.parent_span_id, mcp.span_id,
        "the broker's span is the child"
    );
    assert_eq!(relayed.attr("gen_ai.tool.name"), Some("echo"));
    assert_eq!(relayed.attr("mcp.session.id"), Some(session));
    assert_eq!(relayed.attr("leo.agent"), Some("claude"));
    assert_eq!(relayed.attr("leo.group"), Some("camera"));
    assert_eq!(relayed.attr("leo.client.id"), Some(app.id.as_str()));
    assert_eq!(relayed.attr("leo.outcome"), Some("result"));
    assert!(
        relayed.events.iter().any(|e| e == "claimed"),
        "{relayed:#?}"
    );
    assert_eq!(relayed.status, 0, "{relayed:#?}");
    // The app was handed the broker span's own context.
    let expected = format!("00-{}-{}-01", relayed.trace_id, relayed.span_id);
    assert_eq!(traceparent, expected);

    // An app error: `tool_error` on leo-mcp's span, the app's code on the broker's.
    let call = agent.spawn_call("echo", json!({"text": "no"}));
    let id = app.next_request_id().await;
    app.serve_error(&id, "camera_busy", "busy").await;
    assert_eq!(call.await.unwrap().is_error, Some(true));
    let failed = broker_span(&receiver, &id).await;
    assert_eq!(
        failed.attr("error.type"),
        Some("camera_busy"),
        "{failed:#?}"
    );
    assert_eq!(failed.attr("leo.outcome"), Some("error"));
    assert_eq!(failed.status, 2, "ERROR status: {failed:#?}");
    let mcp_failed = receiver
        .wait_for("tools/call echo with tool_error", |s| {
            s.service == "leo-mcp" && s.trace_id == failed.trace_id
        })
        .await;
    assert_eq!(mcp_failed.attr("error.type"), Some("tool_error"));
    assert_eq!(failed.parent_span_id, mcp_failed.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_trace_context_in_meta_is_the_parent() {
    let receiver = Receiver::start().await;
    let broker = Broker::start_with(&config(&receiver.url())).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("camera", json!([tool("echo")])).await;
    let mut mcp = Raw::start_with(
        broker.home(),
        "probe",
        &[],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw-client", "version": "1"}}});
    mcp.request(init).await;
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let call = json!({"jsonrpc": "2.0", "id": "call-7", "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "hi"},
        "_meta": {"traceparent": format!("00-{trace}-{parent}-01")}}});
    mcp.send(&call).await;
    let id = app.next_request_id().await;
    app.serve(&id, json!([{"type": "text", "text": "ok"}]))
        .await;
    loop {
        if mcp.recv().await["id"] == "call-7" {
            break;
        }
    }

    let span = mcp_span(&receiver, "echo", "call-7").await;
    assert_eq!(span.trace_id, trace, "{span:#?}");
    assert_eq!(span.parent_span_id, parent, "{span:#?}");
    assert_eq!(span.attr("mcp.protocol.version"), Some("2025-06-18"));
    let broker_side = broker_span(&receiver, &id).await;
    assert_eq!(broker_side.trace_id, trace);
    assert_eq!(broker_side.parent_span_id, span.span_id);
    assert!(mcp.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_never_breaks_a_call() {
    // A port that was just free and is closed now: every export is refused.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let broker = Broker::start_with(&config(&dead)).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("camera", json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), quick("claude")).await;
    for n in 0..3 {
        let call = agent.spawn_call("echo", json!({"text": "hi"}));
        let req = app.next_request().await;
        assert!(req.data["traceparent"].is_string(), "{}", req.data);
        let text = format!("answer {n}");
        app.serve(
            req.data["id"].as_str().unwrap(),
            json!([{"type": "text", "text": text}]),
        )
        .await;
        assert_eq!(text_of(&call.await.unwrap()), text);
        // Past the sidecar's 100 ms export schedule, so the failed exports happen meanwhile.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let status = broker.http().get("/api/v1/status").await;
    assert_eq!(status.status, 200, "the broker still answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_traced_or_sent() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("camera", json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let call = agent.spawn_call("echo", json!({"text": "hi"}));
    let req = app.next_request().await;
    assert!(req.data.get("traceparent").is_none(), "{}", req.data);
    app.serve(req.data["id"].as_str().unwrap(), json!([])).await;
    call.await.unwrap();
}
