//! The sidecar IPC over the TCP listener (`GET /api/v1/ipc`, `Upgrade: leo-ipc`): who may
//! upgrade, what each refusal says before any upgrade, and that the upgraded connection is a
//! sidecar session like one on `run/sidecar.sock` (a call reaches an app and its result comes
//! back), bound to the agent and token the upgrade was authenticated with.

use leo_testkit::ipc::Refused;
use leo_testkit::{Broker, Ipc};
use serde_json::json;

use crate::support::{App, result_of, tool};

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Upgrades with `headers` and expects a refusal.
async fn refused(broker: &Broker, headers: &[(&str, &str)]) -> Refused {
    match Ipc::upgrade(broker.addr, headers).await {
        Ok(_) => panic!("upgraded with {headers:?}"),
        Err(r) => r,
    }
}

/// The status and `code` of a refusal with the JSON envelope.
fn code_of(r: &Refused) -> (u16, String) {
    let body = r.json();
    assert_eq!(body["ok"], false, "{body}");
    (r.status, body["code"].as_str().unwrap_or("").to_owned())
}

/// Upgrades with `headers`, says hello as `agent` with `token`; the broker's first frame.
async fn hello_after(
    broker: &Broker,
    headers: &[(&str, &str)],
    token: &str,
    agent: &str,
) -> serde_json::Value {
    let mut ipc = Ipc::upgrade(broker.addr, headers)
        .await
        .unwrap_or_else(|r| panic!("{headers:?}: {r:?}"));
    ipc.say_hello(token, agent).await
}

fn message_of(frame: &serde_json::Value) -> &str {
    frame["message"].as_str().unwrap_or("")
}

fn leo(home: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .args(args)
        .env("LEO_HOME", home)
        .output()
        .expect("run leo");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn an_upgraded_connection_is_a_sidecar_session() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let token = broker.agent_token();
    let auth = bearer(&token);
    let mut ipc = Ipc::upgrade(
        broker.addr,
        &[("authorization", &auth), ("leo-agent", "remote")],
    )
    .await
    .unwrap_or_else(|r| panic!("{r:?}"));
    let welcome = ipc.say_hello(&token, "remote").await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert!(
        welcome["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo"),
        "{welcome}"
    );
    ipc.call(1, "echo", json!({"x": 1})).await;
    let request = app.next_request().await;
    assert_eq!(request.data["agent"], "remote");
    app.serve(
        request.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "over TCP"}]),
    )
    .await;
    let outcome = result_of(&mut ipc, 1).await;
    assert_eq!(outcome["content"][0]["text"], "over TCP", "{outcome}");

    // The broker lists the session like any other.
    let status = broker.http().get("/api/v1/status").await;
    let status = status.data();
    assert!(status.to_string().contains("remote"), "{status}");
}

#[tokio::test]
async fn only_agent_tokens_upgrade_and_each_refusal_is_an_http_answer() {
    let broker = Broker::start().await;
    let agent = bearer(&broker.agent_token());
    let operator = bearer(&broker.operator_token());
    let unknown = bearer(&"0".repeat(64));
    for (headers, want) in [
        (vec![("leo-agent", "a")], (401, "unauthorized")),
        (
            vec![("authorization", unknown.as_str()), ("leo-agent", "a")],
            (401, "unauthorized"),
        ),
        (
            vec![("authorization", operator.as_str()), ("leo-agent", "a")],
            (403, "forbidden"),
        ),
        // The shared token must name its agent, with a valid name.
        (
            vec![("authorization", agent.as_str())],
            (400, "invalid_parameter"),
        ),
        (
            vec![("authorization", agent.as_str()), ("leo-agent", "a/b")],
            (400, "invalid_parameter"),
        ),
        // Not an upgrade, or a browser's.
        (
            vec![
                ("authorization", agent.as_str()),
                ("leo-agent", "a"),
                ("upgrade", "websocket"),
            ],
            (400, "invalid_parameter"),
        ),
        (
            vec![
                ("authorization", agent.as_str()),
                ("leo-agent", "a"),
                ("connection", ""),
            ],
            (400, "invalid_parameter"),
        ),
        (
            vec![
                ("authorization", agent.as_str()),
                ("leo-agent", "a"),
                ("origin", "https://evil.example"),
            ],
            (403, "forbidden"),
        ),
    ] {
        let r = refused(&broker, &headers).await;
        assert_eq!(
            code_of(&r),
            (want.0, want.1.to_owned()),
            "{headers:?}: {r:?}"
        );
    }
    // The Host check comes first, with its plain answer.
    let r = refused(
        &broker,
        &[
            ("authorization", &agent),
            ("leo-agent", "a"),
            ("host", "evil.example:1"),
        ],
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (403, "forbidden host"));
    // A refused upgrade disturbs nobody: the next one is a session.
    let named = [("authorization", agent.as_str()), ("leo-agent", "a")];
    let welcome = hello_after(&broker, &named, &broker.agent_token(), "a").await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
}

