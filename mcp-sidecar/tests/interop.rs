//! Interop with the official TypeScript MCP SDK client (`tests/interop/interop.mjs`).
//!
//! The SDK is installed by `npm ci --prefix mcp-sidecar/tests/interop`. Without it the test
//! fails in CI (`CI` set) and is skipped with a note elsewhere, so a fresh checkout still runs
//! `cargo test` without Node.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use leo_testkit::{Broker, WAIT, bin};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::support::{App, tool, tool_with_timeout};

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client() {
    let dir = interop_dir();
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    let node_ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !sdk.exists() || !node_ok {
        let why = format!(
            "the TypeScript SDK interop test needs node and `npm ci --prefix {}` (sdk installed: {}, node found: {node_ok})",
            dir.display(),
            sdk.exists()
        );
        assert!(!in_ci(), "{why}");
        eprintln!("note: skipping: {why}");
        return;
    }

    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("demo", json!([tool("echo"), tool_with_timeout("slow", 0)]))
        .await;

    let stderr = std::fs::File::create(broker.home().join("interop.stderr")).unwrap();
    let mut child = Command::new("node")
        .arg(dir.join("interop.mjs"))
        .current_dir(&dir)
        .env("LEO_MCP_BIN", bin("leo-mcp"))
        .env("LEO_HOME", broker.home())
        .env("LEO_MCP_PROGRESS_MS", "200")
        .env("LEO_MCP_LOG", "leo_mcp=debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn node");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let log = || std::fs::read_to_string(broker.home().join("interop.stderr")).unwrap_or_default();
    let mut step = async |want: &str| -> Value {
        let line = tokio::time::timeout(WAIT, out.next_line())
            .await
            .unwrap_or_else(|_| panic!("no {want} step in time\n{}", log()))
            .unwrap()
            .unwrap_or_else(|| panic!("script ended before {want}\n{}", log()));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["step"], want, "{v}\n{}", log());
        v
    };

    let connected = step("connected").await;
    assert_eq!(connected["server"]["name"], "leo-mcp");
    assert_eq!(connected["capabilities"]["tools"]["listChanged"], true);

    let listed = step("listed").await;
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
    app.answer(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "hi back"}]),
    )
    .await;
    let called = step("called").await;
    assert_eq!(
        called["result"]["content"],
        json!([{"type": "text", "text": "hi back"}])
    );

    // Answer after twice the SDK's request timeout: progress must have kept it waiting.
    let req = app.next_request().await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    app.answer(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "late"}]),
    )
    .await;
    let slow = step("slow").await;
    assert_eq!(slow["result"]["content"][0]["text"], "late", "{slow}");
    assert!(slow["progress"].as_u64().unwrap() >= 1, "{slow}");

    let missing = step("missing").await;
    assert_eq!(missing["result"]["isError"], true);
    assert!(
        missing["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("no_client: "),
        "{missing}"
    );

    step("ready_for_change").await;
    app.register("more", json!([tool("later")])).await;
    stdin.write_all(b"go\n").await.unwrap();
    let changed = step("changed").await;
    assert_eq!(
        changed["tools"],
        json!(["echo", "later", "leo_messages", "slow"])
    );
    step("done").await;
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{}", log());
}
