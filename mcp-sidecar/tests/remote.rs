//! `leo-mcp --url`: the sidecar on a host without the broker's `$LEO_HOME` (its own home here
//! is an empty directory), reaching the broker over its TCP listener. It serves the harness as
//! a local one does, keeps a call open across a broker killed with SIGKILL and started again on
//! the same address, and re-attaches it; a wrong token or a refused upgrade answers calls with
//! the reason instead of leaving them to hang.

use leo_testkit::Broker;
use serde_json::{Value, json};

use crate::support::{Agent, AgentOpts, App, error_text, text_of, tool, wait_for_tools};

fn text(t: &str) -> Value {
    json!([{"type": "text", "text": t}])
}

/// A `leo-mcp --url` for `agent` with `token`, its own home an empty directory.
async fn remote_agent(broker: &Broker, agent: &str, token: &str) -> (Agent, tempfile::TempDir) {
    let elsewhere = tempfile::tempdir().unwrap();
    let opts = AgentOpts::remote(agent, &broker.url(), token);
    (Agent::start(elsewhere.path(), opts).await, elsewhere)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_sidecar_keeps_its_call_open_across_a_broker_killed_and_restarted() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let (agent, _elsewhere) = remote_agent(&broker, "far", &broker.agent_token()).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;

    // One call answered as on the socket.
    let call = agent.spawn_call("wait", json!({"n": 1}));
    let request = app.next_request().await;
    assert_eq!(request.data["agent"], "far");
    app.serve(request.data["id"].as_str().unwrap(), text("first"))
        .await;
    assert_eq!(text_of(&call.await.unwrap()), "first");

    // A call in flight when the broker is killed; the broker comes back on the same port.
    let call = agent.spawn_call("wait", json!({"n": 2}));
    let id = app.next_request_id().await;
    let port = broker.addr.port();
    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in_on(home, port).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let again = app.next_request().await;
    assert_eq!(again.data["id"], id.as_str(), "the same call, re-attached");
    app.serve(&id, text("after the restart")).await;
    assert_eq!(text_of(&call.await.unwrap()), "after the restart");
    assert!(
        broker.stderr().contains("IPC upgrade accepted"),
        "the session came back over TCP"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_or_a_refused_upgrade_answers_calls_with_the_reason() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    for (token, want) in [
        ("0".repeat(64), "unauthorized: unknown token"),
        (
            broker.operator_token(),
            "forbidden: this token may not GET /api/v1/ipc",
        ),
    ] {
        let (agent, _elsewhere) = remote_agent(&broker, "far", &token).await;
        let said = refused_call(&agent, want).await;
        assert!(
            said.starts_with("no_client: ") && said.contains(want),
            "{said}"
        );
        let log = std::fs::read_to_string(&agent.stderr_path).unwrap();
        assert!(
            log.contains("cannot reach the broker") && log.contains(want),
            "{log}"
        );
    }
}

/// Calls `wait` until its error says `want` (the first calls may come before the first
/// refusal: "broker not running" until then); the last error.
async fn refused_call(agent: &Agent, want: &str) -> String {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let said = error_text(&agent.call("wait", json!({})).await);
        if said.contains(want) || tokio::time::Instant::now() > deadline {
            return said;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_the_ca_file_is_trusted_and_nothing_else() {
    let broker = Broker::start_tls().await;
    let app = App::connect(&broker.http_unix()).await;
    app.register_ok("g", json!([tool("wait")])).await;
    let https = format!("https://localhost:{}", broker.addr.port());
    let ca = broker.home().join("tls/ca.pem");
    let token = broker.agent_token();
    let elsewhere = tempfile::tempdir().unwrap();

    let trusting = AgentOpts::native("far")
        .env("LEO_URL", &https)
        .env("LEO_AGENT_TOKEN", &token)
        .env("LEO_CA_FILE", ca.to_str().unwrap());
    let agent = Agent::start(elsewhere.path(), trusting).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "wait")).await;

    // Without the CA the certificate is refused, and calls say so and what to do.
    let agent = Agent::start(elsewhere.path(), AgentOpts::remote("far", &https, &token)).await;
    let said = refused_call(&agent, "not signed by a CA this client trusts").await;
    assert!(said.contains("LEO_CA_FILE"), "{said}");
    // Plain HTTP to the HTTPS port is answered, and the answer is the reason.
    let plain = format!("http://localhost:{}", broker.addr.port());
    let agent = Agent::start(elsewhere.path(), AgentOpts::remote("far", &plain, &token)).await;
    let said = refused_call(&agent, "400").await;
    assert!(said.contains("the broker refused the session"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_or_a_missing_token_stops_the_start_with_the_reason() {
    let home = tempfile::tempdir().unwrap();
    for (env, want) in [
        (
            vec![("LEO_URL", "leo.internal:8370"), ("LEO_AGENT_TOKEN", "t")],
            "invalid --url",
        ),
        (vec![("LEO_URL", "http://127.0.0.1:1")], "LEO_AGENT_TOKEN"),
    ] {
        let out = std::process::Command::new(leo_testkit::bin("leo-mcp"))
            .args(["--agent", "far"])
            .env("LEO_HOME", home.path())
            .env_remove("LEO_AGENT_TOKEN")
            .envs(env)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(want), "{stderr}");
    }
}
