//! A helper process that a test drives in steps: a Node script with an SDK client or a browser
//! prints `{"step": NAME, …}` lines on stdout when it reaches a point, and reads lines on stdin
//! when it must wait for the test. Its stderr goes to a file that failures quote.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::WAIT;

/// A running script.
pub struct Script {
    child: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
    log: PathBuf,
}

impl Script {
    /// Starts `cmd` with piped stdin and stdout and its stderr in `log`.
    pub fn spawn(mut cmd: Command, log: &Path) -> Script {
        let stderr = std::fs::File::create(log).expect("script log file");
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the script");
        let stdin = child.stdin.take().expect("stdin");
        let out = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Script {
            child,
            stdin,
            out,
            log: log.to_owned(),
        }
    }

    /// What the script wrote on stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The next line, which must be step `want`; panics (quoting the log) otherwise.
    pub async fn step(&mut self, want: &str) -> Value {
        let line = tokio::time::timeout(WAIT, self.out.next_line())
            .await
            .unwrap_or_else(|_| panic!("no {want} step in time\n{}", self.log()))
            .expect("read the script's stdout")
            .unwrap_or_else(|| panic!("the script ended before {want}\n{}", self.log()));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["step"], want, "{v}\n{}", self.log());
        v
    }

    /// Writes one line to the script's stdin.
    pub async fn send_line(&mut self, line: &str) {
        let mut line = line.to_owned();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the script");
    }

    /// Writes `value` as one JSON line.
    pub async fn send(&mut self, value: &Value) {
        self.send_line(&value.to_string()).await;
    }

    /// Waits (bounded) for the script to exit.
    pub async fn exit(mut self) -> ExitStatus {
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the script did not exit")
            .expect("wait for the script")
    }
}
