//! Bad input of every kind gets its documented code and loses nothing.

use leo_testkit::{Broker, Sse};
use serde_json::{Value, json};

use crate::support::{App, agent, result_of, tool};

#[tokio::test]
async fn auth_and_host_checks() {
    let broker = Broker::start().await;
    let http = broker.http();
    let agent_http = http.with_token(Some(&broker.agent_token()));
    assert_eq!(
        http.with_token(None)
            .get("/api/v1/client-tools")
            .await
            .code(401),
        "unauthorized"
    );
    assert_eq!(
        http.with_token(Some("nope"))
            .get("/api/v1/client-tools")
            .await
            .code(401),
        "unauthorized"
    );
    let wrong = "0".repeat(64);
    assert_eq!(
        http.with_token(Some(&wrong))
            .get("/api/v1/client-tools")
            .await
            .code(401),
        "unauthorized"
    );
    // The agent token may watch but not provide.
    let r = Sse::try_open(&agent_http, "/api/v1/events?client_tools=1", None).await;
    assert_eq!(r.status, 403);
    for (method, path) in [
        ("POST", "/api/v1/client-tools"),
        ("GET", "/api/v1/client-tools"),
        ("GET", "/api/v1/client-tools/requests"),
        ("POST", "/api/v1/client-tools/requests/r_x/claim"),
        ("POST", "/api/v1/client-tools/requests/r_x/result"),
    ] {
        let r = agent_http.send(method, path, "{}".into(), &[]).await;
        assert_eq!(r.code(403), "forbidden", "{method} {path}");
    }
    // The Host check runs before auth and answers in plain text.
    for host in ["", "127.0.0.1", "localhost:1", "evil.example:PORT", "[::1]"] {
        let host = host.replace("PORT", &broker.addr.port().to_string());
        let r = http
            .with_token(None)
            .with_host(&host)
            .get("/api/v1/client-tools")
            .await;
        assert_eq!(r.status, 403, "host {host:?}");
        assert_eq!(
            r.body,
            Value::String("forbidden host".into()),
            "host {host:?}"
        );
        assert!(r.content_type.starts_with("text/plain"));
    }
    let port = broker.addr.port();
    for host in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("127.0.0.1:{port}"),
    ] {
        assert_eq!(
            http.with_host(&host)
                .get("/api/v1/client-tools")
                .await
                .status,
            200,
            "{host}"
        );
    }
    assert_eq!(http.get("/nowhere").await.code(404), "not_found");
    assert_eq!(
        http.send("DELETE", "/api/v1/client-tools", Default::default(), &[])
            .await
            .code(405),
        "method_not_allowed"
    );
}

