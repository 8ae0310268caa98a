//! Shared pieces: an app played by the test over HTTP/SSE, an agent played by an rmcp client
//! driving the real `leo-mcp` binary (`leo_testkit::agent`), and a raw JSON-RPC line client for
//! protocol edge cases.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use leo_testkit::{WAIT, bin};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

// ----- the app: the test kit's -----

pub use leo_testkit::app::{App, tool, tool_with_timeout};

// ----- the agent: an rmcp client on the real `leo-mcp`, shared through the testkit -----

pub use leo_testkit::agent::{
    Agent, AgentOpts, content_json, error_text, text_of, wait_for_tools, wait_until,
};

// ----- harness scripts on the official MCP SDKs (`tests/interop`) -----

/// Whether the TypeScript MCP SDK is installed in `tests/interop`; without it the test fails
/// with the install command, unless `LEO_TEST_SKIP=node`.
pub fn typescript_sdk() -> bool {
    leo_testkit::require::node_package(
        leo_testkit::require::Prereq::Node,
        "mcp-sidecar/tests/interop",
        "@modelcontextprotocol/sdk",
    )
}

/// `program tests/interop/<script>`, run there, on the built `leo-mcp` and the broker at `home`.
pub fn interop_command(program: impl AsRef<std::ffi::OsStr>, script: &str, home: &Path) -> Command {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let mut cmd = Command::new(program);
    cmd.arg(dir.join(script))
        .current_dir(&dir)
        .env("LEO_MCP_BIN", bin("leo-mcp"))
        .env("LEO_HOME", home);
    cmd
}

// ----- raw JSON-RPC -----

/// `leo-mcp` driven by hand-written JSON-RPC lines.
pub struct Raw {
    child: Child,
    stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
    stderr_path: PathBuf,
}

impl Raw {
    pub fn start(home: &Path, agent: &str) -> Raw {
        Raw::start_with(home, agent, &[], &[])
    }

    /// `start` with more arguments and environment.
    pub fn start_with(home: &Path, agent: &str, args: &[&str], env: &[(&str, &str)]) -> Raw {
        let mut child = Command::new(bin("leo-mcp"))
            .args(["--agent", agent])
            .args(args)
            .envs(env.iter().copied())
            .env("LEO_HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .env("LEO_MCP_LOG", "leo_mcp=debug,rmcp=debug")
            .stderr(std::fs::File::create(home.join("raw.stderr")).expect("stderr file"))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn leo-mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Raw {
            child,
            stdin,
            stdout,
            seen: Vec::new(),
            stderr_path: home.join("raw.stderr"),
        }
    }

    pub async fn send(&mut self, msg: &Value) {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.expect("write");
    }

    /// The next line from stdout, as JSON (every line must be JSON-RPC).
    pub async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.stdout.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no answer in time; seen so far: {:?}\n{}",
                    self.seen,
                    std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
                )
            })
            .expect("read")
            .expect("stdout ended");
        self.seen.push(line.clone());
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    /// Sends a request and returns the response with the same id, skipping notifications.
    pub async fn request(&mut self, msg: Value) -> Value {
        let id = msg["id"].clone();
        self.send(&msg).await;
        loop {
            let v = self.recv().await;
            if v["id"] == id {
                return v;
            }
        }
    }

    /// Closes stdin and waits for the process to exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin);
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("leo-mcp did not exit")
            .expect("wait")
    }
}
