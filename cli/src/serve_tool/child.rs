//! One call, one process: run the tool's command with the call's arguments as JSON on stdin
//! and turn what it does into a reply.
//!
//! - stdin gets the arguments (compact JSON) and is closed; the call ends when the command has
//!   exited and closed stdout.
//! - stdout becomes the result: one text block (trailing newlines dropped), or with
//!   `content: json` the MCP content blocks it prints. More than 1 MiB (the broker's result
//!   limit) stops the command and is the app error `output_too_large`, never a hang.
//! - A non-zero exit is the app error `exit_<status>` (`signal_<n>` when a signal ended it),
//!   whose message is the last non-empty line of stderr.
//! - The command runs in a process group of its own. A cancelled call (timeout, the agent
//!   cancelled, the broker went away, serve-tool stopping) sends the group SIGTERM, then
//!   SIGKILL after `KILL_GRACE`; when a call ends for any reason, whatever is left of its group
//!   is killed, so no call leaves processes behind.

use std::time::Duration;

use leo_app::{Call, Reply};
use leo_protocol::content::check_content;
use leo_protocol::limits::MAX_RESULT_BYTES;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::spec::{ContentKind, ToolSpec};

/// How long a cancelled command has between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// The most of stdout read (one byte more is `output_too_large`).
pub const MAX_STDOUT: usize = MAX_RESULT_BYTES;
/// The tail of stderr kept for the error message.
const STDERR_TAIL: usize = 8 * 1024;
/// The longest error message taken from stderr, in characters.
const MAX_ERROR_LINE: usize = 1000;

/// A command's process group.
#[derive(Debug, Clone, Copy)]
struct Group(Pid);

impl Group {
    fn signal(self, signal: Signal) {
        // ESRCH: the group is already gone, which is what we wanted.
        let _ = killpg(self.0, signal);
    }
}

/// Kills what is left of the group when the call is over, however it ends.
struct KillOnDrop(Group);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.signal(Signal::SIGKILL);
    }
}

/// What the command did.
struct Finished {
    stdout: Result<Vec<u8>, TooLarge>,
    stderr: Vec<u8>,
    status: std::io::Result<std::process::ExitStatus>,
}

struct TooLarge;

/// Runs `spec`'s command for `call` and returns its reply.
pub async fn answer(spec: &ToolSpec, call: Call) -> Reply {
    // The arguments as the broker forwarded them: compact JSON, written as it came.
    let input = call.arguments.get().as_bytes().to_vec();
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .env("LEO_CALL_ID", call.id.as_str())
        .env("LEO_AGENT", &call.agent)
        .env("LEO_TOOL", &call.tool)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return Reply::error(
                "spawn_failed",
                format!("cannot run {}: {e}", spec.program.display()),
            );
        }
    };
    let Some(group) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|id| Group(Pid::from_raw(id)))
    else {
        return Reply::error("spawn_failed", "the command exited before it started");
    };
    let _cleanup = KillOnDrop(group);
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let run = async move {
        let write = async {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input may close stdin first: not an error.
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let read = async {
            let out = read_bounded(stdout).await;
            if out.is_err() {
                group.signal(Signal::SIGKILL);
            }
            out
        };
        let (_, stdout, stderr) = tokio::join!(write, read, read_tail(stderr));
        let status = child.wait().await;
        Finished {
            stdout,
            stderr,
            status,
        }
    };
    let mut run = Box::pin(run);
    tokio::select! {
        finished = &mut run => return reply(spec, finished),
        () = call.cancelled() => {}
    }
    tracing::debug!("call cancelled; stopping its process group");
    group.signal(Signal::SIGTERM);
    if tokio::time::timeout(KILL_GRACE, &mut run).await.is_err() {
        group.signal(Signal::SIGKILL);
        let _ = tokio::time::timeout(KILL_GRACE, &mut run).await;
    }
    Reply::error(
        "cancelled",
        "the call was cancelled and its command stopped",
    )
}

async fn read_bounded(stdout: Option<impl AsyncRead + Unpin>) -> Result<Vec<u8>, TooLarge> {
    let Some(stdout) = stdout else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    // One byte past the limit tells "exactly 1 MiB" from "more".
    let mut limited = stdout.take(MAX_STDOUT as u64 + 1);
    if limited.read_to_end(&mut out).await.is_err() || out.len() > MAX_STDOUT {
        return Err(TooLarge);
    }
    Ok(out)
}

