//! Scope, definition digests, pinning and registration lints as operators and apps see them:
//! the wire shapes (fixtures), `leo status`, `leo tools approve` and the console's button.
//! The agent side (native and fallback) is tested through `leo-mcp` in the sidecar's tests.

use std::path::Path;
use std::process::{Output, Stdio};

use leo_testkit::{Broker, WAIT, bin, wire};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::support::{App, Console};

pub const PIN: &str = "client_tools:\n  pin_definitions: true\n";

async fn leo(home: &Path, args: &[&str]) -> Output {
    let child = Command::new(bin("leo"))
        .args(args)
        .env("LEO_HOME", home)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, child)
        .await
        .expect("leo did not exit")
        .expect("run leo")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn approve_deploy_release(broker: &Broker) -> leo_testkit::Reply {
    broker
        .http()
        .post(
            "/api/v1/client-tools/definitions/deploy-release/approve",
            &json!({}),
        )
        .await
}

async fn post_fixture(app: &App, fixture: &str) -> Value {
    let body = wire::load(
        &format!("http/{fixture}.request.json"),
        &[("<client_id>", &app.id)],
    );
    app.http.post("/api/v1/client-tools", &body).await.body
}

#[tokio::test]
async fn scoped_pinned_and_linted_registrations_match_the_fixtures() {
    let broker = Broker::start_with(PIN).await;
    let mut app = App::connect(&broker.http()).await;
    let first = post_fixture(&app, "register_scoped").await;
    wire::check("http/register_scoped.response.json", &first);
    app.sse.next_of("client_tools.changed").await;

    // A changed definition, held back: the same warnings, nothing new offered.
    let again = post_fixture(&app, "register_changed").await;
    assert_eq!(again["data"]["warnings"], first["data"]["warnings"]);
    let listed = broker.http().get("/api/v1/client-tools").await;
    wire::check("http/list_tools_held.response.json", &listed.body);

    let approved = approve_deploy_release(&broker).await;
    wire::check("http/approve.response.json", &approved.body);
    wire::check(
        "events/client_tools.changed_definition.json",
        &json!({"event": "client_tools.changed", "data": app.sse.next_of("client_tools.changed").await.data}),
    );
    let none = approve_deploy_release(&broker).await;
    wire::check("http/error_nothing_to_approve.response.json", &none.body);
}

