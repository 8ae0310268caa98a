//! Three machines: the broker on one host, an agent on another, and an app built with
//! `leo_app` on a third, each a network namespace with its own address
//! (`leo_testkit::netns`), the app and the agent reaching the broker over HTTPS with the CA of
//! `leo tls init`. The agent is `leo-mcp --url` in one test and a real harness CLI (Claude Code
//! configured with its HTTP setup, over `/mcp`) in the other. Where namespaces cannot be made
//! (not root, no `ip`), or `LEO_TEST_NETNS=loopback` asks for it, the same steps run on
//! loopback; each test prints which it ran.

use std::path::Path;

use leo_app::{App, CancellationToken, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
use leo_testkit::cli_home::CliHome;
use leo_testkit::netns::Hosts;
use serde_json::{Value, json};

/// What the app answers, from its own host.
const ANSWER: &str = "the app on its own host";

/// A home whose broker binds `addr` and serves HTTPS with a certificate for it.
fn tls_home(addr: std::net::IpAddr) -> (tempfile::TempDir, String) {
    let home = tempfile::tempdir().unwrap();
    let web = format!("web:\n  bind: {addr}\n  allowed_hosts: [\"{addr}\"]\n");
    std::fs::write(home.path().join("config.yaml"), &web).unwrap();
    leo_testkit::tls::tls_init(home.path(), &[&addr.to_string()]);
    let tls = leo_testkit::tls::TLS_CONFIG.trim_start_matches("web:\n");
    (home, format!("{web}{tls}"))
}

/// The app `far-app` on the app's host, over HTTPS: it serves `where_am_i` until stopped.
struct FarApp {
    stop: CancellationToken,
    thread: std::thread::JoinHandle<Result<(), leo_app::Error>>,
}

impl FarApp {
    fn start(hosts: &Hosts, url: &str, ca: &Path, token: String) -> FarApp {
        let app = App::builder()
            .url(url)
            .ca_file(ca)
            .token(token)
            .name("far-app")
            .group(
                "g",
                vec![Tool::new(
                    "where_am_i",
                    "Says who answered",
                    |_call| async { Reply::text(ANSWER) },
                )],
            )
            .build()
            .unwrap();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        // Every socket of its thread is that host's.
        let thread = hosts.app.thread(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(app.run_until(stopped.cancelled_owned()))
        });
        FarApp { stop, thread }
    }

    /// Stops the app; it must have run without error.
    async fn stop(self) {
        self.stop.cancel();
        let thread = self.thread;
        let ran = tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap();
        assert!(ran.is_ok(), "{ran:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_an_agent_and_an_app_on_three_hosts() {
    let hosts = Hosts::new();
    let (home, config) = tls_home(hosts.broker.addr);
    let ca = home.path().join("tls/ca.pem");
    let broker = Broker::start_in_on_host(home, &hosts.broker, &config, 0).await;
    assert_eq!(broker.addr.ip(), hosts.broker.addr);
    let url = format!("https://{}", broker.addr);
    let app = FarApp::start(&hosts, &url, &ca, broker.operator_token());

    // The agent, on its host, over the same HTTPS listener.
    let elsewhere = tempfile::tempdir().unwrap();
    let opts = AgentOpts::remote("far", &url, &broker.agent_token())
        .env("LEO_CA_FILE", ca.to_str().unwrap());
    let agent = Agent::start_on(&hosts.agent, elsewhere.path(), opts).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "where_am_i")).await;
    let result = agent.call("where_am_i", json!({})).await;
    assert_eq!(text_of(&result), ANSWER);

    // What crossed the broker's listener came from the other hosts' addresses.
    let log = broker.stderr();
    assert!(log.contains("IPC upgrade accepted"), "{log}");
    if hosts.isolated() {
        assert_ne!(hosts.agent.addr, hosts.broker.addr);
        assert_ne!(hosts.app.addr, hosts.broker.addr);
    }
    app.stop().await;
}

