//! The web console in a real browser: headless Chromium (Debian's `chromium`) driven by the
//! scripts of `tests/browser/` with `playwright-core`, against the real `leo` (one broker, or a
//! two-instance cluster on PostgreSQL), apps over the HTTP API and agents that are an rmcp
//! client of the real `leo-mcp` or raw IPC sessions.
//!
//! `cargo xtask test` installs the browser and `npm ci --prefix broker/tests/browser`. Without
//! them the test fails with the command that installs them, unless `LEO_TEST_SKIP=browser`.
//! The screenshots go to `target/tmp/browser-test/`: `console.png` and `cluster.png` at
//! 1280 px, `console-phone.png` and `cluster-phone.png` at a phone's 390 px.

use std::path::PathBuf;

use leo_testkit::agent::{Agent, AgentOpts, error_text, text_of, wait_for_tools};
use leo_testkit::require::{self, Prereq};
use leo_testkit::{Broker, Script, WAIT};
use serde_json::json;
use tokio::process::Command;

use crate::support::{App, tool_with_timeout};

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// True when node, playwright-core and chromium are all here; otherwise fails (or skips, when
/// `LEO_TEST_SKIP` names `browser`) with what installs them.
fn browser_ready() -> bool {
    let dir = "broker/tests/browser";
    let npm = require::node_package_missing(dir, "playwright-core");
    require::require(Prereq::Browser, npm, &require::npm_install_command(dir))
        && require::chromium()
}

/// `tests/browser/<name>` in Chromium, logging in to `broker`'s console.
fn browse(name: &str, broker: &Broker) -> Script {
    let dir = browser_dir();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser-test");
    let mut cmd = Command::new("node");
    cmd.arg(dir.join(name))
        .current_dir(&dir)
        .env("LEO_URL", format!("http://{}", broker.addr))
        .env("LEO_TOKEN", broker.operator_token())
        .env("LEO_SHOTS", &shots)
        .env("CHROMIUM", require::CHROMIUM);
    Script::spawn(cmd, &broker.home().join("browser.stderr"))
}

/// Asserts that the script ended well and left the screenshots its last step named.
async fn finish(mut script: Script, shots: &serde_json::Value) {
    script.send(&json!({"cmd": "done"})).await;
    script.step("bye").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
    for key in ["screenshot", "phone"] {
        let screenshot = shots[key].as_str().unwrap();
        assert!(
            std::fs::metadata(screenshot).is_ok_and(|m| m.len() > 0),
            "{screenshot}"
        );
        eprintln!("{key}: {screenshot}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_in_watch_a_tool_appear_answer_ask_human_and_cancel_a_call() {
    if !browser_ready() {
        return;
    }
    let broker = Broker::start().await;
    let mut script = browse("console.mjs", &broker);
    script.step("logged_in").await;
    let mut app = App::connect(&broker.http()).await;
    app.register("ci", json!([tool_with_timeout("deploy_preview", 600)]))
        .await
        .data();
    script
        .send(&json!({"cmd": "expect_tool", "tool": "deploy_preview"}))
        .await;
    script.step("tool_seen").await;
    script.step("ask_human_on").await;

    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "ask_human")).await;
    let question = "Ship the release now?";
    let asked = agent.spawn_call(
        "ask_human",
        json!({"question": question, "choices": ["yes", "wait"]}),
    );
    script
        .send(&json!({"cmd": "answer", "question": question, "choice": "yes", "agent": "claude"}))
        .await;
    script.step("answered").await;
    let answer = tokio::time::timeout(WAIT, asked).await.unwrap().unwrap();
    assert_eq!(
        text_of(&answer),
        "yes",
        "the agent got the operator's choice"
    );

    let waiting = agent.spawn_call("deploy_preview", json!({"text": "main"}));
    // The app saw the ask_human request too (every provider stream sees every call).
    let id = loop {
        let req = app.next_request().await;
        if req.data["tool"] == "deploy_preview" {
            break req.data["id"].as_str().unwrap().to_owned();
        }
    };
    // An app with a long name and long group names, for the page's check that its table fits
    // the card at 1280 px.
    let long_app = "deploy-previews-for-every-branch-of-the-monorepo-and-all-forks";
    let mut wide = leo_testkit::sse::Sse::open(
        &broker.http(),
        &format!("/api/v1/events?client_tools=1&name={long_app}"),
        None,
    )
    .await;
    let hello = wide.next().await;
    let wide_id = hello.data["client_id"].as_str().unwrap().to_owned();
    for group in [
        "continuous-integration-pipelines-for-the-whole-organisation",
        "observability_dashboards_and_alerting_for_every_service",
        "release-management-and-deployment-previews",
    ] {
        let tools: Vec<_> = (0..12)
            .map(|i| tool_with_timeout(&format!("{}_{i}", &group[..20]), 600))
            .collect();
        broker
            .http()
            .post(
                "/api/v1/client-tools",
                &json!({"client_id": wide_id, "group": group, "tools": tools}),
            )
            .await
            .data();
    }
    script
        .send(&json!({"cmd": "cancel", "id": id, "long_app": long_app}))
        .await;
    let cancelled = script.step("cancelled").await;
    let result = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(
        error_text(&result),
        "cancelled: the operator cancelled the call"
    );
    let event = app.sse.next_of("client_tool.cancelled").await;
    assert_eq!(
        (event.data["id"].as_str(), event.data["reason"].as_str()),
        (Some(id.as_str()), Some("cancelled_by_operator"))
    );

    // The page itself checked that at 1280 and 390 px no card overflows (the Apps table with
    // the long names above), no table cell breaks a word, and Cancel stays in its card.
    finish(script, &cancelled).await;
}

