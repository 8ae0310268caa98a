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
