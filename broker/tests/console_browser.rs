//! The web console in a real browser: headless Chromium (Debian's `chromium`) driven by
//! `tests/browser/console.mjs` with `playwright-core`, against the real `leo`, an app over the
//! HTTP API and an agent that is an rmcp client of the real `leo-mcp`.
//!
//! `cargo xtask test` installs the browser and `npm ci --prefix broker/tests/browser`. Without
//! them the test fails with the command that installs them, unless `LEO_TEST_SKIP=browser`.
//! The screenshots go to `target/tmp/browser-test/console.png` and, at a phone's 390 px,
//! `console-phone.png`.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_in_watch_a_tool_appear_answer_ask_human_and_cancel_a_call() {
    if !browser_ready() {
        return;
    }
    let dir = browser_dir();
    let broker = Broker::start().await;
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser-test");
    let mut cmd = Command::new("node");
    cmd.arg(dir.join("console.mjs"))
        .current_dir(&dir)
        .env("LEO_URL", format!("http://{}", broker.addr))
        .env("LEO_TOKEN", broker.operator_token())
        .env("LEO_SHOTS", &shots)
        .env("CHROMIUM", require::CHROMIUM);
    let mut script = Script::spawn(cmd, &broker.home().join("browser.stderr"));

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

    script.send(&json!({"cmd": "done"})).await;
    script.step("bye").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
    // The page itself checked that at 1280 px no card overflows (the Apps table with the long
    // names above) and at 390 px nothing does and Cancel stays in its card.
    for key in ["screenshot", "phone"] {
        let screenshot = cancelled[key].as_str().unwrap();
        assert!(
            std::fs::metadata(screenshot).is_ok_and(|m| m.len() > 0),
            "{screenshot}"
        );
        eprintln!("{key}: {screenshot}");
    }
}
