//! Riding through a takeover: a cluster's leader is SIGKILLed while calls are running, and every
//! caller that waits keeps its call and gets its answer once a follower leads.
//!
//! One cluster and one kill for every kind of client, to keep it cheap: two instances on one
//! database, three apps entering through the follower (this SDK, the Python SDK and the
//! TypeScript SDK, each a real process but this one), and two kinds of callers on the follower
//! too: `leo call --wait` (a process per call), a `leo-mcp --url` over TCP and a `leo-mcp` on the
//! follower's socket. `leo call` and the first `leo-mcp` call each app's tool once before the
//! kill, and both `leo-mcp`s make a new call after it, while no instance leads (they wait for
//! the follower to lead, and, should they reach it before their app is back, for the tool to be
//! listed there). Every handler holds its call until the leader is dead, then answers,
//! so each answer is posted while no instance leads (refused `503 store_unavailable`, or its
//! connection closed) and must be posted again until the follower that took over takes it.
//! Meanwhile the follower's refusals say when to try again (`Retry-After`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use leo_app::{Call, Reply, Tool};
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
use leo_testkit::require::{self, Prereq};
use leo_testkit::{Broker, cluster};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::support::{Running, builder};

/// A bound on the calls after the kill: the lease (15 s), the restore, the apps' and the
/// callers' backoffs, and slack for a loaded machine.
const RIDE: Duration = Duration::from_secs(90);
/// The tools, one per SDK.
const TOOLS: [&str; 3] = ["rs", "py", "ts"];
/// How long `leo call` may wait for the broker to come back, each time.
const WAIT_S: &str = "60";

/// Where the handlers say a call started (`started-TOOL-N`) and wait for `go`.
struct Gate(tempfile::TempDir);

impl Gate {
    fn dir(&self) -> &Path {
        self.0.path()
    }

    fn started(&self) -> usize {
        std::fs::read_dir(self.dir())
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("started-"))
                    .count()
            })
            .unwrap_or(0)
    }

    fn open(&self) {
        std::fs::write(self.dir().join("go"), b"").unwrap();
    }
}

/// This SDK's tool: says it started, holds until the gate opens, answers `rs N`.
fn held(gate: PathBuf) -> Tool {
    Tool::new("rs", "Answers once the gate opens", move |call: Call| {
        let gate = gate.clone();
        async move {
            let n = call.arguments()["n"].as_u64().unwrap_or(0);
            std::fs::write(gate.join(format!("started-rs-{n}")), b"").unwrap();
            while !gate.join("go").exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Reply::text(format!("rs {n}"))
        }
    })
    .timeout_s(120)
}

const PYTHON_APP: &str = r#"
import os, sys, time
sys.path.insert(0, sys.argv[1])
from leo_app import App
gate = sys.argv[2]
app = App("py", backoff=(0.05, 0.5))

@app.tool(timeout_s=120)
def py(n: int) -> str:
    "Answers once the gate opens"
    open(os.path.join(gate, f"started-py-{n}"), "w").close()
    while not os.path.exists(os.path.join(gate, "go")):
        time.sleep(0.05)
    return f"py {n}"

app.run()
"#;

const NODE_APP: &str = r#"
const [dist, gate] = process.argv.slice(1);
const { App } = await import(dist);
const fs = await import("node:fs");
const path = await import("node:path");
const app = new App({ group: "ts", backoffMs: [50, 500] }).tool({
  name: "ts",
  description: "Answers once the gate opens",
  inputSchema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] },
  timeoutS: 120,
  handler: async ({ n }) => {
    fs.writeFileSync(path.join(gate, `started-ts-${n}`), "");
    while (!fs.existsSync(path.join(gate, "go"))) await new Promise((r) => setTimeout(r, 50));
    return `ts ${n}`;
  },
});
await app.serve(new AbortController().signal);
"#;

