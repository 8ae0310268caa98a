//! The MCP surface itself, checked with raw JSON-RPC lines: what a harness that is not rmcp
//! sees on the wire.

use serde_json::{Value, json};

use crate::support::{Agent, AgentOpts, App, Raw, text_of, tool};

fn initialize(id: u64, client: &str) -> serde_json::Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": client, "version": "1.0.0"}
        }
    })
}

/// A `server/discover` as a 2026-07-28 client sends it, with complete `_meta`.
fn discover_with_meta(id: u64) -> serde_json::Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "goose-cli", "version": "1.0.0"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    })
}

/// With discover turned off (`LEO_MCP_DISCOVER=0`; `--no-discover` is the same setting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_is_refused_and_initialize_declares_list_changed() {
    let home = tempfile::tempdir().unwrap();
    let mut mcp = Raw::start_with(home.path(), "probe", &[], &[("LEO_MCP_DISCOVER", "0")]);

    // Discover-first clients get -32601 and fall back to initialize, with or without _meta.
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover"}),
        discover_with_meta(3),
    ] {
        let reply = mcp.request(msg).await;
        assert_eq!(reply["error"]["code"], -32601, "{reply}");
    }

    let reply = mcp.request(initialize(4, "raw-client")).await;
    let result = &reply["result"];
    assert_eq!(
        result["capabilities"]["tools"]["listChanged"], true,
        "{reply}"
    );
    assert_eq!(result["serverInfo"]["name"], "leo-mcp", "{reply}");
    assert_eq!(result["protocolVersion"], "2025-06-18", "{reply}");
    // Claude Code channels are opt-in (`--channels`): nothing experimental by default.
    assert_eq!(result["capabilities"].get("experimental"), None, "{reply}");
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let reply = mcp
        .request(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}))
        .await;
    assert_eq!(reply["result"], json!({}), "{reply}");

    // Resources are offered (by apps, none here): an empty list, not -32601.
    let reply = mcp
        .request(json!({"jsonrpc": "2.0", "id": 8, "method": "resources/list", "params": {}}))
        .await;
    assert_eq!(reply["result"]["resources"], json!([]), "{reply}");
    for (id, method) in [(6, "foo/bar"), (7, "server/discover")] {
        let reply = mcp
            .request(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}))
            .await;
        assert_eq!(reply["error"]["code"], -32601, "{method}: {reply}");
        if method == "foo/bar" {
            assert_eq!(
                reply["error"]["message"], "method not found: foo/bar",
                "{reply}"
            );
        }
    }

    // A cancel for a request that does not exist is ignored, and the session goes on.
    mcp.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 99, "reason": "test"}}),
    )
    .await;
    let reply = mcp
        .request(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))
        .await;
    // No app ever registered: only Leo's own tool.
    let names: Vec<&Value> = reply["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("leo_messages")], "{reply}");

    assert!(mcp.close().await.success());
}

/// By default `server/discover` is answered (2026-07-28), and a client that only knows
/// `initialize` gets the same handshake as with discover turned off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_is_answered_by_default_and_initialize_still_works() {
    let home = tempfile::tempdir().unwrap();
    let mut mcp = Raw::start(home.path(), "probe");
    let reply = mcp.request(discover_with_meta(1)).await;
    let versions = reply["result"]["supportedVersions"].to_string();
    assert!(versions.contains("2026-07-28"), "{reply}");
    assert!(mcp.close().await.success());

    let mut mcp = Raw::start(home.path(), "probe");
    let reply = mcp.request(initialize(1, "raw-client")).await;
    assert_eq!(reply["result"]["protocolVersion"], "2025-06-18", "{reply}");
    assert_eq!(
        reply["result"]["capabilities"]["tools"]["listChanged"], true,
        "{reply}"
    );
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let reply = mcp
        .request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await;
    assert_eq!(
        reply["result"]["tools"][0]["name"], "leo_messages",
        "{reply}"
    );
    assert!(mcp.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_protocol_version_is_answered_with_the_newest_handshake_version() {
    let home = tempfile::tempdir().unwrap();
    let mut mcp = Raw::start(home.path(), "probe");
    let mut msg = initialize(1, "raw-client");
    msg["params"]["protocolVersion"] = json!("2026-07-28");
    let reply = mcp.request(msg).await;
    assert_eq!(reply["result"]["protocolVersion"], "2025-11-25", "{reply}");
    assert!(mcp.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_broker_calls_end_with_no_client() {
    let home = tempfile::tempdir().unwrap();
    let mut mcp = Raw::start(home.path(), "probe");
    mcp.request(initialize(1, "claude-code")).await;
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let reply = mcp
        .request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "anything", "arguments": {}}}))
        .await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert_eq!(
        reply["result"]["content"][0]["text"], "no_client: broker not running",
        "{reply}"
    );
    assert!(mcp.close().await.success());
}

#[test]
fn a_bad_agent_name_is_a_start_up_error() {
    let out = std::process::Command::new(leo_testkit::bin("leo-mcp"))
        .args(["--agent", "no spaces"])
        .env("LEO_HOME", "/nonexistent")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "stdout must stay clean");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid agent name"), "{err}");
}

/// With discover turned off, a discover-first client falls back to `initialize`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discover_first_client_falls_back_to_initialize_and_works() {
    let broker = leo_testkit::Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut opts = AgentOpts::native("modern").env("LEO_MCP_DISCOVER", "0");
    opts.discover_first = true;
    let agent = Agent::start(broker.home(), opts).await;
    let info = agent
        .client
        .peer()
        .peer_info()
        .expect("initialize was used");
    assert_eq!(info.protocol_version.as_str(), "2025-11-25");
    assert_eq!(agent.tool_names_without_messages().await, ["echo"]);
    let call = agent.spawn_call("echo", json!({"text": "x"}));
    let req = app.next_request().await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "y"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "y");
}
