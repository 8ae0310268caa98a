//! Interop with the official TypeScript MCP SDK client (`tests/interop/interop.mjs`).
//!
//! The SDK is installed by `npm ci --prefix mcp-sidecar/tests/interop` (`cargo xtask test`
//! does it). Without it the test fails with that command, unless `LEO_TEST_SKIP=node`.

use std::time::Duration;

use leo_testkit::{Broker, Script};
use serde_json::json;

use crate::support::{App, interop_command, tool, tool_with_timeout, typescript_sdk};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client() {
    if !typescript_sdk() {
        return;
    }
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo"), tool_with_timeout("slow", 0)]))
        .await;

    let mut cmd = interop_command("node", "interop.mjs", broker.home());
    cmd.env("LEO_MCP_PROGRESS_MS", "200")
        .env("LEO_MCP_LOG", "leo_mcp=debug");
    let mut script = Script::spawn(cmd, &broker.home().join("interop.stderr"));

    let connected = script.step("connected").await;
    assert_eq!(connected["server"]["name"], "leo-mcp");
    assert_eq!(connected["capabilities"]["tools"]["listChanged"], true);

    let listed = script.step("listed").await;
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["echo", "leo_messages", "slow"]);

    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "ts-sdk");
    assert_eq!(req.data["arguments"], json!({"text": "hi"}));
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "hi back"}]),
    )
    .await;
    let called = script.step("called").await;
    assert_eq!(
        called["result"]["content"],
        json!([{"type": "text", "text": "hi back"}])
    );

    // Answer after twice the SDK's request timeout: progress must have kept it waiting.
    let req = app.next_request().await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "late"}]),
    )
    .await;
    let slow = script.step("slow").await;
    assert_eq!(slow["result"]["content"][0]["text"], "late", "{slow}");
    assert!(slow["progress"].as_u64().unwrap() >= 1, "{slow}");

    let missing = script.step("missing").await;
    assert_eq!(missing["result"]["isError"], true);
    assert!(
        missing["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("no_client: "),
        "{missing}"
    );

    script.step("ready_for_change").await;
    app.register_ok("more", json!([tool("later")])).await;
    script.send_line("go").await;
    let changed = script.step("changed").await;
    assert_eq!(
        changed["tools"],
        json!(["echo", "later", "leo_messages", "slow"])
    );
    script.step("done").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
}