/// A process of the test's own on `home`, killed with the test.
fn spawn(mut cmd: Command, home: &Path) -> Child {
    cmd.env("LEO_HOME", home)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// An app's process, its output in `gate`'s `NAME.log` (read once it is killed).
fn spawn_app(mut cmd: Command, home: &Path, gate: &Path, name: &str) -> Child {
    let log = std::fs::File::create(gate.join(format!("{name}.log"))).unwrap();
    cmd.stdout(log.try_clone().unwrap()).stderr(log);
    spawn(cmd, home)
}

/// The Python and TypeScript apps, or `None` when a prerequisite is missing (and may be
/// skipped by name).
fn other_sdks(home: &Path, gate: &Path) -> Option<[Child; 2]> {
    let python = require::python(&[])?;
    let node = std::process::Command::new("node").arg("--version").output();
    let missing = (!node.is_ok_and(|o| o.status.success())).then(|| "node".to_owned());
    if !require::require(Prereq::Node, missing, "sudo apt-get install -y nodejs") {
        return None;
    }
    let root = require::repo_root();
    let mut py = Command::new(python);
    py.args(["-c", PYTHON_APP])
        .arg(root.join("sdks/python/src"))
        .arg(gate);
    let dist = format!(
        "file://{}",
        root.join("sdks/typescript/dist/index.js").display()
    );
    let mut ts = Command::new("node");
    ts.args(["--input-type=module", "-e", NODE_APP, "--", &dist])
        .arg(gate);
    Some([
        spawn_app(py, home, gate, "py"),
        spawn_app(ts, home, gate, "ts"),
    ])
}

/// `leo call --wait` of `tool` with `{"n": n}`, on `home`'s socket.
fn leo_call(home: &Path, tool: &str, n: u64) -> Child {
    let mut cmd = Command::new(leo_testkit::bin("leo"));
    cmd.args(["call", tool, &json!({"n": n}).to_string(), "--wait", WAIT_S])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn(cmd, home)
}

/// What a `leo call` printed, once it ended: its exit code, stdout and stderr.
async fn ended(child: Child) -> (Option<i32>, String, String) {
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

/// While no instance leads, the follower refuses requests `503 store_unavailable` and says when
/// to try again.
async fn refused_with_retry_after(follower: &Broker) {
    let http = follower.http();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(reply) = http.try_get("/api/v1/status").await
            && reply.status == 503
        {
            assert_eq!(reply.code(503), "store_unavailable", "{reply:?}");
            assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the follower never refused a request"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiting_caller_and_every_sdk_ride_through_a_leaders_sigkill() {
    let Some(db) = leo_testkit::postgres::database().await else {
        return;
    };
    let mut nodes = cluster::start(&db.config(), 2).await;
    let follower: Broker = nodes.pop().unwrap();
    let leader = nodes.pop().unwrap();
    let gate = Gate(tempfile::tempdir().unwrap());
    let app = builder(&follower)
        .group("rs", [held(gate.dir().to_owned())])
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let Some(others) = other_sdks(follower.home(), gate.dir()) else {
        return;
    };
    let remote = AgentOpts::remote("far", &follower.url(), &follower.agent_token());
    let agent = Agent::start(follower.home(), remote).await;
    let near = Agent::start(follower.home(), AgentOpts::native("near")).await;
    for agent in [&agent, &near] {
        wait_for_tools(agent, |names| {
            TOOLS.iter().all(|t| names.iter().any(|n| n == t))
        })
        .await;
    }
    let mcp: Vec<_> = TOOLS
        .iter()
        .map(|t| agent.spawn_call(t, json!({"n": 1})))
        .collect();
    let calls: Vec<_> = TOOLS
        .iter()
        .map(|t| leo_call(follower.home(), t, 2))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while gate.started() < 2 * TOOLS.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of the calls reached their apps",
            gate.started()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let killed = Instant::now();
    let _home = leader.kill_keep_home().await;
    gate.open();
    refused_with_retry_after(&follower).await;
    // New calls while no instance leads, once each `leo-mcp` knows its connection is lost:
    // they wait for the follower to lead instead of failing.
    let mut new_calls = Vec::new();
    for (agent, tool) in [(&agent, "rs"), (&near, "py")] {
        leo_testkit::agent::wait_until("leo-mcp to see its connection lost", || {
            agent.stderr().contains("lost the broker connection")
        })
        .await;
        new_calls.push((tool, agent.spawn_call(tool, json!({"n": 3}))));
    }
    let ride = async {
        let mut answers = Vec::new();
        for (tool, call) in TOOLS.iter().zip(mcp) {
            let result = call.await.unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {}", text_of(&result));
            answers.push((format!("leo-mcp --url: {tool}"), text_of(&result)));
        }
        for (tool, call) in TOOLS.iter().zip(calls) {
            let (code, out, err) = ended(call).await;
            assert_eq!(code, Some(0), "leo call {tool}: {err}");
            answers.push((format!("leo call --wait: {tool}"), out));
        }
        // A new call may reach the new leader before its app has registered again there:
        // refused `no_client`, and `leo-mcp`, back from a lost connection, makes it again once
        // the tool is listed. The first call is answered.
        for (tool, call) in new_calls {
            let result = call.await.unwrap();
            assert_ne!(result.is_error, Some(true), "{tool}: {}", text_of(&result));
            answers.push((format!("leo-mcp, a new call: {tool}"), text_of(&result)));
        }
        answers
    };
    let answers = tokio::time::timeout(RIDE, ride)
        .await
        .unwrap_or_else(|_| panic!("a call did not end: {}", follower.stderr()));
    eprintln!(
        "every call answered {:.1?} after the leader's SIGKILL",
        killed.elapsed()
    );
    let mut want: Vec<String> = [1, 2]
        .iter()
        .flat_map(|n| TOOLS.iter().map(move |t| format!("{t} {n}")))
        .collect();
    want.extend(["rs 3".to_owned(), "py 3".to_owned()]);
    let got: Vec<&String> = answers.iter().map(|(_, a)| a).collect();
    assert_eq!(got, want.iter().collect::<Vec<_>>(), "{answers:?}");
    app.stop().await.unwrap();
    drop(others);
    // Retrying many times on one stop signal must not pile listeners up on it.
    let ts = std::fs::read_to_string(gate.dir().join("ts.log")).unwrap();
    assert!(!ts.contains("MaxListenersExceededWarning"), "{ts}");
}