#[tokio::test]
async fn malformed_bodies_name_the_field() {
    let broker = Broker::start_with("web:\n  max_body_bytes: 4096\n").await;
    let app = App::connect(&broker.http()).await;
    let id = app.id.clone();
    let cases: Vec<(String, u16, &str, &str)> = vec![
        (
            r#"{"client_id": "x", "group": "g", "tools": ["#.into(),
            400,
            "invalid_parameter",
            "invalid JSON",
        ),
        ("not json".into(), 400, "invalid_parameter", "invalid JSON"),
        (
            "".into(),
            400,
            "invalid_parameter",
            "a JSON body is required",
        ),
        (
            r#"{"client_id": 5, "group": "g", "tools": []}"#.into(),
            400,
            "invalid_parameter",
            "at $.client_id",
        ),
        (
            format!(r#"{{"client_id": "{id}", "group": "g"}}"#),
            400,
            "invalid_parameter",
            "at $.tools: missing field",
        ),
        (
            format!(r#"{{"client_id": "{id}", "group": "g", "tools": {{}}}}"#),
            400,
            "invalid_parameter",
            "at $.tools",
        ),
        (
            format!(r#"{{"client_id": "{id}", "group": "g", "tools": [], "extra": true}}"#),
            400,
            "unknown_parameter",
            "at $.extra",
        ),
        (
            format!(
                r#"{{"client_id": "{id}", "group": "g", "tools": [{{"name": "a", "description": "d", "input_schema": {{"type": "object"}}, "runtime": "browser"}}]}}"#
            ),
            400,
            "unknown_parameter",
            "at $.tools[0].runtime",
        ),
        (
            format!(
                r#"{{"client_id": "{id}", "group": "g", "tools": [{{"name": "a", "description": "d", "input_schema": {{"type": "object"}}, "execution": "browser"}}]}}"#
            ),
            400,
            "invalid_parameter",
            "at $.tools[0].execution",
        ),
        (
            format!(
                r#"{{"client_id": "{id}", "group": "g", "tools": [{{"name": "a", "description": "d", "input_schema": {{"type": "object"}}, "annotations": {{"readOnly": true}}}}]}}"#
            ),
            400,
            "unknown_parameter",
            "at $.tools[0].annotations.readOnly",
        ),
        (
            format!(
                r#"{{"client_id": "{id}", "group": "g", "tools": [{{"name": "a", "description": "d", "input_schema": {{"type": "object"}}, "timeout_s": -5}}]}}"#
            ),
            400,
            "invalid_parameter",
            "at $.tools[0].timeout_s",
        ),
        (
            format!(
                r#"{{"client_id": "{id}", "group": "g", "tools": [{{"name": "a", "description": "d"}}]}}"#
            ),
            400,
            "invalid_parameter",
            "at $.tools[0].input_schema: missing field",
        ),
        (
            format!(r#"{{"client_id": "{id}", "group": "g", "tools": []}} trailing"#),
            400,
            "invalid_parameter",
            "invalid JSON",
        ),
        (
            format!(
                r#"{{"client_id": "{id}", "group": "g", "tools": [], "pad": "{}"}}"#,
                "x".repeat(5000)
            ),
            413,
            "body_too_large",
            "4096",
        ),
    ];
    for (body, status, code, fragment) in cases {
        let r = broker
            .http()
            .post_raw("/api/v1/client-tools", body.clone())
            .await;
        assert_eq!(r.code(status), code, "{body:.120}");
        assert!(
            r.error().contains(fragment),
            "{body:.120}: {:?} lacks {fragment:?}",
            r.error()
        );
    }
    let r = broker
        .http()
        .post_raw(
            "/api/v1/client-tools/requests/r_x/claim",
            "{\"client_id\": [1]}",
        )
        .await;
    assert_eq!(r.code(400), "invalid_parameter");
    let r = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=yes")
        .await;
    assert_eq!(r.code(400), "invalid_parameter");
    let r = broker
        .http()
        .get("/api/v1/client-tools/requests?all=1")
        .await;
    assert_eq!(r.code(400), "unknown_parameter");
    // Nothing was lost: the app still works.
    app.register("g", json!([tool("still_works")])).await.data();
}

#[tokio::test]
async fn bad_ipc_frames_get_error_frames_and_the_session_survives() {
    let broker = Broker::start().await;
    let sock = broker.home().join("run/sidecar.sock");
    // A wrong token, a wrong version, a first frame that is not hello, garbage.
    for (hello, code) in [
        (
            json!({"type": "hello", "v": 1, "agent": "a", "session": "s", "token": "wrong", "mode": "native"}),
            "unauthorized",
        ),
        (
            json!({"type": "hello", "v": 9, "agent": "a", "session": "s", "token": broker.agent_token(), "mode": "native"}),
            "invalid_frame",
        ),
        (
            json!({"type": "hello", "v": 1, "agent": "bad name", "session": "s", "token": broker.agent_token(), "mode": "native"}),
            "invalid_frame",
        ),
        (
            json!({"type": "call", "id": 1, "tool": "x", "arguments": {}}),
            "invalid_frame",
        ),
        (
            json!({"type": "hello", "v": 1, "agent": "a", "session": "s", "token": broker.agent_token(), "mode": "sideways"}),
            "invalid_frame",
        ),
    ] {
        let mut ipc = leo_testkit::Ipc::connect(&sock).await;
        ipc.send(&hello).await;
        let f = ipc.recv().await;
        assert_eq!(
            (f["type"].as_str(), f["code"].as_str()),
            (Some("error"), Some(code)),
            "{hello}: {f}"
        );
        assert!(
            ipc.recv_or_end().await.is_none(),
            "closed after a refused hello"
        );
    }
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.send_raw("{not json").await;
    let f = ipc.recv_of("error").await;
    assert_eq!(f["code"], "invalid_frame");
    ipc.send(&json!({"type": "call", "id": 1, "tool": "echo"}))
        .await;
    let f = ipc.recv_of("error").await;
    assert!(f["message"].as_str().unwrap().contains("arguments"), "{f}");
    ipc.send(&json!({"type": "teleport"})).await;
    assert_eq!(ipc.recv_of("error").await["code"], "invalid_frame");
    ipc.send(&json!({"type": "call", "id": 1, "tool": "echo", "arguments": {}, "x": 1}))
        .await;
    assert_eq!(ipc.recv_of("error").await["code"], "invalid_frame");
    // The session still works.
    ipc.call(7, "echo", json!({})).await;
    let mut app = app;
    let id = app.next_request_id().await;
    app.claim(&id).await.data();
    app.answer(&id, json!([{"type": "text", "text": "ok"}]))
        .await
        .data();
    assert_eq!(result_of(&mut ipc, 7).await["content"][0]["text"], "ok");
    // The same call id twice while in flight is refused, not merged.
    ipc.call(8, "echo", json!({})).await;
    ipc.call(8, "echo", json!({})).await;
    assert_eq!(
        result_of(&mut ipc, 8).await["error"]["code"],
        "invalid_frame"
    );
}
