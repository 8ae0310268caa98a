//! Bench (not a test): how fast `leo-mcp` answers `initialize`, and how much memory it holds.
//!
//! Run with `cargo build --release -p leo-cli && cargo bench -p leo-mcp --bench startup`.
//! It measures, against the real release binaries:
//! - spawn → `initialize` answered, with the broker up and with no broker, over many runs;
//! - resident memory (VmRSS, and the peak VmHWM) of an idle session that has listed 64 tools.
//!
//! Targets from the sidecar issue: under 10 ms and under 8 MiB.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leo_testkit::{Broker, Sse, bin};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const RUNS: usize = 40;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Session {
    fn spawn(home: &Path, mode: &str) -> Session {
        let mut child = Command::new(bin("leo-mcp"))
            .args(["--agent", "bench", "--mode", mode])
            .env("LEO_HOME", home)
            .env("LEO_MCP_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn leo-mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Session {
            child,
            stdin,
            stdout,
        }
    }

    async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line())
            .await
            .expect("no answer")
            .unwrap()
            .expect("stdout ended");
        serde_json::from_str(&line).unwrap()
    }

    async fn initialize(&mut self) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": "bench"}}}),
        )
        .await;
        self.recv().await
    }

    fn rss_kib(&self, field: &str) -> u64 {
        let pid = self.child.id().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

async fn time_initialize(home: &Path) -> Vec<Duration> {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        let mut s = Session::spawn(home, "auto");
        let reply = s.initialize().await;
        times.push(start.elapsed());
        assert!(reply["result"]["capabilities"]["tools"]["listChanged"] == true);
        drop(s);
    }
    times.sort();
    times
}

fn report(what: &str, times: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "{what}: min {:.2} ms, median {:.2} ms, p90 {:.2} ms, max {:.2} ms ({} runs)",
        ms(times[0]),
        ms(pick(0.5)),
        ms(pick(0.9)),
        ms(times[times.len() - 1]),
        times.len()
    );
}

fn schema(i: usize) -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": format!("What tool {i} should work on")},
            "count": {"type": "integer", "minimum": 0, "maximum": 100},
            "mode": {"type": "string", "enum": ["fast", "careful", "dry-run"]}
        },
        "required": ["text"]
    })
}

async fn bench() {
    let broker_bin = bin("leo-mcp").with_file_name("leo");
    if !broker_bin.exists() {
        println!(
            "{} is missing: run `cargo build --release -p leo-cli` first",
            broker_bin.display()
        );
        return;
    }
    println!("leo-mcp: {}", bin("leo-mcp").display());

    let cold = tempfile::tempdir().unwrap();
    report(
        "start → initialize answered, no broker",
        &time_initialize(cold.path()).await,
    );

    let broker = Broker::start().await;
    report(
        "start → initialize answered, broker up",
        &time_initialize(broker.home()).await,
    );

    // 64 tools, the most a broker holds.
    let http = broker.http();
    let (_sse, client_id) = Sse::provider(&http).await;
    let tools: Vec<Value> = (0..64)
        .map(|i| {
            json!({"name": format!("tool_{i:02}"), "description": format!("Bench tool number {i}, which does nothing"),
                "input_schema": schema(i), "label": format!("Tool {i}")})
        })
        .collect();
    http.post(
        "/api/v1/client-tools",
        &json!({"client_id": client_id, "group": "bench", "tools": tools}),
    )
    .await
    .data();

    for mode in ["native", "fallback"] {
        let mut s = Session::spawn(broker.home(), mode);
        s.initialize().await;
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        s.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .await;
        let listed = s.recv().await;
        let n = listed["result"]["tools"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!(
            "idle after listing {n} tools ({mode} mode): VmRSS {} KiB, VmHWM {} KiB",
            s.rss_kib("VmRSS:"),
            s.rss_kib("VmHWM:")
        );
    }
}