#[tokio::test]
async fn leo_status_shows_warnings_and_leo_tools_approve_approves() {
    let broker = Broker::start_with(PIN).await;
    let app = App::connect(&broker.http()).await;
    post_fixture(&app, "register_scoped").await;
    post_fixture(&app, "register_changed").await;

    let out = leo(broker.home(), &["status"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("deploy-release (for rocket, ci-*) (changed, awaiting approval)"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "\nWarnings\n  deploy: at $.tools[0].input_schema.anyOf: \"anyOf\" at the root"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("  deploy: at $.tools[1].name: tool \"deploy_release\" differs from tool \"deploy-release\" only by \"-\" and \"_\""),
        "{shown}"
    );
    let json_out = leo(broker.home(), &["status", "--json"]).await;
    let snapshot: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(
        snapshot["warnings"]["deploy"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(snapshot["groups"][0]["tools"][0]["awaiting_approval"], true);

    let out = leo(broker.home(), &["tools", "approve", "deploy-release"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("approved deploy-release (sha256:"),
        "{}",
        text(&out.stdout)
    );
    let out = leo(broker.home(), &["tools", "approve", "deploy-release"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("no changed definition of tool \"deploy-release\" awaits approval"),
        "{}",
        text(&out.stderr)
    );
    let out = leo(broker.home(), &["tools", "approve", "../status"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[tokio::test]
async fn the_console_shows_a_held_definition_and_approves_it() {
    let broker = Broker::start_with(PIN).await;
    let app = App::connect(&broker.http()).await;
    post_fixture(&app, "register_scoped").await;
    post_fixture(&app, "register_changed").await;
    let console = Console::login(&broker).await;
    let mut events = console.events().await;
    let status = Console::status_until(&mut events, |s| {
        s["tools_by_group"]["deploy"][0]["awaiting_approval"] == true
    })
    .await;
    assert_eq!(
        status["warnings"]["deploy"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        status["tools_by_group"]["deploy"][0]["agents"],
        json!(["rocket", "ci-*"])
    );

    // Without the CSRF header the button's route is refused; with it, approved.
    let bare = console
        .http
        .send(
            "POST",
            "/console/tools/deploy-release/approve",
            "{}".into(),
            &[],
        )
        .await;
    assert_eq!(bare.status, 403, "{bare:?}");
    let r = console
        .post("/console/tools/deploy-release/approve", &json!({}))
        .await;
    assert_eq!(r.data()["tool"], "deploy-release");
    let status = Console::status_until(&mut events, |s| {
        s["tools_by_group"]["deploy"][0]["awaiting_approval"] == false
    })
    .await;
    assert!(status["tools_by_group"]["deploy"][0]["changed_at"].is_string());
    assert_eq!(
        status["tools_by_group"]["deploy"][0]["description"],
        "Deploy a release anywhere"
    );
    // The page's script knows the button and the highlight.
    let script = console.http.get("/console/console.js").await;
    let js = script.body.as_str().unwrap_or_default().to_owned();
    assert!(
        js.contains("/console/tools/${encodeURIComponent(name)}/approve")
            && js.contains("'changed'")
    );
}

#[tokio::test]
async fn bad_agents_lists_are_refused_with_their_path() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    let cases = [
        (
            json!([]),
            "at $.agents: an empty list offers the tools to no agent; leave agents out to offer them to every agent",
        ),
        (
            json!(["rocket", "no spaces"]),
            "at $.agents[1]: \"no spaces\" must be 1 to 64 of [A-Za-z0-9_.-], with * and ? as globs",
        ),
        (
            json!("rocket"),
            "at $.agents: invalid type: string \"rocket\", expected a sequence",
        ),
    ];
    for (agents, want) in cases {
        let r = app
            .http
            .post(
                "/api/v1/client-tools",
                &json!({"client_id": app.id, "group": "g", "tools": [crate::support::tool("t")], "agents": agents}),
            )
            .await;
        assert_eq!(r.code(400), "invalid_parameter", "{r:?}");
        assert_eq!(r.error(), want);
    }
}

#[tokio::test]
async fn a_call_ends_when_its_agent_leaves_the_tools_scope() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let (http, id) = (app.http.clone(), app.id.clone());
    let register = |agents: Value| {
        let (http, id) = (http.clone(), id.clone());
        async move {
            http.post(
                "/api/v1/client-tools",
                &json!({"client_id": id, "group": "deploy", "tools": [crate::support::tool("deploy_now")], "agents": agents}),
            )
            .await
            .data()
            .clone()
        }
    };
    register(json!(["rocket", "scout"])).await;
    let mut rocket = crate::support::agent(&broker, "rocket").await;
    let mut scout = crate::support::agent(&broker, "scout").await;
    rocket.call(1, "deploy_now", json!({})).await;
    scout.call(1, "deploy_now", json!({})).await;
    app.next_request().await;
    app.next_request().await;

    register(json!(["scout"])).await;
    let c = app.sse.next_of("client_tool.cancelled").await;
    assert_eq!(c.data["agent"], "rocket");
    assert_eq!(c.data["reason"], "tool_withdrawn");
    let outcome = crate::support::result_of(&mut rocket, 1).await;
    assert_eq!(
        crate::support::outcome_code(&outcome),
        "cancelled",
        "{outcome}"
    );
    // Scout's call is still live: the app answers it.
    let pending = app.http.get("/api/v1/client-tools/requests").await;
    let live = pending.data().as_array().cloned().unwrap_or_default();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0]["agent"], "scout");
    let id = live[0]["id"].as_str().unwrap_or_default().to_owned();
    app.claim(&id).await.data();
    app.answer(&id, json!([{"type": "text", "text": "ok"}]))
        .await
        .data();
    let outcome = crate::support::result_of(&mut scout, 1).await;
    assert_eq!(outcome["content"][0]["text"], "ok", "{outcome}");
}

/// Pinning outlives the broker: killed right after an app registered (the registration is
/// answered once the definition is on disk), a broker started again on the same home still
/// holds a changed definition back, and after a second kill it remembers what the operator
/// approved. On PostgreSQL the same rows are what a new leader reads (`postgres::`).
pub async fn pinning_outlives_kills(config: &str) {
    let broker = Broker::start_with(config).await;
    let app = App::connect(&broker.http()).await;
    post_fixture(&app, "register_scoped").await;

    let broker = Broker::start_in(broker.kill_keep_home().await).await;
    let app = App::connect(&broker.http()).await;
    post_fixture(&app, "register_changed").await;
    let listed = broker.http().get("/api/v1/client-tools").await;
    wire::check("http/list_tools_held.response.json", &listed.body);
    let approved = approve_deploy_release(&broker).await;
    assert_eq!(approved.status, 200, "{}", approved.body);

    let broker = Broker::start_in(broker.kill_keep_home().await).await;
    let app = App::connect(&broker.http()).await;
    post_fixture(&app, "register_changed").await;
    let listed = broker.http().get("/api/v1/client-tools").await;
    let tool = &listed.body["data"]["tools"][0];
    assert_eq!(tool["name"], "deploy-release", "{}", listed.body);
    assert_eq!(tool["awaiting_approval"], Value::Null, "{}", listed.body);
    assert_eq!(
        tool["digest"], approved.body["data"]["digest"],
        "{}",
        listed.body
    );
}

#[tokio::test]
async fn pinning_outlives_a_killed_broker() {
    pinning_outlives_kills(PIN).await;
}