/// The console of a two-instance cluster, opened through the follower: the Instances card
/// (roles, last seen, who is connected where), the chart of the last hour's calls with the
/// counts of the calls made here, and the short words that broke in half-width cards ("consol
/// e", "weath er", "stdi o") kept whole around long ids at 1280 and 390 px.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_console_shows_its_instances_its_calls_per_minute_and_whole_words() {
    if !browser_ready() {
        return;
    }
    let Some(db) = leo_testkit::postgres::database().await else {
        return;
    };
    let nodes = leo_testkit::cluster::start(&db.config(), 2).await;
    let (leader, follower) = (&nodes[0], &nodes[1]);
    let mut script = browse("cluster.mjs", follower);
    script.step("logged_in").await;

    // An app named `weather` and an agent on the follower, each with a long id.
    let mut sse = leo_testkit::sse::Sse::open(
        &follower.http(),
        "/api/v1/events?client_tools=1&name=weather",
        None,
    )
    .await;
    let hello = sse.next().await;
    let mut app = App {
        http: follower.http(),
        id: hello.data["client_id"].as_str().unwrap().to_owned(),
        resume: hello.data["resume"].as_str().unwrap().to_owned(),
        sse,
    };
    app.register_ok("weather", json!([tool_with_timeout("forecast", 600)]))
        .await;
    let mut ipc = crate::support::agent(follower, "rocket").await;
    // Three results and an error, each a call that ended in this minute.
    for n in 1..=4 {
        ipc.call(n, "forecast", json!({"city": "Oslo"})).await;
        let id = app.next_request_id().await;
        if n == 4 {
            app.serve_error(&id, "no_data", "no forecast for Oslo")
                .await;
        } else {
            app.serve(&id, json!([{"type": "text", "text": "sunny"}]))
                .await;
        }
        crate::support::result_of(&mut ipc, n).await;
    }
    let ids = |b: &Broker| leo_testkit::cluster::instance_id(b.home());
    script
        .send(&json!({
            "cmd": "look",
            "leader": ids(leader),
            "follower": ids(follower),
            "counts": {"result": 3, "error": 1, "timeout": 0, "cancelled": 0, "no_client": 0},
        }))
        .await;
    let looked = script.step("looked").await;
    finish(script, &looked).await;
}

