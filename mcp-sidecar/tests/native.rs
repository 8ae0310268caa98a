//! Native mode: client tools as MCP tools, and `list_changed` as the tool set moves.

use std::time::Duration;

use leo_testkit::Broker;
use serde_json::{Value, json};

use leo_mcp::caps;
use leo_protocol::ipc::Mode;

use crate::support::{Agent, AgentOpts, App, tool, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_changes_in_200ms_give_one_or_two_notifications_and_the_last_state() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    assert!(agent.tool_names_without_messages().await.is_empty());
    // Let a possible notification for the initial view pass before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = agent.list_changed();

    let mut last = Vec::new();
    for i in 0..10 {
        last = (0..=i).map(|j| format!("t{j}")).collect::<Vec<_>>();
        let tools: Vec<Value> = last.iter().map(|n| tool(n)).collect();
        app.register_ok("g", Value::Array(tools)).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    wait_until("a list_changed notification", || {
        agent.list_changed() > before
    })
    .await;
    // The broker sends at most one frame a second; wait for quiet well past that.
    let mut count = agent.list_changed();
    loop {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let now = agent.list_changed();
        if now == count {
            break;
        }
        count = now;
    }
    let notified = count - before;
    eprintln!("ten registrations gave {notified} list_changed notification(s)");
    assert!(
        (1..=2).contains(&notified),
        "expected 1 or 2 notifications, got {notified}\n{}",
        agent.stderr()
    );
    let mut names = agent.tool_names_without_messages().await;
    names.sort();
    last.sort();
    assert_eq!(names, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_follows_the_built_in_table() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;

    let table = caps::builtin();
    let fallback_tools = ["leo_app_call", "leo_app_tools"];
    let cases = [
        ("a", "claude-code"),
        ("b", "opencode"),
        ("c", "codex-mcp-client"),
        ("d", "some-new-harness"),
    ];
    let mut sessions = Vec::new();
    for (agent, client) in cases {
        let session = Agent::start(broker.home(), AgentOpts::auto(agent, client)).await;
        let names = session.tool_names_without_messages().await;
        match table.mode_for(client) {
            Mode::Native => assert_eq!(names, ["echo"], "{client}"),
            Mode::Fallback => assert_eq!(names, fallback_tools, "{client}"),
        }
        // Keep the session open so the broker lists it below.
        sessions.push(session);
    }

    // The broker learns the harness and mode of each session.
    let want = |client: &str| {
        let mode = match table.mode_for(client) {
            Mode::Native => "native",
            Mode::Fallback => "fallback",
        };
        Some((json!(client), json!(mode)))
    };
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let status = broker.http().get("/api/v1/status").await;
        let agents = status.data()["agents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mode_of = |name: &str| {
            agents
                .iter()
                .find(|a| a["agent"] == name)
                .map(|a| (a["harness"]["name"].clone(), a["mode"].clone()))
        };
        if cases
            .iter()
            .all(|(agent, client)| mode_of(agent) == want(client))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker never learned the harnesses: {agents:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(sessions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_app_group_appears_with_a_notification() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("one", json!([tool("a1")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    assert_eq!(agent.tool_names_without_messages().await, ["a1"]);
    let before = agent.list_changed();

    let other = App::connect(&broker.http()).await;
    other.register_ok("two", json!([tool("b1")])).await;
    wait_until("list_changed", || agent.list_changed() > before).await;
    assert_eq!(agent.tool_names_without_messages().await, ["a1", "b1"]);

    // The app leaving withdraws its tools, which is a change too.
    let before = agent.list_changed();
    drop(other);
    wait_until("list_changed after withdrawal", || {
        agent.list_changed() > before
    })
    .await;
    assert_eq!(agent.tool_names_without_messages().await, ["a1"]);
}

/// `agents.NAME.mode` gives an agent's harness its mode whatever its name: an unknown
/// harness native, a known native one fallback; `--mode` still wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_sets_an_agents_mode_whatever_its_harness() {
    let broker = Broker::start_with(
        "agents:\n  scout:\n    mode: native\n  rocket:\n    mode: fallback\n  plain:\n    mode: auto\n",
    )
    .await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let fallback_tools = ["leo_app_call", "leo_app_tools"];
    let unknown = Agent::start(broker.home(), AgentOpts::auto("scout", "some-new-harness")).await;
    assert_eq!(unknown.tool_names_without_messages().await, ["echo"]);
    let known = Agent::start(broker.home(), AgentOpts::auto("rocket", "claude-code")).await;
    assert_eq!(known.tool_names_without_messages().await, fallback_tools);
    let auto = Agent::start(broker.home(), AgentOpts::auto("plain", "some-new-harness")).await;
    assert_eq!(auto.tool_names_without_messages().await, fallback_tools);
    let flag = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    assert_eq!(flag.tool_names_without_messages().await, ["echo"]);
}

/// Runs `leo ARGS…` on the broker's home and returns what it printed.
fn leo(broker: &Broker, args: &[&str]) -> String {
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .args(args)
        .env("LEO_HOME", broker.home())
        .output()
        .expect("run leo");
    assert!(out.status.success(), "leo {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The tool names a new `/mcp` session of a client named `client` is listed, with `token`.
async fn listed_over_http(broker: &Broker, token: &str, client: &str) -> Vec<String> {
    let http = leo_testkit::mcp::client(broker.addr, token);
    let id = leo_testkit::mcp::open_session(&http, client).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let reply = http
        .send(
            "POST",
            "/mcp",
            list.to_string().into(),
            &leo_testkit::mcp::in_session(&id),
        )
        .await;
    let listed = leo_testkit::mcp::response_of(&reply, 2);
    let mut names: Vec<String> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .filter(|n| n.starts_with("leo_app_") || !n.starts_with("leo_"))
        .collect();
    names.sort();
    names
}

/// The mode recorded with an agent's own token (`leo agent add NAME --mode`, `leo agent mode`)
/// gives its harness its mode over `/mcp` and through `leo-mcp`, wins over `agents.NAME.mode`,
/// applies from the next session on, and goes with the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mode_recorded_with_an_agents_token_wins_over_the_configs() {
    let broker = Broker::start_with("agents:\n  scout:\n    mode: fallback\n").await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let fallback_tools = ["leo_app_call", "leo_app_tools"];
    let added = leo(&broker, &["agent", "add", "scout", "--mode", "native"]);
    assert!(added.contains("mode native"), "{added}");
    let token = std::fs::read_to_string(broker.home().join("state/agents/scout.token")).unwrap();
    let token = token.trim();
    assert_eq!(
        listed_over_http(&broker, token, "some-new-harness").await,
        ["echo"]
    );
    let stdio = Agent::start(broker.home(), AgentOpts::auto("scout", "some-new-harness")).await;
    assert_eq!(stdio.tool_names_without_messages().await, ["echo"]);

    leo(&broker, &["agent", "mode", "scout", "fallback"]);
    assert_eq!(
        listed_over_http(&broker, token, "claude-code").await,
        fallback_tools
    );
    leo(&broker, &["agent", "mode", "scout", "auto"]);
    assert_eq!(
        listed_over_http(&broker, token, "claude-code").await,
        ["echo"]
    );
    // Without its own token the agent's mode is the config's again.
    leo(&broker, &["agent", "rm", "scout"]);
    assert!(!broker.home().join("state/agents/scout.mode").exists());
    let known = Agent::start(broker.home(), AgentOpts::auto("scout", "claude-code")).await;
    assert_eq!(known.tool_names_without_messages().await, fallback_tools);
    // `leo agent mode` needs the agent's own token.
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .args(["agent", "mode", "scout", "native"])
        .env("LEO_HOME", broker.home())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no token of its own"),
        "{out:?}"
    );
}
