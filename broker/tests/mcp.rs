//! `/mcp`'s checks against the real broker: each bad request gets a clear JSON-RPC error with
//! its documented status and code, and none disturbs a session that is working meanwhile.
//! (What the agent sees over `/mcp` is tested with the MCP SDKs in `mcp-sidecar/tests/http.rs`.)

use leo_testkit::{Broker, Reply, mcp, wire};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::support::App;

/// A JSON-RPC refusal with `status` and Leo's `code`; its message.
fn refused(reply: &Reply, status: u16, code: &str) -> String {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.body["jsonrpc"], "2.0", "{reply:?}");
    assert_eq!(reply.body["id"], Value::Null, "{reply:?}");
    assert_eq!(reply.body["error"]["data"]["code"], code, "{reply:?}");
    reply.body["error"]["message"].as_str().unwrap().to_owned()
}

/// A client that sends a request head and the first bytes of its body, then nothing.
async fn slow_client(broker: &Broker) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nLeo-Agent: slow\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 1000\r\n\r\n{{\"jsonrpc\":",
        broker.addr,
        broker.agent_token()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

/// A request whose head declares a body of `len` bytes, of which it sends none; the status and
/// the JSON body of the answer. (A client that writes the whole oversized body may instead see
/// its write fail: the broker answers and closes without reading the rest.)
async fn declared_body(broker: &Broker, len: usize) -> (u16, Value) {
    use tokio::io::AsyncReadExt;
    let mut s = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nLeo-Agent: good\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {len}\r\n\r\n",
        broker.addr,
        broker.agent_token()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&answer);
            if text.contains("\r\n\r\n") && text.trim_end().ends_with('}') {
                break;
            }
        }
    });
    read.await.expect("an answer to the declared body");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let json = &text[text.find('{').unwrap_or(0)..=text.rfind('}').unwrap_or(0)];
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_clearly_and_disturb_no_session() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([crate::support::tool("echo")]))
        .await;
    let shared = broker.agent_token();
    let own = broker.add_agent("owned");
    let good = mcp::client(broker.addr, &shared).with_header("leo-agent", "good");
    let session = mcp::open_session(&good, "claude-code").await;
    // A call of the good session stays in flight through everything below.
    let in_flight = tokio::spawn({
        let (good, session) = (good.clone(), session.clone());
        async move { mcp::call_in(&good, &session, 2, "echo").await }
    });
    let first = app.next_request_id().await;
    let _slow = slow_client(&broker).await;
    let init = mcp::initialize("claude-code");

    // The Host check of every route comes first: its plain 403.
    let r = good.with_host("evil.example:80").post("/mcp", &init).await;
    assert_eq!((r.status, r.body.as_str()), (403, Some("forbidden host")));

    // A browser's foreign Origin, before any token is looked at; this very origin passes.
    let r = good
        .with_header("origin", "http://evil.example")
        .post("/mcp", &init)
        .await;
    assert!(refused(&r, 403, "forbidden").contains("evil.example"));
    let origin = format!("http://{}", broker.addr);
    let r = good
        .with_header("origin", &origin)
        .post("/mcp", &init)
        .await;
    assert_eq!(r.status, 200, "{r:?}");

    // Tokens: none, unknown, of the wrong kind, the shared one without its agent.
    let r = good.with_token(None).post("/mcp", &init).await;
    refused(&r, 401, "unauthorized");
    // RFC 9728 §5.1: the challenge names where an OAuth client learns how to get a token.
    let metadata = format!(
        "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
        broker.addr
    );
    assert_eq!(r.header("www-authenticate"), Some(metadata.as_str()));
    let r = good
        .with_token(Some(&"0".repeat(64)))
        .post("/mcp", &init)
        .await;
    refused(&r, 401, "unauthorized");
    let r = good
        .with_token(Some(&broker.operator_token()))
        .post("/mcp", &init)
        .await;
    assert!(refused(&r, 403, "forbidden").contains("operator token"));
    wire::check("http/mcp_refusal.response.json", &r.body);
    let r = mcp::client(broker.addr, &shared).post("/mcp", &init).await;
    assert!(refused(&r, 401, "unauthorized").contains("Leo-Agent"));
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\""),
        "{challenge}"
    );
    let r = mcp::client(broker.addr, &shared)
        .with_header("leo-agent", "no/such")
        .post("/mcp", &init)
        .await;
    refused(&r, 400, "invalid_parameter");
    // An agent's own token opens its agent only, and the shared token not that agent.
    let r = mcp::client(broker.addr, &own)
        .with_header("leo-agent", "good")
        .post("/mcp", &init)
        .await;
    refused(&r, 403, "forbidden");
    let r = mcp::client(broker.addr, &shared)
        .with_header("leo-agent", "owned")
        .post("/mcp", &init)
        .await;
    refused(&r, 401, "unauthorized");
    let owned = mcp::client(broker.addr, &own);
    mcp::open_session(&owned, "opencode").await;

    // Sessions: unknown, and another agent's, are the same 404.
    let call = mcp::call(9, "echo");
    let r = owned
        .send(
            "POST",
            "/mcp",
            call.clone().into(),
            &mcp::in_session(&session),
        )
        .await;
    refused(&r, 404, "not_found");
    let r = good
        .send(
            "POST",
            "/mcp",
            call.into(),
            &mcp::in_session("no-such-session"),
        )
        .await;
    refused(&r, 404, "not_found");

    // Bodies: not JSON, not JSON-RPC, too large.
    let r = good.post_raw("/mcp", "{\"jsonrpc\":").await;
    refused(&r, 400, "invalid_parameter");
    assert_eq!(r.body["error"]["code"], -32700, "{r:?}");
    let r = good.post("/mcp", &json!({"hello": 1})).await;
    assert!(refused(&r, 400, "invalid_parameter").contains("JSON-RPC"));
    let (status, body) = declared_body(&broker, 3 * 1024 * 1024).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["data"]["code"], "body_too_large", "{body}");
    // Written out, the same body is refused while it is read: the 413, or (the broker closes
    // without reading the rest) a write that fails; never anything else.
    let big = vec![b' '; 3 * 1024 * 1024];
    match good.try_post_raw("/mcp", big).await {
        Ok(status) => assert_eq!(status, 413),
        Err(e) => eprintln!("the broker closed while the body was written: {e}"),
    }

    // The session in flight never noticed: its call ends with the app's answer, and it calls
    // again.
    app.serve(&first, json!([{"type": "text", "text": "still here"}]))
        .await;
    let answer = in_flight.await.unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], "still here",
        "{answer}"
    );
    mcp::call_answered(&good, &session, 3, "echo", &mut app, "again").await;
}

