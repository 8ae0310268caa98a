//! `leo doctor` against the configurations the real harness CLIs write with their own `mcp add`
//! (the pinned CLIs of `testdata/harness-clis/`, run offline in a throw-away `HOME` as
//! `setup_lines.rs` runs them), good and then broken one way at a time: a 0644 token, a wrong
//! `LEO_HOME`, a moved `leo-mcp`, a stopped broker. Each problem must fail the exit code and
//! carry its fix; `--json` is parsed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use leo_testkit::cli_home::CliHome;
use leo_testkit::{Broker, bin};
use serde_json::Value;

/// Runs `cli args` in the home, failing on error.
async fn cli(home: &CliHome, program: &str, args: &[&str]) {
    let out = home.command(program).args(args).output().await.unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each CLI's own `mcp add`, with `leo_mcp` and `leo_home`.
async fn add_all(home: &CliHome, leo_mcp: &Path, leo_home: &Path) {
    let env = format!("LEO_HOME={}", leo_home.display());
    let mcp = leo_mcp.to_str().unwrap();
    cli(
        home,
        "claude",
        &[
            "mcp",
            "add",
            "--transport",
            "stdio",
            "--scope",
            "user",
            "leo",
            "-e",
            &env,
            "--",
            mcp,
            "--agent",
            "claude",
        ],
    )
    .await;
    add_codex(home, mcp, &env).await;
    cli(
        home,
        "opencode",
        &[
            "mcp", "add", "leo", "--env", &env, "--", mcp, "--agent", "opencode",
        ],
    )
    .await;
}

async fn add_codex(home: &CliHome, mcp: &str, env: &str) {
    cli(
        home,
        "codex",
        &[
            "mcp", "add", "leo", "--env", env, "--", mcp, "--agent", "codex",
        ],
    )
    .await;
}

/// `leo doctor --json` in the home, with the broker's `LEO_HOME`: the exit code and the report.
async fn doctor(home: &CliHome, leo_home: &Path) -> (i32, Value) {
    let out = home
        .command(bin("leo"))
        .args(["doctor", "--json"])
        .env("LEO_HOME", leo_home)
        .output()
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(report["ok"], out.status.success(), "{report:#}");
    (out.status.code().unwrap_or(-1), report)
}

/// Runs a `fix:` line as printed, in the home's project directory.
async fn run_fix(home: &CliHome, fix: &str) {
    let out = home
        .command("sh")
        .arg("-c")
        .arg(fix)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{fix}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The checks whose name starts with `prefix` and contains `part`.
fn checks<'a>(report: &'a Value, prefix: &str, part: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            let name = c["check"].as_str().unwrap();
            name.starts_with(prefix) && name.contains(part)
        })
        .collect()
}

fn failed(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["check"].as_str().unwrap().to_owned())
        .collect()
}

