//! Logs are for people and for files: colour (ANSI escapes) only when stderr is a terminal,
//! and never with `NO_COLOR` set, for `leo broker`, `leo serve-tool` and `leo-mcp`.

use std::path::Path;
use std::process::Stdio;

use leo_testkit::{Broker, WAIT, bin};

use crate::support::eventually;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

const ESC: char = '\x1b';

/// What `command` writes until `want`, read from its stderr, or with `pty` from its stdout
/// (`script` puts the program's stderr on the terminal it reads).
async fn first_words(mut command: Command, want: &str, pty: bool) -> String {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stream: Box<dyn tokio::io::AsyncRead + Unpin> = if pty {
        Box::new(child.stdout.take().unwrap())
    } else {
        Box::new(child.stderr.take().unwrap())
    };
    let mut out = String::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while !out.contains(want) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "output ended before {want:?}:\n{out}");
            out.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .unwrap_or_else(|_| panic!("no {want:?} in time"));
    let _ = child.kill().await;
    out
}

/// `leo serve-tool` with no broker to reach: it logs a warning and retries.
fn serve_tool(home: &Path) -> Vec<String> {
    [
        bin("leo").to_str().unwrap(),
        "--home",
        home.to_str().unwrap(),
        "serve-tool",
        "--name",
        "t",
        "--description",
        "T",
        "--",
        "cat",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// `args` run on a pseudo-terminal by util-linux `script`, with `NO_COLOR` as given.
fn on_a_terminal(args: &[String], no_color: Option<&str>) -> Command {
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &args.join(" "), "/dev/null"]);
    match no_color {
        Some(v) => cmd.env("NO_COLOR", v),
        None => cmd.env_remove("NO_COLOR"),
    };
    cmd
}

#[tokio::test]
async fn logs_are_plain_on_a_pipe_or_file_and_coloured_only_on_a_terminal_without_no_color() {
    // The broker logs to a file in every test.
    let broker = Broker::start().await;
    let _app = crate::support::App::connect(&broker.http()).await;
    eventually(async || broker.stderr().contains("event stream opened")).await;
    let log = broker.stderr();
    assert!(
        !log.contains(ESC),
        "escapes in the broker's log file:\n{log}"
    );

    let home = tempfile::tempdir().unwrap();
    let args = serve_tool(home.path());
    let mut piped = Command::new(&args[0]);
    piped.args(&args[1..]).env_remove("NO_COLOR");
    let said = first_words(piped, "retrying", false).await;
    assert!(!said.contains(ESC), "escapes on a pipe:\n{said:?}");

    // On a terminal the level is coloured, unless NO_COLOR says no.
    let said = first_words(on_a_terminal(&args, None), "retrying", true).await;
    assert!(said.contains(ESC), "a terminal gets colour:\n{said:?}");
    let said = first_words(on_a_terminal(&args, Some("1")), "retrying", true).await;
    assert!(!said.contains(ESC), "NO_COLOR=1 on a terminal:\n{said:?}");

    // leo-mcp's stderr is the harness's log: plain, whatever it is.
    let mut mcp = Command::new(bin("leo-mcp"));
    mcp.args(["--agent", "rocket"])
        .env("LEO_HOME", home.path())
        .env("LEO_MCP_LOG", "leo_mcp=info");
    let said = first_words(mcp, "leo-mcp starting", false).await;
    assert!(!said.contains(ESC), "escapes in leo-mcp's log:\n{said:?}");
}