/// Waits until the broker offers `tool` (the app on its host has registered).
async fn registered(broker: &Broker, tool: &str) {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        // The API socket: the TCP listener is on the broker's host only.
        let list = broker.http_unix().get("/api/v1/client-tools").await;
        if list.data()["tools"].to_string().contains(tool) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{tool} never registered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Claude Code on the agent's host, configured as its HTTP setup line configures it (the
/// broker's `/mcp` at the broker's own address, the agent's own token in `Authorization`),
/// trusting `leo tls init`'s CA through `NODE_EXTRA_CA_CERTS` as `leo tls init` says, against
/// the scripted model server on that host's loopback. Its model calls `where_am_i`; the app on
/// the third host answers; the model is given the answer, and the history names the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_on_the_agent_host_calls_over_https_mcp() {
    let Some(cli) = CliHome::new(None) else {
        return;
    };
    let hosts = Hosts::new();
    let (home, config) = tls_home(hosts.broker.addr);
    let ca = home.path().join("tls/ca.pem");
    let broker = Broker::start_in_on_host(home, &hosts.broker, &config, 0).await;
    let url = format!("https://{}", broker.addr);
    let app = FarApp::start(&hosts, &url, &ca, broker.operator_token());
    registered(&broker, "where_am_i").await;

    let token = broker.add_agent("far-cli");
    let d = cli.path();
    let entry = json!({"mcpServers": {"leo": {"type": "http", "url": format!("{url}/mcp"),
        "headers": {"Authorization": format!("Bearer {token}")}}}});
    std::fs::write(d.join("mcp.json"), entry.to_string()).unwrap();
    let clients = leo_testkit::require::repo_root().join("harness-probe/clients");
    let argv = hosts.agent.argv("node");
    let mut cmd = cli.command(&argv[0]);
    cmd.args(&argv[1..])
        .arg(clients.join("fake-anthropic.mjs"))
        .args(["--", "claude", "-p", "Call the tool.", "--mcp-config"])
        .arg(d.join("mcp.json"))
        .args(["--strict-mcp-config", "--allowedTools", "mcp__leo"])
        .env("ENABLE_TOOL_SEARCH", "false")
        .env("NODE_EXTRA_CA_CERTS", &ca)
        .env("HARNESS_PROBE_OUT", d.join("model.jsonl"))
        .env("HARNESS_PROBE_TOOLS", "where_am_i")
        .env("HARNESS_PROBE_WATCH", "none")
        .env("HARNESS_PROBE_GRACE_MS", "0")
        .stdout(std::fs::File::create(d.join("cli.out")).unwrap())
        .stderr(std::fs::File::create(d.join("cli.err")).unwrap());
    let where_ = if hosts.isolated() {
        "in the agent's network namespace"
    } else {
        "on loopback"
    };
    eprintln!("hosts: Claude Code calls {url}/mcp {where_}");
    let status = tokio::time::timeout(leo_testkit::WAIT * 4, cmd.status())
        .await
        .expect("Claude Code did not finish")
        .unwrap();
    let said = || {
        let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
        format!("{}{}", read("cli.out"), read("cli.err"))
    };
    assert!(status.success(), "{status}\n{}", said());
    let saw: Vec<Value> = std::fs::read_to_string(d.join("model.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        saw.iter()
            .any(|r| r["event"] == "model_saw" && r.to_string().contains(ANSWER)),
        "the model was not given the app's answer: {saw:?}\n{}",
        said()
    );
    let history = broker
        .http_unix()
        .get("/api/v1/client-tools/requests?state=ended")
        .await;
    let call = &history.data()["calls"][0];
    assert_eq!(call["agent"], "far-cli", "{call}");
    assert_eq!(call["tool"], "where_am_i", "{call}");
    assert_eq!(call["outcome"], "result", "{call}");
    app.stop().await;
}