/// Each harness's Leo entry has exactly one check named `part`, with `status`.
fn every_harness(report: &Value, part: &str, status: &str) {
    for harness in ["claude", "codex", "opencode"] {
        let found = checks(report, harness, part);
        assert_eq!(found.len(), 1, "{harness} {part}: {report:#}");
        assert_eq!(
            found[0]["status"], status,
            "{harness} {part}: {:#}",
            found[0]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_good_setup_and_names_each_breakage_with_its_fix() {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start_with("web:\n  port: 0\n").await;
    let leo_home = broker.home().to_path_buf();
    // A leo-mcp of its own, so the test can move it.
    let bin_dir = home.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let leo_mcp = bin_dir.join("leo-mcp");
    std::fs::copy(bin("leo-mcp"), &leo_mcp).unwrap();
    add_all(&home, &leo_mcp, &leo_home).await;

    // Good: nothing fails; codex's timeout is only a warning.
    let (code, report) = doctor(&home, &leo_home).await;
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        checks(&report, "running", "")[0]["status"],
        "ok",
        "{report:#}"
    );
    assert_eq!(
        checks(&report, "version", "")[0]["status"],
        "ok",
        "{report:#}"
    );
    every_harness(&report, "command", "ok");
    every_harness(&report, "LEO_HOME", "ok");
    assert_eq!(
        checks(&report, "codex", "tool_timeout_sec")[0]["status"],
        "warn"
    );
    for harness in ["claude", "codex", "opencode"] {
        let v = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["area"] == "versions" && c["check"] == harness)
            .unwrap();
        assert_eq!(
            v["status"], "ok",
            "the pinned {harness} is the measured one: {v:#}"
        );
    }

    // A token others can read.
    let token = leo_home.join("state/agent.token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, report) = doctor(&home, &leo_home).await;
    assert_eq!(code, 1);
    assert_eq!(failed(&report), [token.display().to_string()], "{report:#}");
    let c = &checks(&report, &token.display().to_string(), "")[0];
    assert_eq!(c["fix"], format!("chmod 600 {}", token.display()));
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();

    // codex pointed at another LEO_HOME.
    cli(&home, "codex", &["mcp", "remove", "leo"]).await;
    add_codex(&home, leo_mcp.to_str().unwrap(), "LEO_HOME=/elsewhere/.leo").await;
    let (code, report) = doctor(&home, &leo_home).await;
    assert_eq!(code, 1);
    let bad = checks(&report, "codex", "LEO_HOME");
    assert_eq!(
        failed(&report),
        [bad[0]["check"].as_str().unwrap()],
        "{report:#}"
    );
    assert!(
        bad[0]["detail"]
            .as_str()
            .unwrap()
            .contains("/elsewhere/.leo"),
        "{:#}",
        bad[0]
    );
    let fix = bad[0]["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!(
            "codex mcp add leo --env LEO_HOME={}",
            leo_home.display()
        )),
        "{fix}"
    );
    // The fix, run as printed, repairs it (naming the leo-mcp built beside this leo).
    run_fix(&home, fix).await;
    assert_eq!(doctor(&home, &leo_home).await.0, 0);

    // leo-mcp moved away.
    std::fs::rename(&leo_mcp, bin_dir.join("leo-mcp.old")).unwrap();
    let (code, report) = doctor(&home, &leo_home).await;
    assert_eq!(code, 1);
    assert_eq!(
        checks(&report, "codex", "command")[0]["status"],
        "ok",
        "{report:#}"
    );
    for harness in ["claude", "opencode"] {
        assert_eq!(
            checks(&report, harness, "command")[0]["status"],
            "fail",
            "{report:#}"
        );
        let c = checks(&report, harness, "command")[0];
        assert!(
            c["detail"].as_str().unwrap().contains("does not exist"),
            "{c:#}"
        );
        assert!(
            c["fix"]
                .as_str()
                .unwrap()
                .contains(&format!("{harness} mcp add")),
            "{c:#}"
        );
    }
    std::fs::rename(bin_dir.join("leo-mcp.old"), &leo_mcp).unwrap();

    // A project's .mcp.json with a broken Leo entry: the fix, run as printed, repairs that
    // entry (the project's scope wins over the user's, so a user-scope fix would not).
    let project = home.path().join("proj/.mcp.json");
    let broken = serde_json::json!({"mcpServers": {"leo": {
        "type": "stdio", "command": "/nowhere/leo-mcp", "args": ["--agent", "claude"], "env": {},
    }}});
    std::fs::write(&project, broken.to_string()).unwrap();
    let (code, report) = doctor(&home, &leo_home).await;
    assert_eq!(code, 1, "{report:#}");
    let c = checks(&report, &format!("claude {}", project.display()), "command")[0];
    let fix = c["fix"].as_str().unwrap();
    run_fix(&home, fix).await;
    assert_eq!(doctor(&home, &leo_home).await.0, 0, "{fix}");
    std::fs::remove_file(&project).unwrap();

    // The broker stopped.
    drop(broker);
    let text = home
        .command(bin("leo"))
        .arg("doctor")
        .env("LEO_HOME", &leo_home)
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL running: broker not running"), "{out}");
    assert!(out.contains("fix: start it: `leo broker`"), "{out}");
    let (_, report) = doctor(&home, &leo_home).await;
    assert_eq!(
        failed(&report),
        ["running"],
        "only the broker is wrong: {report:#}"
    );
    assert_eq!(leo_home, Path::new(report["leo_home"].as_str().unwrap()));
}

/// `leo doctor` on `leo_home` in `cwd`, with a `HOME` of its own and no harness CLI on `PATH`
/// (the broker's checks only): the exit code and stdout.
async fn doctor_alone(leo_home: &Path, cwd: &Path, json: bool) -> (i32, String) {
    let mut cmd = tokio::process::Command::new(bin("leo"));
    cmd.arg("doctor")
        .args(json.then_some("--json"))
        .env_clear()
        .env("HOME", cwd)
        .env("PATH", "/usr/bin:/bin")
        .env("LEO_HOME", leo_home)
        .current_dir(cwd);
    let out = cmd.output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), text)
}