/// Reads stderr to its end, keeping the last `STDERR_TAIL` bytes.
async fn read_tail(stderr: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let Some(mut stderr) = stderr else {
        return Vec::new();
    };
    let mut tail = Vec::new();
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 2 * STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    tail
}

/// The last non-empty line of stderr, cut to `MAX_ERROR_LINE` characters.
fn last_line(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(MAX_ERROR_LINE).collect())
}

fn reply(spec: &ToolSpec, finished: Finished) -> Reply {
    let status = match finished.status {
        Ok(status) => status,
        Err(e) => return Reply::error("wait_failed", format!("cannot wait for the command: {e}")),
    };
    let Ok(stdout) = finished.stdout else {
        return Reply::error(
            "output_too_large",
            format!("the command wrote more than {MAX_STDOUT} bytes to stdout"),
        );
    };
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        let program = spec.program.display();
        let (code, fallback) = match (status.code(), status.signal()) {
            (Some(n), _) => (
                format!("exit_{n}"),
                format!("{program} exited with status {n}"),
            ),
            (None, Some(s)) => (
                format!("signal_{s}"),
                format!("{program} was killed by signal {s}"),
            ),
            (None, None) => ("command_failed".into(), format!("{program} failed")),
        };
        return Reply::error(code, last_line(&finished.stderr).unwrap_or(fallback));
    }
    match spec.content {
        ContentKind::Text => text(stdout),
        ContentKind::Json => json_content(stdout),
    }
}

fn text(mut stdout: Vec<u8>) -> Reply {
    while stdout.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
        stdout.pop();
    }
    match String::from_utf8(stdout) {
        Ok(text) => Reply::text(text),
        Err(e) => Reply::text(String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

/// stdout as MCP content: an array of blocks, or one block. It is checked as the broker would
/// and posted as printed.
fn json_content(stdout: Vec<u8>) -> Reply {
    let raw: Box<RawValue> = match serde_json::from_slice(&stdout) {
        Ok(raw) => raw,
        Err(e) => return Reply::error("invalid_output", format!("stdout is not JSON: {e}")),
    };
    let array = raw.get().starts_with('[');
    let blocks: Vec<Box<RawValue>> = if array {
        serde_json::from_str(raw.get()).unwrap_or_default()
    } else if raw.get().starts_with('{') {
        vec![raw.clone()]
    } else {
        return Reply::error(
            "invalid_output",
            "stdout is not MCP content: expected an array of content blocks or one block",
        );
    };
    if let Err(e) = check_content(&blocks) {
        return Reply::error("invalid_output", format!("stdout is not MCP content: {e}"));
    }
    if array {
        Reply::raw_content(stdout)
    } else {
        Reply::raw_content(format!("[{}]", raw.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_stderr_line_is_the_message() {
        assert_eq!(
            last_line(b"first\nsecond line  \n\n  \n").as_deref(),
            Some("second line")
        );
        assert_eq!(last_line(b"\n \n"), None);
        let long = "x".repeat(5000);
        assert_eq!(
            last_line(long.as_bytes()).map(|l| l.len()),
            Some(MAX_ERROR_LINE)
        );
    }

    #[test]
    fn stdout_becomes_text_or_checked_content() {
        let bytes = |r: &Reply| r.content_bytes().map(|b| b.to_vec()).unwrap_or_default();
        let parsed = |r: &Reply| serde_json::from_slice::<serde_json::Value>(&bytes(r)).ok();
        assert_eq!(
            parsed(&text(b"hello\n\n".to_vec())),
            Some(serde_json::json!([{"type": "text", "text": "hello"}]))
        );
        let one = json_content(br#"{"type": "text", "text": "a"}"#.to_vec());
        assert_eq!(
            parsed(&one),
            Some(serde_json::json!([{"type": "text", "text": "a"}]))
        );
        let code = |r: Reply| r.app_error().map(|e| (e.code.clone(), e.message.clone()));
        let (c, m) = code(json_content(b"not json".to_vec())).unwrap_or_default();
        assert_eq!(c, "invalid_output");
        assert!(m.starts_with("stdout is not JSON"), "{m}");
        let (c, m) = code(json_content(br#"[{"type": "text"}]"#.to_vec())).unwrap_or_default();
        assert_eq!(c, "invalid_output");
        assert_eq!(
            m,
            "stdout is not MCP content: at $.content[0].text: missing field"
        );
        let (_, m) = code(json_content(b"3".to_vec())).unwrap_or_default();
        assert!(m.contains("expected an array of content blocks"), "{m}");
    }
}
