//! A JSON-RPC client on the broker's `/mcp` by hand, for what no MCP SDK sends: a session
//! opened and ended step by step, and requests the tests make wrong on purpose. The SDK
//! clients (`mcp-sidecar/tests/interop/`) cover what harnesses send.

use serde_json::{Value, json};

use crate::http::{Http, Reply};

/// The protocol version of the session era.
pub const VERSION: &str = "2025-11-25";

/// A client on `/mcp` of `addr` with `token`, accepting what Streamable HTTP answers.
pub fn client(addr: std::net::SocketAddr, token: &str) -> Http {
    Http::tcp(addr, Some(token.to_owned()))
        .with_header("accept", "application/json, text/event-stream")
}

/// An `initialize` request from a client named `name`.
pub fn initialize(name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": name, "version": "0-raw"}
    }})
}

/// The headers of a request in session `id`.
pub fn in_session(id: &str) -> [(&str, &str); 2] {
    [("mcp-session-id", id), ("mcp-protocol-version", VERSION)]
}

/// Opens a session: `initialize`, then `notifications/initialized`. Its id.
pub async fn open_session(http: &Http, name: &str) -> String {
    let opened = http.post("/mcp", &initialize(name)).await;
    assert_eq!(opened.status, 200, "{opened:?}");
    let id = opened
        .header("mcp-session-id")
        .expect("an Mcp-Session-Id")
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = http
        .send("POST", "/mcp", body.to_string().into(), &in_session(&id))
        .await;
    assert_eq!(sent.status, 202, "{sent:?}");
    id
}

/// A `tools/call` of `tool` with no arguments, as a body.
pub fn call(id: u64, tool: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": {}}})
    .to_string()
}

/// Calls `tool` in session `session` and returns the JSON-RPC response from the SSE answer.
pub async fn call_in(http: &Http, session: &str, id: u64, tool: &str) -> Value {
    let reply = http
        .send("POST", "/mcp", call(id, tool).into(), &in_session(session))
        .await;
    response_of(&reply, id)
}

/// The JSON-RPC response with `id` among the `data:` lines of an SSE answer.
pub fn response_of(reply: &Reply, id: u64) -> Value {
    let text = match &reply.body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no response {id} in {reply:?}"))
}

/// Starts a `tools/call` of `tool` in `session` and returns its response unread: the call's
/// answer stream, open until the answer (or dropped, as a client that went away drops it).
pub async fn start_call(
    http: &Http,
    session: &str,
    id: u64,
    tool: &str,
) -> hyper::Response<hyper::body::Incoming> {
    http.open("POST", "/mcp", call(id, tool).into(), &in_session(session))
        .await
}

/// Calls `tool` in `session`, has `app` answer it with `text`, and checks the answer arrives.
pub async fn call_answered(
    http: &Http,
    session: &str,
    id: u64,
    tool: &str,
    app: &mut crate::app::App,
    text: &str,
) {
    let calling = tokio::spawn({
        let (http, session, tool) = (http.clone(), session.to_owned(), tool.to_owned());
        async move { call_in(&http, &session, id, &tool).await }
    });
    let request = app.next_request_id().await;
    app.serve(&request, json!([{"type": "text", "text": text}]))
        .await;
    let answer = calling.await.expect("the call's task");
    assert_eq!(answer["result"]["content"][0]["text"], text, "{answer}");
}