#[tokio::test]
async fn an_own_token_upgrades_for_its_agent_and_the_hello_cannot_switch_identity() {
    let broker = Broker::start().await;
    let shared = broker.agent_token();
    leo(broker.home(), &["agent", "add", "scout"]);
    let own = std::fs::read_to_string(broker.home().join("state/agents/scout.token"))
        .unwrap()
        .trim()
        .to_owned();
    let own_auth = bearer(&own);
    let shared_auth = bearer(&shared);

    // The shared token cannot speak for scout; scout's token for nobody else.
    let r = refused(
        &broker,
        &[("authorization", &shared_auth), ("leo-agent", "scout")],
    )
    .await;
    assert_eq!(code_of(&r), (401, "unauthorized".to_owned()));
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("has its own token"),
        "{r:?}"
    );
    let r = refused(
        &broker,
        &[("authorization", &own_auth), ("leo-agent", "rocket")],
    )
    .await;
    assert_eq!(code_of(&r), (403, "forbidden".to_owned()));
    // An own token still opens no other route.
    let status = broker
        .http()
        .with_token(Some(&own))
        .get("/api/v1/status")
        .await;
    assert_eq!(status.code(401), "unauthorized");

    // Scout's token upgrades without naming scout; the hello must be scout's, with that token.
    let refusal = hello_after(&broker, &[("authorization", &own_auth)], &own, "rocket").await;
    assert_eq!(refusal["code"], "unauthorized", "{refusal}");
    assert!(
        message_of(&refusal).starts_with("at $.agent: "),
        "{refusal}"
    );
    let shared_rocket = [
        ("authorization", shared_auth.as_str()),
        ("leo-agent", "rocket"),
    ];
    let refusal = hello_after(&broker, &shared_rocket, &own, "rocket").await;
    assert_eq!(refusal["code"], "unauthorized", "{refusal}");
    assert!(
        message_of(&refusal).starts_with("at $.token: "),
        "{refusal}"
    );
    let scout = [("authorization", own_auth.as_str()), ("leo-agent", "scout")];
    let welcome = hello_after(&broker, &scout, &own, "scout").await;
    assert_eq!(welcome["type"], "welcome", "{welcome}");
}

#[tokio::test]
async fn an_upgraded_session_keeps_its_place_in_the_tcp_connection_cap() {
    let broker = Broker::start_with("web:\n  max_connections: 2\n").await;
    let token = broker.agent_token();
    let auth = bearer(&token);
    let named = [("authorization", auth.as_str()), ("leo-agent", "a")];
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let mut ipc = Ipc::upgrade(broker.addr, &named)
            .await
            .unwrap_or_else(|r| panic!("{r:?}"));
        assert_eq!(ipc.say_hello(&token, "a").await["type"], "welcome");
        sessions.push(ipc);
    }
    // Both places are taken by sessions, long after their upgrade: TCP is full, the socket not.
    let r = refused(&broker, &named).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.body, "too many connections\n");
    let (_, welcome) = Ipc::hello(
        &leo_protocol::home::Home::new(broker.home()).sidecar_socket(),
        &token,
        "b",
    )
    .await;
    assert_eq!(welcome["type"], "welcome");

    // A session that ends gives its place back.
    sessions.pop().unwrap().close().await;
    let addr = broker.addr;
    crate::support::eventually(|| async move { Ipc::upgrade(addr, &named).await.is_ok() }).await;
}
