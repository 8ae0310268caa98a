//! Tokens belong to the cluster: two homes whose `store.url` names one database (a database
//! per test on a real server) accept the same tokens. A client, a device or an agent's own
//! token added with one home's `leo` works on the other home's running broker within seconds,
//! and stops working there within seconds of its removal; a second instance adopts the
//! cluster's operator and agent tokens into its own `state/`; the first instance on a new
//! database fills it from its files, so a single-host setup keeps its tokens.

use std::path::Path;

use leo_testkit::mcp;
use leo_testkit::postgres::database;
use leo_testkit::{Broker, Http, Ipc};
use serde_json::json;

use crate::security::leo;
use crate::support::{agent, eventually};

/// A new home whose store is the database at `config` (its `config.yaml` lines).
fn home_on(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    home
}

/// The token a `leo` command printed: the line of 64 hex characters.
fn printed_token(out: &str) -> String {
    out.lines()
        .map(str::trim)
        .find(|l| l.len() == 64 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no token in {out}"))
        .to_owned()
}

/// Runs `leo ARGS` on `home`, which must succeed; its stdout.
async fn leo_ok(home: &Path, args: &[&str]) -> String {
    let (ok, out, err) = leo(home, args).await;
    assert!(ok, "leo {args:?}: {out}{err}");
    assert!(!out.contains("Warning"), "leo {args:?}: {out}");
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The status a message from API client `token` to `target` gets on `broker`.
async fn message_status(broker: &Broker, token: &str, target: &str) -> u16 {
    Http::tcp(broker.addr, Some(token.to_owned()))
        .post(
            &format!("/web/agent/{target}/message"),
            &json!({"text": "hi", "from": "ci"}),
        )
        .await
        .status
}

/// Whether `token` opens a sidecar session as `agent` on `broker`.
async fn hello_ok(broker: &Broker, token: &str, agent: &str) -> bool {
    let path = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    let mut ipc = Ipc::connect(&path).await;
    ipc.say_hello(token, agent).await["type"] == "welcome"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_changed_on_one_instance_applies_on_another_within_seconds() {
    let Some(db) = database().await else { return };
    let a = Broker::start_with(&db.config()).await;
    let _rocket = agent(&a, "rocket").await;
    let b = home_on(&db.config());
    let b = b.path();

    // An API client added on B messages its targets through A, and only those.
    let out = leo_ok(b, &["client", "add", "ci", "--can-message", "rocket"]).await;
    assert!(out.contains("without a restart"), "{out}");
    let client = printed_token(&out);
    eventually(|| async { message_status(&a, &client, "rocket").await == 200 }).await;
    assert_eq!(message_status(&a, &client, "scout").await, 403);
    let listed = leo_ok(a.home(), &["client", "list"]).await;
    assert!(listed.contains("ci\tcan_message: rocket"), "{listed}");
    leo_ok(b, &["client", "rm", "ci"]).await;
    eventually(|| async { message_status(&a, &client, "rocket").await == 401 }).await;

    // A device paired on B is an app's token on A, until it is removed on B.
    let device = printed_token(&leo_ok(b, &["device", "pair", "phone"]).await);
    let status = |token: String| {
        let http = Http::tcp(a.addr, Some(token));
        async move { http.get("/api/v1/status").await.status }
    };
    eventually(|| async { status(device.clone()).await == 200 }).await;
    assert_eq!(leo_ok(a.home(), &["device", "list"]).await, "phone\n");
    leo_ok(b, &["device", "rm", "phone"]).await;
    eventually(|| async { status(device.clone()).await == 401 }).await;

    // An agent's own token made on B opens its sessions on A, and the shared token no longer
    // does; A's host gets the file leo-mcp reads. Removed on B, the shared token opens it again.
    leo_ok(b, &["agent", "add", "scout"]).await;
    let own = read(&b.join("state/agents/scout.token"));
    eventually(|| async { hello_ok(&a, &own, "scout").await }).await;
    assert!(!hello_ok(&a, &a.agent_token(), "scout").await);
    let mcp = mcp::client(a.addr, &own);
    let opened = mcp.post("/mcp", &mcp::initialize("cluster")).await;
    assert_eq!(opened.status, 200, "{opened:?}");
    eventually(|| async { read(&a.home().join("state/agents/scout.token")) == own }).await;
    leo_ok(b, &["agent", "rm", "scout"]).await;
    eventually(|| async { !hello_ok(&a, &own, "scout").await }).await;
    let refused = mcp.post("/mcp", &mcp::initialize("cluster")).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(hello_ok(&a, &a.agent_token(), "scout").await);
    eventually(|| async { !a.home().join("state/agents/scout.token").exists() }).await;

    // Every change is in the cluster's audit trail, under the instance of the home it was
    // made on.
    let instance_b = leo_broker::home::instance_id(&leo_broker::home::Home::new(b)).unwrap();
    let actions: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT action || ' ' || target FROM audit WHERE instance = $1 ORDER BY seq",
            &[&instance_b],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        actions,
        [
            "client_add ci",
            "client_rm ci",
            "device_pair phone",
            "device_rm phone",
            "agent_add scout",
            "agent_rm scout"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_instance_fills_the_database_and_a_second_adopts_its_tokens() {
    let Some(db) = database().await else { return };
    // A single-host setup with a paired device moves to PostgreSQL: its tokens are kept.
    let home_a = tempfile::tempdir().unwrap();
    let device = printed_token(&leo_ok(home_a.path(), &["device", "pair", "ipad"]).await);
    std::fs::write(home_a.path().join("config.yaml"), db.config()).unwrap();
    let a = Broker::start_in(home_a).await;
    let as_device = Http::tcp(a.addr, Some(device.clone()));
    assert_eq!(as_device.get("/api/v1/status").await.status, 200);

    // B's home had tokens of its own; its broker adopts the cluster's at start (while it waits
    // for A's lease), and says so.
    let home_b = home_on(&db.config());
    let path_b = home_b.path().to_path_buf();
    std::fs::create_dir_all(path_b.join("state")).unwrap();
    for file in ["operator.token", "agent.token"] {
        let path = path_b.join("state").join(file);
        leo_broker::home::write_atomic(&path, "f".repeat(64).as_bytes()).unwrap();
    }
    let b = tokio::spawn(Broker::start_in(home_b));
    let (op_a, agent_a) = (a.operator_token(), a.agent_token());
    eventually(|| async {
        read(&path_b.join("state/operator.token")) == op_a
            && read(&path_b.join("state/agent.token")) == agent_a
    })
    .await;
    use std::os::unix::fs::PermissionsExt;
    for file in ["operator.token", "agent.token"] {
        let mode = std::fs::metadata(path_b.join("state").join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }

    // A stops; B serves with the same tokens: A's operator token (now B's file), the agent
    // token, and the device A's home paired before the database.
    let (status, _home_a) = a.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    let b = b.await.unwrap();
    assert!(
        b.stderr().contains("adopted the cluster's token"),
        "{}",
        b.stderr()
    );
    // B leads once its next look (every second) finds the lease A gave up; until then it
    // answers 503, so A's operator token is accepted once it serves.
    let as_operator = Http::tcp(b.addr, Some(op_a.clone()));
    eventually(|| async { as_operator.try_status("/api/v1/status").await == Some(200) }).await;
    assert_eq!(b.operator_token(), op_a);
    assert!(hello_ok(&b, &agent_a, "rocket").await);
    let as_device = Http::tcp(b.addr, Some(device));
    assert_eq!(as_device.get("/api/v1/status").await.status, 200);
    let stale = Http::tcp(b.addr, Some("f".repeat(64)));
    assert_eq!(stale.get("/api/v1/status").await.status, 401);
}
