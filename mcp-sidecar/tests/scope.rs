//! Who sees which tool: a group registered for chosen agents (`agents`), `allow_tools` next to
//! `deny_tools`, scope changes told only to the sessions they reach, and pinned definitions
//! that change only once the operator approves them. Native and fallback modes alike.

use leo_testkit::{Broker, Http, Ipc};
use serde_json::{Value, json};

use crate::support::{
    Agent, AgentOpts, App, error_text, text_of, tool, wait_for_tools, wait_until,
};

/// Registers `group` for `agents` only; asserts success and returns the answer's data.
async fn register_for(app: &App, group: &str, tools: Value, agents: Value) -> Value {
    app.http
        .post(
            "/api/v1/client-tools",
            &json!({"client_id": app.id, "group": group, "tools": tools, "agents": agents}),
        )
        .await
        .data()
        .clone()
}

/// The names `leo_app_tools` lists.
async fn app_tools(agent: &Agent) -> Vec<String> {
    let listed: Value =
        serde_json::from_str(&text_of(&agent.call("leo_app_tools", json!({})).await)).unwrap();
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn scoped_broker() -> (Broker, App) {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    register_for(
        &app,
        "deploy",
        json!([tool("deploy_now")]),
        json!(["rocket", "ci-*"]),
    )
    .await;
    app.register_ok("open", json!([tool("open_tool")])).await;
    (broker, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_for_chosen_agents_is_hidden_from_the_others_in_native_mode() {
    let (broker, mut app) = scoped_broker().await;

    let ci = Agent::start(broker.home(), AgentOpts::native("ci-7")).await;
    assert_eq!(
        ci.tool_names_without_messages().await,
        ["deploy_now", "open_tool"]
    );
    let call = ci.spawn_call("deploy_now", json!({}));
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "ci-7");
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "done"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "done");

    let scout = Agent::start(broker.home(), AgentOpts::native("scout")).await;
    assert_eq!(scout.tool_names_without_messages().await, ["open_tool"]);
    // A later change reaches both through their tools frames: each still gets its own cut.
    app.register_ok("more", json!([tool("more_tool")])).await;
    wait_for_tools(&scout, |names| names == ["more_tool", "open_tool"]).await;
    wait_for_tools(&ci, |names| {
        names == ["deploy_now", "more_tool", "open_tool"]
    })
    .await;
    // Called anyway: no_client, worded as for a tool nobody serves, and no suggestion of it.
    for name in ["deploy_now", "deploy_nw"] {
        let text = error_text(&scout.call(name, json!({})).await);
        assert_eq!(
            text,
            format!(
                "no_client: no connected app serves tool {name:?}; tools served now: more_tool, open_tool"
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_for_chosen_agents_is_hidden_from_the_others_in_fallback_mode() {
    let (broker, _app) = scoped_broker().await;

    let rocket = Agent::start(broker.home(), AgentOpts::fallback("rocket")).await;
    assert_eq!(app_tools(&rocket).await, ["deploy_now", "open_tool"]);

    let scout = Agent::start(broker.home(), AgentOpts::fallback("scout")).await;
    assert_eq!(app_tools(&scout).await, ["open_tool"]);
    let text = error_text(
        &scout
            .call("leo_app_call", json!({"tool": "deploy_now", "args": {}}))
            .await,
    );
    assert_eq!(
        text,
        "no_client: no connected app serves tool \"deploy_now\"; tools served now: open_tool"
    );
}

const ALLOW_CONFIG: &str = "agents:
  picky:
    allow_tools: [alpha, beta]
    deny_tools: [beta]
";

/// A broker whose `allow_tools` and `deny_tools` name tools registered before it started (both
/// are checked against the remembered names at start).
async fn broker_with_allow_list() -> (Broker, App) {
    let first = Broker::start().await;
    let app = App::connect(&first.http()).await;
    app.register_ok("g", json!([tool("alpha"), tool("beta"), tool("gamma")]))
        .await;
    drop(app);
    let home = first.kill_keep_home().await;
    std::fs::write(home.path().join("config.yaml"), ALLOW_CONFIG).unwrap();
    let broker = Broker::start_in(home).await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("alpha"), tool("beta"), tool("gamma")]))
        .await;
    (broker, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_tools_and_deny_tools_together_in_both_modes() {
    let (broker, _app) = broker_with_allow_list().await;

    // Native: alpha only (beta is allowed but denied, gamma not allowed); Leo's own stay.
    let native = Agent::start(broker.home(), AgentOpts::native("picky")).await;
    assert_eq!(native.tool_names().await, ["alpha", "leo_messages"]);
    assert_eq!(
        error_text(&native.call("gamma", json!({})).await),
        "denied: tool \"gamma\" is not in the allow_tools of agent \"picky\""
    );
    assert_eq!(
        error_text(&native.call("beta", json!({})).await),
        "denied: tool \"beta\" is denied to agent \"picky\""
    );
    // A name nobody serves gets the same answer as one that exists: nothing is revealed.
    assert_eq!(
        error_text(&native.call("nothing_here", json!({})).await),
        "denied: tool \"nothing_here\" is not in the allow_tools of agent \"picky\""
    );

    let fallback = Agent::start(broker.home(), AgentOpts::fallback("picky")).await;
    assert_eq!(app_tools(&fallback).await, ["alpha"]);
    let text = error_text(
        &fallback
            .call("leo_app_call", json!({"tool": "gamma"}))
            .await,
    );
    assert_eq!(
        text,
        "denied: tool \"gamma\" is not in the allow_tools of agent \"picky\""
    );

    // Someone else sees all three.
    let other = Agent::start(broker.home(), AgentOpts::native("other")).await;
    assert_eq!(
        other.tool_names_without_messages().await,
        ["alpha", "beta", "gamma"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_tools_naming_an_unknown_tool_stops_the_broker_at_start() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        "agents:\n  picky:\n    allow_tools: [never_registered]\n",
    )
    .unwrap();
    let (mut child, _, _) = match leo_testkit::spawn(home.path()).await {
        Err(stderr) => {
            assert!(
                stderr.contains("agents.picky.allow_tools[0]: \"never_registered\" is neither a Leo tool nor a client tool any app has registered"),
                "{stderr}"
            );
            return;
        }
        Ok(started) => started,
    };
    let _ = child.kill().await;
    panic!("the broker started with an unknown allow_tools name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_change_notifies_only_the_sessions_it_reaches() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    register_for(
        &app,
        "deploy",
        json!([tool("deploy_now")]),
        json!(["rocket"]),
    )
    .await;
    let rocket = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    let scout = Agent::start(broker.home(), AgentOpts::native("scout")).await;
    assert_eq!(rocket.tool_names_without_messages().await, ["deploy_now"]);
    assert!(scout.tool_names_without_messages().await.is_empty());
    // A raw session of rocket too, to see the frames themselves.
    let (mut raw, _) = Ipc::hello(
        &broker.home().join("run/sidecar.sock"),
        &broker.agent_token(),
        "rocket",
    )
    .await;

    // The group now reaches scout as well: rocket's view is as it was.
    register_for(
        &app,
        "deploy",
        json!([tool("deploy_now")]),
        json!(["rocket", "scout"]),
    )
    .await;
    wait_until("scout's list_changed", || scout.list_changed() == 1).await;
    assert_eq!(scout.tool_names_without_messages().await, ["deploy_now"]);

    // Then a change that reaches everyone. Rocket's first tools frame and first notification
    // must be this one: had the scope change been sent to it, that frame would come first.
    app.register_ok("marker", json!([tool("marker")])).await;
    let frame = raw.recv_of("tools").await;
    let names: Vec<&str> = frame["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["deploy_now", "marker"], "{frame}");
    wait_until("rocket's list_changed", || rocket.list_changed() >= 1).await;
    assert_eq!(
        rocket.tool_names_without_messages().await,
        ["deploy_now", "marker"]
    );
    assert_eq!(rocket.list_changed(), 1, "{}", rocket.stderr());
    wait_until("scout's second list_changed", || scout.list_changed() == 2).await;
}

const PIN_CONFIG: &str = "client_tools:\n  pin_definitions: true\n";

fn echo(description: &str, text_type: &str) -> Value {
    json!([{
        "name": "echo",
        "description": description,
        "input_schema": {"type": "object", "properties": {"text": {"type": text_type}}}
    }])
}

async fn approve(http: &Http, name: &str) -> Value {
    http.post(
        &format!("/api/v1/client-tools/definitions/{name}/approve"),
        &json!({}),
    )
    .await
    .data()
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_definition_stays_until_approved_in_native_mode() {
    let broker = Broker::start_with(PIN_CONFIG).await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", echo("Echo v1", "string")).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    assert_eq!(
        agent.tools().await[0].description.as_deref(),
        Some("Echo v1")
    );

    // The app changes the definition: agents keep v1, and its checks.
    app.register_ok("g", echo("Echo v2", "integer")).await;
    let listed = broker.http().get("/api/v1/client-tools").await;
    let held = listed.data()["tools"][0]["awaiting_approval"].clone();
    assert!(held.as_str().unwrap().starts_with("sha256:"), "{listed:?}");
    assert_eq!(
        agent.tools().await[0].description.as_deref(),
        Some("Echo v1")
    );
    assert!(
        error_text(&agent.call("echo", json!({"text": 5})).await)
            .starts_with("invalid_arguments: ")
    );
    let call = agent.spawn_call("echo", json!({"text": "old"}));
    let req = app.next_request().await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "ok"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "ok");

    // An agent cannot approve; the operator can.
    let as_agent = broker.http().with_token(Some(&broker.agent_token()));
    let refused = as_agent
        .post("/api/v1/client-tools/definitions/echo/approve", &json!({}))
        .await;
    assert_eq!(refused.code(403), "forbidden");
    let before = agent.list_changed();
    let approved = approve(&broker.http(), "echo").await;
    assert_eq!(approved["tool"], "echo");
    assert_eq!(approved["digest"], held);
    let changed = loop {
        let event = app.sse.next_of("client_tools.changed").await;
        if event.data["revision"] == approved["revision"] {
            break event;
        }
    };
    assert_eq!(
        changed.data["changed"],
        json!(["echo"]),
        "{:?} {approved} {}",
        changed.data,
        broker.stderr()
    );
    wait_until("list_changed after approval", || {
        agent.list_changed() > before
    })
    .await;
    assert_eq!(
        agent.tools().await[0].description.as_deref(),
        Some("Echo v2")
    );
    assert!(
        error_text(&agent.call("echo", json!({"text": "old"})).await)
            .starts_with("invalid_arguments: ")
    );
    let call = agent.spawn_call("echo", json!({"text": 5}));
    let req = app.next_request().await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "new"}]),
    )
    .await;
    assert_eq!(text_of(&call.await.unwrap()), "new");

    // Nothing more awaits.
    let again = broker
        .http()
        .post("/api/v1/client-tools/definitions/echo/approve", &json!({}))
        .await;
    assert_eq!(again.code(404), "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_definition_stays_until_approved_in_fallback_mode() {
    let broker = Broker::start_with(PIN_CONFIG).await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", echo("Echo v1", "string")).await;
    let agent = Agent::start(broker.home(), AgentOpts::fallback("rocket")).await;
    let described = |listed: Value| {
        listed["tools"][0]["description"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let list = || async {
        serde_json::from_str::<Value>(&text_of(&agent.call("leo_app_tools", json!({})).await))
            .unwrap()
    };
    assert_eq!(described(list().await), "Echo v1");

    app.register_ok("g", echo("Echo v2", "integer")).await;
    assert_eq!(described(list().await), "Echo v1");
    let old_checks = agent
        .call("leo_app_call", json!({"tool": "echo", "args": {"text": 5}}))
        .await;
    assert!(
        error_text(&old_checks).starts_with("invalid_arguments: "),
        "{old_checks:?}"
    );

    approve(&broker.http(), "echo").await;
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    while described(list().await) != "Echo v2" {
        assert!(tokio::time::Instant::now() < deadline, "never offered v2");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let new_checks = agent
        .call(
            "leo_app_call",
            json!({"tool": "echo", "args": {"text": "old"}}),
        )
        .await;
    assert!(
        error_text(&new_checks).starts_with("invalid_arguments: "),
        "{new_checks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_definition_is_reported_and_offered_without_pinning() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", echo("Echo v1", "string")).await;
    let first = app.sse.next_of("client_tools.changed").await;
    assert!(
        first.data.get("changed").is_none(),
        "a first registration changes nothing: {:?}",
        first.data
    );
    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    assert_eq!(
        agent.tools().await[0].description.as_deref(),
        Some("Echo v1")
    );

    let before = agent.list_changed();
    app.register_ok("g", echo("Echo v2", "string")).await;
    let changed = app.sse.next_of("client_tools.changed").await;
    assert_eq!(
        changed.data["changed"],
        json!(["echo"]),
        "{:?}",
        changed.data
    );
    assert!(changed.data.get("awaiting_approval").is_none());
    wait_until("list_changed", || agent.list_changed() > before).await;
    assert_eq!(
        agent.tools().await[0].description.as_deref(),
        Some("Echo v2")
    );
    let status = broker.http().get("/api/v1/status").await;
    assert!(
        status.data()["tools_by_group"]["g"][0]["changed_at"].is_string(),
        "{status:?}"
    );
}