/// One agent's token cannot take every session: a flood of `/mcp` sessions stops at the
/// agent's limit (`web.max_sessions_per_agent`, 64), which its IPC upgrades share, while
/// another agent over `/mcp` and over the upgrade, and a local agent on `run/sidecar.sock`,
/// are admitted; a session that ends gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agent_token_cannot_take_every_session() {
    use futures_util::StreamExt;
    use leo_testkit::Ipc;
    let broker = Broker::start().await;
    let shared = broker.agent_token();
    let flood = mcp::client(broker.addr, &shared).with_header("leo-agent", "flood");
    let init = mcp::initialize("flood");
    let answers: Vec<(u16, Option<String>)> = futures_util::stream::iter(0..1040)
        .map(|_| async {
            let r = flood.post("/mcp", &init).await;
            (r.status, r.header("mcp-session-id").map(str::to_owned))
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let opened: Vec<&String> = answers.iter().filter_map(|(_, id)| id.as_ref()).collect();
    assert_eq!(opened.len(), 64, "sessions of one agent");
    assert!(answers.iter().all(|(s, _)| [200, 403].contains(s)));
    let r = flood.post("/mcp", &init).await;
    assert!(refused(&r, 403, "forbidden").contains("web.max_sessions_per_agent"));
    let auth = format!("Bearer {shared}");
    let upgrade = |agent: &'static str| {
        let auth = auth.clone();
        async move {
            Ipc::upgrade(
                broker.addr,
                &[("authorization", &auth), ("leo-agent", agent)],
            )
            .await
        }
    };
    assert_eq!(upgrade("flood").await.err().map(|r| r.status), Some(403));

    let other = mcp::client(broker.addr, &shared).with_header("leo-agent", "other");
    mcp::open_session(&other, "claude-code").await;
    let mut remote = upgrade("remote")
        .await
        .unwrap_or_else(|r| panic!("{}", r.body));
    assert_eq!(remote.say_hello(&shared, "remote").await["type"], "welcome");
    let socket = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    let _local = Ipc::hello(&socket, &shared, "local").await;

    let ended = flood
        .send(
            "DELETE",
            "/mcp",
            Default::default(),
            &mcp::in_session(opened[0]),
        )
        .await;
    assert_eq!(ended.status, 204, "{ended:?}");
    crate::support::eventually(|| async { flood.post("/mcp", &init).await.status == 200 }).await;
}

/// Sessions over the network take at most three quarters of `web.max_sessions` (48 of the 64
/// set here; 768 of the default 1,024): a flood of 60 `/mcp` sessions (one agent, with a limit
/// of its own above that) stops there, and a local agent on `run/sidecar.sock` is still
/// admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_over_the_network_leaves_the_socket_its_sessions() {
    use futures_util::StreamExt;
    let config = "web:\n  max_sessions: 64\n  max_sessions_per_agent: 2000\n";
    let broker = Broker::start_with(config).await;
    let shared = broker.agent_token();
    let flood = mcp::client(broker.addr, &shared).with_header("leo-agent", "flood");
    let init = mcp::initialize("flood");
    let statuses: Vec<u16> = futures_util::stream::iter(0..60)
        .map(|_| async { flood.post("/mcp", &init).await.status })
        .buffer_unordered(64)
        .collect()
        .await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 48);
    let r = flood.post("/mcp", &init).await;
    assert!(refused(&r, 403, "forbidden").contains("unix sockets"));
    let socket = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    for agent in ["local-1", "local-2"] {
        let _local = leo_testkit::Ipc::hello(&socket, &shared, agent).await;
    }
}