/// Approvals in the console: calls that await approval appear live with who asks and since
/// when, their arguments inert (`<img onerror>` stays text, an ESC shows as `\u001b`); the
/// operator approves one with edited arguments (the app gets them) and denies another with a
/// reason (the agent gets `denied: …`); a call another approver decides leaves the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_approvals_live_shows_arguments_inert_and_decides() {
    if !browser_ready() {
        return;
    }
    let broker = Broker::start_with(
        "approvals:\n  allow_edits: true\n  require:\n    - tools: [\"wipe\"]\n",
    )
    .await;
    let mut script = browse("approvals.mjs", &broker);
    let mut app = App::connect(&broker.http()).await;
    let object = json!({"type": "object"});
    app.register_ok(
        "ops",
        json!([
            {"name": "deploy", "description": "Deploys", "input_schema": object,
             "approval": "required"},
            {"name": "wipe", "description": "Wipes", "input_schema": object},
        ]),
    )
    .await;
    let mut approvals = leo_testkit::Sse::open(&broker.http(), "/api/v1/events", None).await;
    let mut ipc = crate::support::agent(&broker, "ci-7").await;
    script.step("logged_in").await;

    let markup = "<img src=x onerror=window.leoPwned=true>";
    let hostile = json!({"env": markup, "note": "\u{1b}[31mred\u{1b}[0m \u{202e}txt.exe"});
    ipc.call(1, "deploy", hostile).await;
    let (id, _) = next_approval(&mut approvals).await;
    script
        .send(&json!({"cmd": "edit", "id": id, "markup": markup, "escape": "\\u001b[31m"}))
        .await;
    script.step("edited").await;
    let request = app.next_request().await;
    assert_eq!(request.data["id"], id.as_str());
    assert_eq!(request.data["arguments"], json!({"env": "staging"}));
    app.serve(&id, json!([{"type": "text", "text": "deployed"}]))
        .await;
    let outcome = crate::support::result_of(&mut ipc, 1).await;
    assert!(
        outcome.to_string().contains("changed the arguments"),
        "{outcome}"
    );

    ipc.call(2, "wipe", json!({"all": true})).await;
    let (id, _) = next_approval(&mut approvals).await;
    let reason = "not <b>today</b>";
    script
        .send(&json!({"cmd": "deny", "id": id, "reason": reason}))
        .await;
    script.step("denied").await;
    assert_eq!(
        crate::support::result_of(&mut ipc, 2).await["error"],
        json!({"code": "denied", "message": reason})
    );

    ipc.call(3, "deploy", json!({"env": "prod"})).await;
    let (id, digest) = next_approval(&mut approvals).await;
    script.send(&json!({"cmd": "appear", "id": id})).await;
    script.step("appeared").await;
    let denied = broker
        .http()
        .post(
            &format!("/api/v1/approvals/{id}/deny"),
            &json!({"digest": digest}),
        )
        .await;
    assert_eq!(denied.status, 200, "{denied:?}");
    script.send(&json!({"cmd": "gone"})).await;
    let gone = script.step("gone").await;
    let audit = broker.http().get("/api/v1/audit").await.body.to_string();
    assert!(
        audit.contains("approve_call") && audit.contains("deny_call"),
        "{audit}"
    );
    finish(script, &gone).await;
}

/// The id and digest of the next call an approver's stream is asked to decide.
async fn next_approval(sse: &mut leo_testkit::Sse) -> (String, serde_json::Value) {
    let asked = sse.next_of("client_tool.approval_requested").await;
    (
        asked.data["id"].as_str().unwrap().to_owned(),
        asked.data["digest"].clone(),
    )
}

/// An MCP client's OAuth login approved on the consent page in Chromium, its grant listed in
/// the console's OAuth grants section and revoked with its button: `/mcp` refuses the token
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consent_approved_in_the_browser_and_its_grant_revoked_from_the_console() {
    use crate::oauth::{REDIRECT, VERIFIER, exchange, open_mcp, query, register};
    if !browser_ready() {
        return;
    }
    let broker = Broker::start().await;
    let mut script = browse("grants.mjs", &broker);
    script.step("logged_in").await;
    let client = register(&broker).await;
    let q = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("response_type", "code"),
            ("client_id", client.as_str()),
            ("redirect_uri", REDIRECT),
            ("state", "st4te"),
            (
                "code_challenge",
                "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            ),
            ("code_challenge_method", "S256"),
        ])
        .finish();
    let authorize = format!("http://{}/oauth/authorize?{q}", broker.addr);
    script
        .send(&json!({"cmd": "consent", "authorize": authorize, "redirect": REDIRECT}))
        .await;
    let approved = script.step("approved").await;
    let back = query(approved["redirect"].as_str().unwrap());
    assert_eq!(back["state"], "st4te", "{back:?}");
    let tokens = exchange(&broker, &client, &back["code"], VERIFIER).await;
    assert_eq!(tokens.status, 200, "{tokens:?}");
    let access = tokens.body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(open_mcp(&broker, &access, None).await.status, 200);
    let grants = broker.http().get("/api/v1/oauth/grants").await;
    assert_eq!(grants.data()["grants"][0]["agent"], "browser-agent");

    script
        .send(&json!({"cmd": "revoke", "agent": "browser-agent"}))
        .await;
    let revoked = script.step("revoked").await;
    assert_eq!(open_mcp(&broker, &access, None).await.status, 401);
    finish(script, &revoked).await;
}
