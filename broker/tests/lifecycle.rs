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

/// `leo broker --port 0` on `home`, its output piped: a start whose fate the test decides.
fn raw_start(home: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(["broker", "--port", "0"])
        .env("LEO_HOME", home)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The broker that serves `home`'s API socket answers with `home`'s operator token.
async fn serves(home: &std::path::Path) -> bool {
    let h = leo_protocol::home::Home::new(home);
    let token = std::fs::read_to_string(h.operator_token()).unwrap_or_default();
    let http = leo_testkit::Http::unix(h.api_socket(), Some(token.trim().to_owned()));
    http.get("/api/v1/client-tools").await.status == 200
        && tokio::net::UnixStream::connect(h.sidecar_socket())
            .await
            .is_ok()
}

#[tokio::test]
async fn two_brokers_started_at_once_on_one_home_one_serves_and_the_other_names_it() {
    let home = tempfile::tempdir().unwrap();
    let mut first = raw_start(home.path());
    let mut second = raw_start(home.path());
    let pids = (first.id().unwrap(), second.id().unwrap());
    // The loser exits at once; the winner runs on.
    let wait = leo_testkit::WAIT;
    let (loser, winner_pid) = tokio::time::timeout(wait, async {
        tokio::select! {
            s = first.wait() => (s.unwrap(), pids.1),
            s = second.wait() => (s.unwrap(), pids.0),
        }
    })
    .await
    .expect("one of two brokers on one home must stop");
    let mut out = String::new();
    let (mut winner, mut loser_child) = if winner_pid == pids.0 {
        (first, second)
    } else {
        (second, first)
    };
    tokio::io::AsyncReadExt::read_to_string(loser_child.stderr.as_mut().unwrap(), &mut out)
        .await
        .unwrap();
    assert!(!loser.success(), "{out}");
    // It stopped before it opened anything: the store says when it opens (at INFO).
    assert!(!out.contains("state database opened"), "{out}");
    assert!(
        out.contains(&format!(
            "another broker (pid {winner_pid}) runs on this home"
        )),
        "{out}"
    );
    assert!(winner.try_wait().unwrap().is_none(), "the winner runs");
    super::support::eventually(|| serves(home.path())).await;
    let lock = std::fs::read_to_string(home.path().join("run/broker.lock")).unwrap();
    assert!(lock.starts_with(&format!("pid={winner_pid}\n")), "{lock}");
    assert_eq!(mode(&home.path().join("run/broker.lock")), 0o600);

    // The lock is taken before anything else in the home is read: a start on the same home
    // stops on it, not on a config the running broker never reads again.
    std::fs::write(home.path().join("config.yaml"), "web: [1, 2\n").unwrap();
    let err = leo_testkit::spawn(home.path())
        .await
        .expect_err("a second start must fail");
    assert!(
        err.contains(&format!("another broker (pid {winner_pid})")) && !err.contains("config"),
        "{err}"
    );
    winner.start_kill().unwrap();
}

#[tokio::test]
async fn a_broker_started_as_the_last_one_stops_serves_on_its_own_sockets() {
    let mut old = Broker::start().await;
    // An app connected: its stream is open while the old broker stops.
    let app = App::connect(&old.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let home = old.home().to_path_buf();
    let (status, new) = tokio::join!(old.signal("TERM"), leo_testkit::spawn(&home));
    assert!(status.success(), "{}", old.stderr());
    let (mut new, _, new_log) = new.unwrap_or_else(|e| panic!("the restart must start: {e}"));
    // The old broker has exited; the new one's socket files are there and served.
    assert!(
        serves(&home).await,
        "{}",
        std::fs::read_to_string(new_log).unwrap()
    );
    let lock = std::fs::read_to_string(home.join("run/broker.lock")).unwrap();
    assert!(
        lock.starts_with(&format!("pid={}\n", new.id().unwrap())),
        "{lock}"
    );

    // A socket file that is not its own (the old one's removed by hand and bound again by
    // another process) is left where it is when a broker stops.
    let api = home.join("run/leo.sock");
    std::fs::remove_file(&api).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&api).unwrap();
    let pid = new.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(new.wait().await.unwrap().success());
    assert!(api.exists(), "the other process's socket stays");
    assert!(
        !home.join("run/sidecar.sock").exists(),
        "its own is removed"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("run/broker.lock")).unwrap(),
        ""
    );
    drop(other);
}

#[tokio::test]
async fn a_stop_with_apps_and_agents_connected_is_prompt() {
    // A restart with an app connected arms the resume grace of what the store remembers, and
    // an app that leaves arms its own: neither may hold the next stop.
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let (status, home) = broker.stop_keep_home().await;
    assert!(status.success());
    let mut broker = Broker::start_in(home).await;
    let gone = App::connect(&broker.http()).await;
    gone.register("h", json!([tool("other")])).await.data();
    drop(gone);
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    // An agent on /mcp, its call's answer stream open.
    let mcp = leo_testkit::mcp::client(broker.addr, &broker.add_agent("scout"));
    let session = leo_testkit::mcp::open_session(&mcp, "scout").await;
    let _answer = leo_testkit::mcp::start_call(&mcp, &session, 2, "echo").await;
    let started = std::time::Instant::now();
    let status = broker.signal("TERM").await;
    let took = started.elapsed();
    let log = broker.stderr();
    assert!(status.success(), "{log}");
    assert!(
        took < std::time::Duration::from_secs(1),
        "the stop took {took:?}\n{log}"
    );
    // Nothing of the broker's own was cut short. (The in-process `/mcp` session's link says
    // it lost the broker: it did.)
    assert!(!log.contains("WARN leo_broker"), "{log}");
    drop(app);
}

/// A broker on its own answers the probes without a token, on TCP (behind the Host check, as
/// every route) and on the API socket; a token it does not know is refused as anywhere.
#[tokio::test]
async fn a_single_broker_is_live_and_ready_to_a_probe_without_a_token() {
    let broker = Broker::start().await;
    for http in [broker.http(), broker.http_unix()] {
        let ready = crate::support::readiness(&http, 200).await;
        assert_eq!(ready, json!({"status": "ready", "role": "single"}));
    }
    let foreign = broker.http().with_token(None).with_host("evil.example:1");
    assert_eq!(foreign.get("/healthz").await.status, 403);
    assert_eq!(foreign.get("/readyz").await.status, 403);
    let unknown = broker.http().with_token(Some("not-a-token"));
    assert_eq!(unknown.get("/readyz").await.status, 401);
    assert_eq!(broker.http().post("/readyz", &json!({})).await.status, 405);
}
