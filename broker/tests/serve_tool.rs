//! `leo serve-tool`: the real binary serving shell commands to an agent played by an rmcp client
//! driving the real `leo-mcp`. The commands measure themselves (pid files, a lock dir per
//! running script), so nothing here depends on timing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leo_testkit::agent::{Agent, AgentOpts, content_json, error_text, text_of, wait_until};
use leo_testkit::{Broker, Sse, WAIT, bin};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `leo serve-tool`.
struct ServeTool {
    child: Child,
    stderr: tokio::sync::watch::Receiver<String>,
}

impl ServeTool {
    fn command(broker: &Broker, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("leo"));
        cmd.arg("serve-tool")
            .args(args)
            .env("LEO_HOME", broker.home())
            .env("RUST_LOG", "leo_app=debug,info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Starts it and waits until it says it serves `tools` tools.
    async fn start(broker: &Broker, args: &[&str], tools: usize) -> ServeTool {
        let mut child = ServeTool::command(broker, args).spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, mut stderr) = tokio::sync::watch::channel(String::new());
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tx.send_modify(|all| {
                    all.push_str(&line);
                    all.push('\n');
                });
            }
        });
        let serving = |all: &String| all.matches("leo serve-tool: serving tool").count() >= tools;
        let ready = tokio::time::timeout(WAIT, stderr.wait_for(serving))
            .await
            .is_ok_and(|r| r.is_ok());
        assert!(
            ready,
            "serve-tool never served:\n{}",
            stderr.borrow().clone()
        );
        ServeTool { child, stderr }
    }

    fn stderr(&self) -> String {
        self.stderr.borrow().clone()
    }

    /// Sends SIGTERM and returns the exit status.
    async fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().unwrap().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("serve-tool did not stop")
            .unwrap()
    }
}

