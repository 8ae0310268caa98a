//! Start-up and shutdown: files and modes, strict config, state that survives, SIGTERM.

use std::os::unix::fs::PermissionsExt;

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{App, agent, result_of, tool};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn first_start_creates_private_files() {
    let broker = Broker::start().await;
    let h = broker.home();
    assert_eq!(mode(&h.join("state/operator.token")), 0o600);
    assert_eq!(mode(&h.join("state/agent.token")), 0o600);
    assert_eq!(mode(&h.join("run")), 0o700);
    assert_eq!(mode(&h.join("run/leo.sock")), 0o600);
    assert_eq!(mode(&h.join("run/sidecar.sock")), 0o600);
    assert_eq!(broker.operator_token().len(), 64, "256 bits as hex");
    assert_ne!(broker.operator_token(), broker.agent_token());
}

#[tokio::test]
async fn sigterm_cancels_pending_calls_and_exits_zero() {
    let mut broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request().await.data["id"].clone();
    let status = broker.signal("TERM").await;
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        broker.stderr()
    );
    let o = result_of(&mut ipc, 1).await;
    assert_eq!(o["error"]["code"], "cancelled");
    assert!(
        o["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{o}"
    );
    let c = app.sse.next_of("client_tool.cancelled").await;
    assert_eq!(
        (c.data["id"].clone(), c.data["reason"].clone()),
        (id, json!("shutdown"))
    );
    // The stream and the IPC session are closed.
    assert!(app.sse.next_or_end().await.is_none());
    let after = ipc.recv_or_end().await;
    assert!(after.is_none(), "{after:?}");
    assert!(!broker.home().join("run/leo.sock").exists());
}

#[tokio::test]
async fn sigint_also_shuts_down_cleanly() {
    let mut broker = Broker::start().await;
    assert!(broker.signal("INT").await.success());
}

#[tokio::test]
async fn registered_names_survive_a_restart_and_a_corrupt_file_stops_start() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("zeta"), tool("alpha")]))
        .await
        .data();
    let path = broker.home().join("state/client-tools.json");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved, json!({"version": 1, "tools": ["alpha", "zeta"]}));
    drop(app);
    let home = broker.kill_keep_home().await;
    // A deny_tools entry naming a remembered tool is valid at boot, before any app connects.
    std::fs::write(
        home.path().join("config.yaml"),
        "agents:\n  a:\n    deny_tools: [zeta]\n",
    )
    .unwrap();
    let broker = Broker::start_in(home).await;
    let home = broker.kill_keep_home().await;

    std::fs::write(
        home.path().join("state/client-tools.json"),
        b"{\"version\": 1, \"tools\": [",
    )
    .unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    assert!(
        err.contains("client-tools.json") && err.contains("corrupt"),
        "{err}"
    );
}

async fn start_fails(config: &str, want: &[&str]) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    for w in want {
        assert!(err.contains(w), "{config:?}: {err}");
    }
}

#[tokio::test]
async fn config_errors_name_the_key_path() {
    start_fails("web:\n  port: high\n", &["config.yaml", "web.port"]).await;
    start_fails(
        "web:\n  allowed_host: [x]\n",
        &["web.allowed_host: unknown field"],
    )
    .await;
    start_fails(
        "client_tools:\n  default_timeout_s: -1\n",
        &["client_tools.default_timeout_s"],
    )
    .await;
    start_fails(
        "agents:\n  rocket:\n    deny_tools: [never_registered]\n",
        &["agents.rocket.deny_tools[0]", "never_registered"],
    )
    .await;
    start_fails(
        "api_clients:\n  scout:\n    can_message: []\n",
        &["api_clients.scout.can_message"],
    )
    .await;
    start_fails("web: [1, 2\n", &["config.yaml"]).await;
}

#[tokio::test]
async fn a_token_file_others_can_read_is_refused() {
    let broker = Broker::start().await;
    let home = broker.kill_keep_home().await;
    let token = home.path().join("state/operator.token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("start must fail");
    assert!(
        err.contains("operator.token") && err.contains("0600"),
        "{err}"
    );
}

#[tokio::test]
async fn a_second_broker_on_the_same_home_is_refused_and_a_stale_socket_is_replaced() {
    let broker = Broker::start().await;
    let err = leo_testkit::spawn(broker.home())
        .await
        .expect_err("second start must fail");
    assert!(err.contains("another broker"), "{err}");
    // After SIGKILL the socket files stay behind; the next start replaces them.
    let home = broker.kill_keep_home().await;
    assert!(home.path().join("run/leo.sock").exists());
    let broker = Broker::start_in(home).await;
    assert_eq!(
        broker.http_unix().get("/api/v1/client-tools").await.status,
        200
    );
}