/// `doctor_alone --json`: the exit code and the report.
async fn doctor_report(leo_home: &Path, cwd: &Path) -> (i32, Value) {
    let (code, text) = doctor_alone(leo_home, cwd, true).await;
    let report = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, report)
}

/// `check[field]` contains `part`.
fn says(check: &Value, field: &str, part: &str) {
    let text = check[field].as_str().unwrap_or_default();
    assert!(text.contains(part), "{field} without {part:?}: {check:#}");
}

/// The one check named `name`.
fn the_check<'a>(report: &'a Value, name: &str) -> &'a Value {
    let found = checks(report, name, "");
    assert_eq!(found.len(), 1, "{name}: {report:#}");
    found[0]
}

#[tokio::test]
async fn doctor_checks_the_broker_that_runs_on_this_home_where_it_listens() {
    // web.port is held by another program; the broker runs with --port 0 elsewhere.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    let broker = Broker::start_with(&format!("web:\n  port: {port}\n")).await;
    let cwd = tempfile::tempdir().unwrap();
    let pid = broker.pid();

    let (code, r) = doctor_report(broker.home(), cwd.path()).await;
    assert_eq!(code, 0, "{r:#}");
    says(the_check(&r, "running"), "detail", &format!("(pid {pid})"));
    let tcp = the_check(&r, "tcp");
    assert_eq!(tcp["status"], "ok", "{tcp:#}");
    let addr = broker.addr.to_string();
    says(tcp, "detail", &addr);
    let held = the_check(&r, "web.port");
    assert_eq!(held["status"], "warn", "{held:#}");
    says(
        held,
        "detail",
        &format!("another process holds 127.0.0.1:{port}"),
    );
    says(held, "detail", &addr);

    // Nothing on web.port: the broker's --port is only said.
    drop(other);
    let (code, r) = doctor_report(broker.home(), cwd.path()).await;
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(the_check(&r, "tcp")["status"], "ok", "{r:#}");
    assert_eq!(the_check(&r, "web.port")["status"], "info", "{r:#}");

    // The broker holds the home but its API socket is gone: it is named, and starting another
    // is not the advice.
    std::fs::remove_file(broker.home().join("run/leo.sock")).unwrap();
    let (code, r) = doctor_report(broker.home(), cwd.path()).await;
    assert_eq!(code, 1, "{r:#}");
    says(the_check(&r, "running"), "detail", &format!("(pid {pid}"));
    says(the_check(&r, "running"), "fix", &format!("kill {pid}"));
    let status = std::process::Command::new(bin("leo"))
        .arg("status")
        .env("LEO_HOME", broker.home())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&status.stderr);
    assert_eq!(status.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("(pid {pid}) does not answer")),
        "{err}"
    );
}

#[tokio::test]
async fn doctor_fixes_a_project_mcp_json_in_its_own_scope_and_says_the_fix_once() {
    let broker = Broker::start().await;
    let cwd = tempfile::tempdir().unwrap();
    let entry = serde_json::json!({"mcpServers": {"leo": {
        "type": "stdio",
        "command": "/nowhere/leo-mcp",
        "args": ["--agent", "claude"],
        "env": {"LEO_HOME": "/elsewhere/.leo"},
    }}});
    std::fs::write(cwd.path().join(".mcp.json"), entry.to_string()).unwrap();
    let (code, text) = doctor_alone(broker.home(), cwd.path(), false).await;
    assert_eq!(code, 1, "{text}");
    let fixes: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("fix: "))
        .filter(|f| f.contains("claude mcp"))
        .collect();
    assert_eq!(fixes.len(), 1, "the entry's one fix, once: {text}");
    assert!(
        fixes[0].starts_with("claude mcp remove --scope project leo; claude mcp add --transport stdio --scope project leo"),
        "{text}"
    );
    assert!(text.contains("fix: the one above"), "{text}");
    // A .mcp.json that does not parse: its own failure, not a user-scope entry to add.
    std::fs::write(cwd.path().join(".mcp.json"), "{\"mcpServers\": ").unwrap();
    let (_, text) = doctor_alone(broker.home(), cwd.path(), false).await;
    assert!(!text.contains("--scope user"), "{text}");
    assert!(text.contains(".mcp.json"), "{text}");
}
