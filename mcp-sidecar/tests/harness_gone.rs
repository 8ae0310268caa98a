//! The harness goes away (killed, or it quit) while a call is parked at the apps: leo-mcp must
//! end the call at once when stdin closes, not when rmcp's five-second drain of in-flight
//! responses is over.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;

use leo_testkit::{Broker, WAIT, bin};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::support::{Agent, AgentOpts, App, tool, wait_for_tools, wait_until};

/// Fills the pipe behind `writer` until a write would block, so the next write of whoever else
/// holds it waits until the pipe is read or closed.
fn fill(writer: &std::io::PipeWriter) {
    // A description of its own, non-blocking, so the child's end keeps its flags.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", writer.as_raw_fd()))
        .unwrap();
    // Whole pages first, then single bytes, so not even a short answer fits in what is left.
    for chunk in [4096, 1] {
        loop {
            match f.write(&vec![b'\n'; chunk]) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the pipe: {e}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closing_cancels_parked_calls_while_rmcp_is_still_draining() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("slow")])).await;

    // stdout is a pipe the test holds both ends of: once it is full, rmcp's drain cannot
    // finish, so leo-mcp stays alive for as long as the test wants. What the test checks is
    // the order: the app hears of the cancellation while leo-mcp is still there. Before, the
    // call ended only when the process exited.
    let (reader, writer) = std::io::pipe().unwrap();
    let stderr = broker.home().join("leo-mcp.stderr");
    let mut child = Command::new(bin("leo-mcp"))
        .args(["--agent", "rocket"])
        .env("LEO_HOME", broker.home())
        .env("LEO_MCP_LOG", "leo_mcp=debug,rmcp=debug")
        .stdin(Stdio::piped())
        .stdout(writer.try_clone().unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into()).unwrap();
    let mut lines = BufReader::new(reader).lines();
    let mut send = async |msg: Value| {
        let line = format!("{msg}\n");
        stdin.write_all(line.as_bytes()).await.unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "claude-code", "version": "2.1.0"}}}),
    )
    .await;
    let answer = tokio::time::timeout(WAIT, lines.next_line()).await;
    let answer: Value = serde_json::from_str(&answer.unwrap().unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}}}))
    .await;
    let id = app.next_request().await.data["id"].clone();

    fill(&writer);
    drop(stdin);
    let cancelled = app.next_cancelled().await.data;
    let alive = child.try_wait().unwrap().is_none();
    let log = || std::fs::read_to_string(&stderr).unwrap_or_default();
    assert_eq!(
        (&cancelled["id"], &cancelled["reason"]),
        (&id, &json!("agent_gone")),
        "{}",
        log()
    );
    assert!(
        alive,
        "the call ended only when leo-mcp exited, not when stdin closed:\n{}",
        log()
    );

    // Reading nothing more, the test closes the pipe: the drain fails and leo-mcp exits.
    drop(lines);
    drop(writer);
    let status = tokio::time::timeout(WAIT, child.wait()).await;
    assert!(status.is_ok(), "leo-mcp did not exit:\n{}", log());
}

/// The harness closing stdin is a clean exit: `leo-mcp` logs no warning, since harnesses show a
/// server's stderr to their users. Losing the broker is real trouble and still warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_exit_does_not_warn_and_a_lost_broker_does() {
    let warnings = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains(" WARN "))
            .map(str::to_owned)
            .collect()
    };
    let mut broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;

    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    wait_for_tools(&agent, |names| names == ["echo"]).await;
    let (pid, stderr) = (agent.pid, agent.stderr_path.clone());
    // rmcp's close: stdin is closed, then it waits for the process to exit.
    agent.client.cancel().await.unwrap();
    wait_until("leo-mcp exits", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
    .await;
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(log.contains("the harness closed stdin"), "{log}");
    assert_eq!(warnings(&log), Vec::<String>::new(), "{log}");

    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    wait_for_tools(&agent, |names| names == ["echo"]).await;
    broker.signal("KILL").await;
    wait_until("a warning of the lost broker", || {
        warnings(&agent.stderr())
            .iter()
            .any(|l| l.contains("lost the broker connection"))
    })
    .await;
}