/// Runs `leo serve-tool args` that must fail; returns its stderr.
async fn refused(broker: &Broker, args: &[&str]) -> String {
    let out = tokio::time::timeout(WAIT, ServeTool::command(broker, args).output())
        .await
        .expect("serve-tool did not exit")
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Writes an executable script into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// True once process `pid` has exited (gone, or a zombie nobody reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// `leo serve-tool` serving script `job` as tool `job`, at most `jobs` runs at once.
async fn serve_job(broker: &Broker, job: &Path, jobs: &str) -> ServeTool {
    let args = [
        "--name",
        "job",
        "--description",
        "A job",
        "--jobs",
        jobs,
        "--",
    ];
    let mut args = args.to_vec();
    args.push(job.to_str().unwrap());
    ServeTool::start(broker, &args, 1).await
}

/// The states of the broker's calls, sorted, once `done` holds for them (or after 4 s).
async fn states_once(broker: &Broker, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut states = Vec::new();
    for _ in 0..200 {
        let reply = broker.http().get("/api/v1/client-tools/requests").await;
        states = reply
            .data()
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["state"].as_str().unwrap().to_owned())
            .collect();
        states.sort();
        if done(&states) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    states
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_is_the_result_and_a_failure_carries_the_last_stderr_line() {
    let broker = Broker::start().await;
    let echo = ServeTool::start(
        &broker,
        &[
            "--name",
            "echo_args",
            "--description",
            "Echoes its arguments",
            "--schema",
            r#"{"type": "object", "properties": {"text": {"type": "string"}}}"#,
            "--",
            "sh",
            "-c",
            r#"printf '%s %s ' "$LEO_AGENT" "$LEO_TOOL"; cat; echo"#,
        ],
        1,
    )
    .await;
    let fail = ServeTool::start(
        &broker,
        &[
            "--name",
            "fail",
            "--description",
            "Fails",
            "--group",
            "failing",
            "--",
            "sh",
            "-c",
            "echo working >&2; echo 'disk full' >&2; echo >&2; exit 3",
        ],
        1,
    )
    .await;
    assert!(
        fail.stderr()
            .contains("serving tool fail (group failing) on unix:"),
        "{}",
        fail.stderr()
    );
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let result = agent.call("echo_args", json!({"text": "hi"})).await;
    assert_eq!(text_of(&result), r#"claude echo_args {"text":"hi"}"#);
    let result = agent.call("fail", json!({})).await;
    assert_eq!(error_text(&result), "exit_3: disk full");

    // SIGTERM stops it cleanly, and it withdraws the tool.
    assert!(echo.stop().await.success());
    let listed = broker.http().get("/api/v1/client-tools").await;
    let names: Vec<&str> = listed.data()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["fail"]);
    assert!(fail.stop().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_file_serves_several_tools_with_json_content() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("upper.schema.json"),
        r#"{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}"#,
    )
    .unwrap();
    let blocks = r#"[{"type":"text","text":"a pixel"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]"#;
    let tools = dir.path().join("tools.yaml");
    std::fs::write(
        &tools,
        format!(
            r#"tools:
  - name: upper
    description: Upper-cases the arguments
    schema: upper.schema.json
    command: tr
    args: [a-z, A-Z]
    group: kit
  - name: picture
    description: A picture
    content: json
    command: printf
    args: ['%s', '{blocks}']
    group: kit
  - name: not_content
    description: Prints something that is not MCP content
    content: json
    command: echo
    args: ['[{{"type": "hologram"}}]']
"#
        ),
    )
    .unwrap();
    let served = ServeTool::start(&broker, &["--tools", tools.to_str().unwrap()], 3).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let result = agent.call("upper", json!({"text": "abc"})).await;
    assert_eq!(text_of(&result), r#"{"TEXT":"ABC"}"#);
    // The schema file is the tool's input schema: the broker checks calls against it.
    let result = agent.call("upper", json!({})).await;
    assert!(
        error_text(&result).starts_with("invalid_arguments:"),
        "{result:?}"
    );
    let result = agent.call("picture", json!({})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(
        content_json(&result),
        serde_json::from_str::<Value>(blocks).unwrap()
    );
    let result = agent.call("not_content", json!({})).await;
    assert_eq!(
        error_text(&result),
        "invalid_output: stdout is not MCP content: at $.content[0].type: unknown content type \"hologram\""
    );
    assert!(served.stop().await.success());
}

/// SIGTERM withdraws the tool before the stream closes, so a call parked for it ends at once
/// (a stream that merely closed would keep it for the broker's resume grace, 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_calls_parked_for_its_tool_at_once() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let body = format!("touch '{}'; sleep 300\n", started.display());
    let served = serve_job(&broker, &script(dir.path(), "job.sh", &body), "1").await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let running = agent.spawn_call("job", json!({}));
    wait_until("the job started", || started.exists()).await;
    let parked = agent.spawn_call("job", json!({}));
    let states = states_once(&broker, |s| s == ["claimed", "parked"]).await;
    assert_eq!(states, ["claimed", "parked"]);
    assert!(served.stop().await.success());
    assert_eq!(
        running.await.unwrap().is_error,
        Some(true),
        "its command was stopped"
    );
    let parked = tokio::time::timeout(Duration::from_secs(10), parked)
        .await
        .expect("the parked call waited for the resume grace")
        .unwrap();
    assert_eq!(error_text(&parked), "cancelled: tool \"job\" was withdrawn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_kills_the_whole_process_group() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A child that dies on SIGTERM, and a leader that ignores it: SIGKILL must follow.
    let stubborn = script(
        dir.path(),
        "stubborn.sh",
        r#"d=$(dirname "$0")
sleep 300 &
echo $! > "$d/pids.tmp"
echo $$ >> "$d/pids.tmp"
mv "$d/pids.tmp" "$d/pids"
trap '' TERM
while [ -d "$d" ]; do sleep 1; done
"#,
    );
    let served = ServeTool::start(
        &broker,
        &[
            "--name",
            "stubborn",
            "--description",
            "Never ends",
            "--timeout",
            "0",
            "--",
            stubborn.to_str().unwrap(),
        ],
        1,
    )
    .await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let call = agent.spawn_call("stubborn", json!({}));
    let pids_file = dir.path().join("pids");
    wait_until("the script started", || pids_file.exists()).await;
    let pids: Vec<u32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&p| !exited(p)));

    // Dropping rmcp's call future sends notifications/cancelled.
    call.abort();
    wait_until("the script and its child are gone", || {
        pids.iter().all(|&p| exited(p))
    })
    .await;
    assert!(served.stop().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_bounds_the_commands_running_at_once() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Each run holds a lock dir while it runs and writes how many it saw; it waits for `go`
    // (or for the test's directory to go, should the test fail).
    let job = script(
        dir.path(),
        "job.sh",
        r#"d=$(dirname "$0")
mkdir "$d/running.$$"
ls -d "$d"/running.* | wc -l >> "$d/counts"
while [ ! -e "$d/go" ] && [ -d "$d" ]; do sleep 0.05; done
rmdir "$d/running.$$"
echo done
"#,
    );
    let served = serve_job(&broker, &job, "2").await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let calls: Vec<_> = (0..4).map(|_| agent.spawn_call("job", json!({}))).collect();
    let running = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("running."))
            })
            .count()
    };
    wait_until("two jobs running", || running(dir.path()) == 2).await;
    // The other two wait at the broker, unclaimed, for anyone to take.
    let states = states_once(&broker, |s| s.len() == 4).await;
    assert_eq!(states, ["claimed", "claimed", "parked", "parked"]);

    std::fs::write(dir.path().join("go"), "").unwrap();
    for call in calls {
        assert_eq!(text_of(&call.await.unwrap()), "done");
    }
    let counts = std::fs::read_to_string(dir.path().join("counts")).unwrap();
    let counts: Vec<usize> = counts.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(counts.len(), 4);
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");
    assert!(served.stop().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_files_and_refused_tools_are_clear_errors() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("tools.yaml");
    std::fs::write(
        &bad_file,
        "tools:\n  - name: a\n    description: A\n    command: cat\n    timout: 5\n",
    )
    .unwrap();
    let bad_file = bad_file.to_str().unwrap();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--name", "a", "--description", "A"],
            "a command is required".into(),
        ),
        (
            vec![
                "--name",
                "a",
                "--description",
                "A",
                "--",
                "no-such-program-x",
            ],
            "leo: the command after -- is wrong: program \"no-such-program-x\" not found in PATH"
                .into(),
        ),
        (
            vec!["--name", "a", "--description", "A", "--", "./missing.sh"],
            "leo: the command after -- is wrong: \"./missing.sh\" not found".into(),
        ),
        (
            vec!["--name", "leo_a", "--description", "A", "--", "cat"],
            "uses the reserved prefix".into(),
        ),
        (
            vec![
                "--name",
                "a",
                "--description",
                "A",
                "--schema",
                "{\"type\": \"array\"}",
                "--",
                "cat",
            ],
            "root schema must have \"type\": \"object\"".into(),
        ),
        (
            vec!["--tools", bad_file],
            format!("{bad_file}: tools[0].timout: unknown field `timout`"),
        ),
        (
            vec!["--tools", bad_file, "--", "cat"],
            "give nothing after --".into(),
        ),
        (
            vec!["--description", "A", "--", "cat"],
            "--name <NAME>".into(),
        ),
    ];
    for (args, want) in cases {
        let stderr = refused(&broker, &args).await;
        assert!(
            stderr.contains(&want),
            "{args:?}: want {want:?} in\n{stderr}"
        );
    }

    // A rule only the broker knows: the name belongs to another group.
    let http = broker.http();
    let (_other, id) = Sse::provider(&http).await;
    http.post(
        "/api/v1/client-tools",
        &json!({"client_id": id, "group": "theirs", "tools": [
            {"name": "taken", "description": "Theirs", "input_schema": {"type": "object"}}]}),
    )
    .await
    .data();
    let stderr = refused(
        &broker,
        &["--name", "taken", "--description", "Mine", "--", "cat"],
    )
    .await;
    assert!(
        stderr.contains("leo: cannot register group \"taken\": ")
            && stderr.contains("(name_conflict)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_names_itself_after_its_tool_unless_told_otherwise() {
    let broker = Broker::start().await;
    let args = ["--description", "Echo", "--", "cat"];
    let first = ServeTool::start(&broker, &[&["--name", "echo_a"][..], &args].concat(), 1).await;
    let second = ServeTool::start(
        &broker,
        &[&["--name", "echo_b", "--app-name", "Echo box"][..], &args].concat(),
        1,
    )
    .await;
    let status = broker.http().get("/api/v1/status").await;
    let names: Vec<Value> = status.data()["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].clone())
        .collect();
    assert_eq!(names, [json!("serve-tool echo_a"), json!("Echo box")]);
    first.stop().await;
    second.stop().await;
}
