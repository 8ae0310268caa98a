//! Integration tests: the real binary, driven by real MCP clients.
//!
//! The SDK clients (TypeScript, Python) are installed by `cargo xtask test`:
//! `npm ci --prefix harness-probe/clients` and a venv with `harness-probe/clients/requirements.txt`.
//! When one is missing a test fails with the command that installs it, unless `LEO_TEST_SKIP`
//! names it (`node`, `python`). The rmcp client is this binary itself and always runs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::Command;

use harness_probe::run::VerdictFile;
use harness_probe::verdict::Honors;
use leo_testkit::require::{self, Prereq};
use serde_json::Value;

const PROBE: &str = env!("CARGO_BIN_EXE_harness-probe");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// True when node and the TypeScript SDK are installed (see `leo_testkit::require`).
fn node_sdk() -> bool {
    require::node_package(
        Prereq::Node,
        "harness-probe/clients",
        "@modelcontextprotocol/sdk",
    )
}

/// The test venv's Python with the Python SDK (mcp 2.x), if installed.
fn python_sdk() -> Option<String> {
    require::python(&["mcp", "mcp_types"]).map(|p| p.display().to_string())
}

/// `harness-probe run --kind sdk -- <command>` in a temp dir; returns the verdict file.
fn run(command: &[&str]) -> VerdictFile {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let verdict = dir.path().join("verdict.json");
    let log = dir.path().join("client.log");
    let output = Command::new(PROBE)
        .arg("run")
        .args(["--timeout", "90", "--kind", "sdk", "--dir"])
        .arg(dir.path().join("run"))
        .arg("--log")
        .arg(&log)
        .arg("--verdict")
        .arg(&verdict)
        .arg("--")
        .args(command)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("starting harness-probe: {e}"));
    let client_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        output.status.success(),
        "harness-probe run failed: {}\nclient log:\n{client_log}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&verdict).unwrap_or_else(|e| panic!("verdict: {e}"));
    let file: VerdictFile = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    // One verdict line per session on stdout.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.lines().count(),
        file.sessions.len().max(1),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "honors_list_changed={}",
            file.honors_list_changed.as_str()
        )),
        "{stdout}"
    );
    if file.sessions.is_empty() {
        panic!("no probe session: {text}\nclient log:\n{client_log}");
    }
    file
}

fn check(file: &VerdictFile, client: &str, honors: Honors) {
    let c = file
        .client
        .as_ref()
        .unwrap_or_else(|| panic!("no clientInfo: {file:?}"));
    assert_eq!(c.name, client);
    assert_eq!(
        file.honors_list_changed, honors,
        "{client}: {} ({:?})",
        file.reason, file.sessions
    );
    let s = &file.sessions[0];
    match honors {
        Honors::Yes => {
            assert!(file.latency_ms.is_some());
            assert!(
                s.called_new_tool,
                "{client} re-listed but did not call the new tool"
            );
            assert!(s.tools_lists >= 2);
        }
        Honors::No => {
            assert_eq!(file.latency_ms, None);
            assert_eq!(s.tools_lists, 1);
            assert!(s.observed_after_notify_ms.unwrap_or(0) >= file.grace_ms);
        }
        Honors::Unknown => {}
    }
    // Every reference client calls the image and the error tool and reports what it got.
    assert_eq!(s.image_tool.calls, 1, "{client}");
    assert_eq!(s.error_tool.calls, 1, "{client}");
    let seen = |v: &[Value], key: &str| v.iter().map(|x| x[key].clone()).collect::<Vec<_>>();
    assert_eq!(
        seen(&s.image_tool.seen, "content_types"),
        vec![serde_json::json!(["image", "text"])],
        "{client}"
    );
    assert_eq!(
        seen(&s.error_tool.seen, "is_error"),
        vec![Value::Bool(true)],
        "{client}"
    );
}

#[test]
fn rmcp_client_that_relists_is_yes() {
    let f = run(&["{bin}", "rmcp-client", "--mode", "relist"]);
    check(&f, "harness-probe-rmcp-client-relist", Honors::Yes);
    assert_eq!(f.sessions[0].identified_via.as_deref(), Some("initialize"));
    assert_eq!(f.sessions[0].list_changed_via.as_deref(), Some("session"));
}

#[test]
fn rmcp_client_that_ignores_is_no() {
    let f = run(&["{bin}", "rmcp-client", "--mode", "ignore"]);
    check(&f, "harness-probe-rmcp-client-ignore", Honors::No);
}

#[test]
fn ts_sdk_auto_refresh_is_yes() {
    if node_sdk() {
        let f = run(&[
            "node",
            "harness-probe/clients/ts-client.mjs",
            "auto-refresh",
        ]);
        check(&f, "harness-probe-ts-sdk-auto-refresh", Honors::Yes);
    }
}

