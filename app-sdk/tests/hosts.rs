//! Three machines: the broker on one host, an agent's `leo-mcp --url` on another, and an app
//! built with `leo_app` on a third, each a network namespace with its own address
//! (`leo_testkit::netns`), the app and the agent reaching the broker over HTTPS with the CA of
//! `leo tls init`. Where namespaces cannot be made (not root, no `ip`), the same steps run on
//! loopback; the test prints which it ran.

use leo_app::{App, CancellationToken, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
use leo_testkit::netns::Hosts;
use serde_json::json;

/// A home whose broker binds `addr` and serves HTTPS with a certificate for it.
fn tls_home(addr: std::net::IpAddr) -> (tempfile::TempDir, String) {
    let home = tempfile::tempdir().unwrap();
    let web = format!("web:\n  bind: {addr}\n  allowed_hosts: [\"{addr}\"]\n");
    std::fs::write(home.path().join("config.yaml"), &web).unwrap();
    leo_testkit::tls::tls_init(home.path(), &[&addr.to_string()]);
    let tls = leo_testkit::tls::TLS_CONFIG.trim_start_matches("web:\n");
    (home, format!("{web}{tls}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_an_agent_and_an_app_on_three_hosts() {
    let hosts = Hosts::new();
    let (home, config) = tls_home(hosts.broker.addr);
    let ca = home.path().join("tls/ca.pem");
    let broker = Broker::start_in_on_host(home, &hosts.broker, &config, 0).await;
    assert_eq!(broker.addr.ip(), hosts.broker.addr);
    let url = format!("https://{}", broker.addr);

    // The app, on its host: every socket of its thread is that host's.
    let app = App::builder()
        .url(&url)
        .ca_file(&ca)
        .token(broker.operator_token())
        .name("far-app")
        .group(
            "g",
            vec![Tool::new(
                "where_am_i",
                "Says who answered",
                |_call| async { Reply::text("the app on its own host") },
            )],
        )
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let app_host = hosts.app.thread(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(app.run_until(stopped.cancelled_owned()))
    });

    // The agent, on its host, over the same HTTPS listener.
    let elsewhere = tempfile::tempdir().unwrap();
    let opts = AgentOpts::remote("far", &url, &broker.agent_token())
        .env("LEO_CA_FILE", ca.to_str().unwrap());
    let agent = Agent::start_on(&hosts.agent, elsewhere.path(), opts).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "where_am_i")).await;
    let result = agent.call("where_am_i", json!({})).await;
    assert_eq!(text_of(&result), "the app on its own host");

    // What crossed the broker's listener came from the other hosts' addresses.
    let log = broker.stderr();
    assert!(log.contains("IPC upgrade accepted"), "{log}");
    if hosts.isolated() {
        assert_ne!(hosts.agent.addr, hosts.broker.addr);
        assert_ne!(hosts.app.addr, hosts.broker.addr);
    }
    stop.cancel();
    let ran = tokio::task::spawn_blocking(move || app_host.join().unwrap())
        .await
        .unwrap();
    assert!(ran.is_ok(), "{ran:?}");
}