#[test]
fn ts_sdk_by_itself_is_no() {
    if node_sdk() {
        let f = run(&["node", "harness-probe/clients/ts-client.mjs", "default"]);
        check(&f, "harness-probe-ts-sdk-default", Honors::No);
    }
}

#[test]
fn ts_sdk_that_ignores_is_no() {
    if node_sdk() {
        let f = run(&["node", "harness-probe/clients/ts-client.mjs", "ignore"]);
        check(&f, "harness-probe-ts-sdk-ignore", Honors::No);
    }
}

#[test]
fn py_sdk_that_relists_is_yes() {
    if let Some(py) = python_sdk() {
        let f = run(&[&py, "harness-probe/clients/py_client.py", "relist"]);
        check(&f, "harness-probe-py-sdk-relist", Honors::Yes);
    }
}

#[test]
fn py_sdk_on_a_subscription_is_yes() {
    if let Some(py) = python_sdk() {
        let f = run(&[&py, "harness-probe/clients/py_client.py", "relist-modern"]);
        check(&f, "harness-probe-py-sdk-relist-modern", Honors::Yes);
        assert_eq!(
            f.sessions[0].list_changed_via.as_deref(),
            Some("subscription")
        );
    }
}

#[test]
fn py_sdk_by_itself_is_no() {
    if let Some(py) = python_sdk() {
        let f = run(&[&py, "harness-probe/clients/py_client.py", "default"]);
        check(&f, "harness-probe-py-sdk-default", Honors::No);
    }
}

#[test]
fn py_sdk_that_ignores_is_no() {
    if let Some(py) = python_sdk() {
        let f = run(&[&py, "harness-probe/clients/py_client.py", "ignore"]);
        check(&f, "harness-probe-py-sdk-ignore", Honors::No);
    }
}

/// A client that lists and leaves (like `claude mcp list`) gives no verdict either way.
#[test]
fn health_check_client_is_unknown() {
    let script = r#"printf '%s\n' \
      '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"health-check","version":"1"}}}' \
      '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
      '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' | "$HARNESS_PROBE_BIN" serve > /dev/null"#;
    let f = run(&["sh", "-c", script]);
    let c = f.client.as_ref().unwrap_or_else(|| panic!("{f:?}"));
    assert_eq!(c.name, "health-check");
    assert_eq!(f.honors_list_changed, Honors::Unknown, "{}", f.reason);
    assert_eq!(f.sessions[0].tools_lists, 1);
}

/// A client that never starts the probe is unknown, with the reason.
#[test]
fn client_that_never_starts_the_probe_is_unknown() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let verdict = dir.path().join("v.json");
    let status = Command::new(PROBE)
        .args(["run", "--timeout", "30", "--harness", "nothing", "--dir"])
        .arg(dir.path().join("run"))
        .arg("--log")
        .arg(dir.path().join("log"))
        .arg("--verdict")
        .arg(&verdict)
        .args(["--", "sh", "-c", "echo no probe here; exit 3"])
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let f: VerdictFile =
        serde_json::from_str(&std::fs::read_to_string(&verdict).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.honors_list_changed, Honors::Unknown);
    assert!(f.reason.contains("never started the probe"), "{}", f.reason);
    assert_eq!(f.client_output_tail, vec!["no probe here".to_owned()]);
}

#[test]
fn serve_needs_a_record_file() {
    let output = Command::new(PROBE)
        .arg("serve")
        .env_remove("HARNESS_PROBE_OUT")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("HARNESS_PROBE_OUT"));
    assert!(output.stdout.is_empty(), "serve must not print to stdout");
}

/// The checked-in table is exactly what `harness-probe table` makes of the checked-in inputs.
#[test]
fn checked_in_table_is_generated_from_the_checked_in_measurements() {
    let probe_dir = repo().join("testdata/probe");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&probe_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", probe_dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() > 1,
        "no measurements in {}",
        probe_dir.display()
    );
    let output = Command::new(PROBE)
        .arg("table")
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8_lossy(&output.stdout).into_owned();
    let checked_in = std::fs::read_to_string(repo().join("testdata/harnesscaps.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        generated == checked_in,
        "testdata/harnesscaps.json differs from `harness-probe table testdata/probe/*.json`; regenerate it with --write testdata/harnesscaps.json"
    );
    // --write writes the same bytes.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("caps.json");
    let status = Command::new(PROBE)
        .arg("table")
        .args(files.iter().rev())
        .arg("--write")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    assert!(std::fs::read_to_string(&out).unwrap_or_default() == checked_in);
}
