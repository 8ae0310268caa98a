//! `leo call TOOL [ARGS_JSON]`: call a client tool the way an agent does, from a terminal or a
//! script: to try an app's tool before wiring up a harness, or to use it from a shell.
//!
//! It opens its own sidecar session on `run/sidecar.sock` (`hello` as agent `--agent`, else
//! `$LEO_AGENT`, else `cli`; harness `leo call`) with that agent's own token when it has one
//! (`state/agents/NAME.token`), else the agent token, sends one `call` and waits for its
//! `result`. Text blocks print as plain text, other blocks as one JSON line each.
//! Ctrl-C and `--timeout` send `cancel` first, so the app sees the call end at once.
//! `--wait S` lets a script start the broker and an app just before: the call waits up to S
//! seconds for the broker to listen and for the tool to be served (the session's tool list).
//! It also rides through the broker going away while the call runs (a restart, or a cluster's
//! leader killed until a follower takes over): the session lost, `leo call` connects again for
//! up to S seconds, with the same session id and the call in `resume`, and the broker
//! re-attaches it, as `leo-mcp` does. A call refused `store_unavailable` (it changed nothing)
//! is made again in the same session, once a second, for up to S seconds; so is a call refused
//! because no connected app serves its tool (`no_client`) once the broker was away during the
//! call (a session lost, or `store_unavailable`), as soon as the tool is listed: the broker
//! just back may still be collecting its apps. Without `--wait` either is the end (exit 2, or 1
//! with the code).
//!
//! Exit codes: 0 the tool answered; 1 the call ended with an error (`<code>: <message>` on
//! stderr: the app's error, `timeout`, `no_client`, `denied`, `invalid_arguments`…); 2 the
//! call could not be made (bad ARGS_JSON, broker not running, session refused, connection
//! lost); 130 interrupted.

use std::io::{Read, Write};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use leo_broker::home::Home;
use leo_protocol::backoff::Backoff;
use leo_protocol::codes::is_unserved;
use leo_protocol::content::AppError;
use leo_protocol::ipc::{BrokerFrame, BrokerLine, Harness, Mode, Outcome, SidecarFrame};
use leo_protocol::limits::{IPC_VERSION, MAX_FRAME_BYTES};
use leo_protocol::lines::{Line, LineCodec, encode_frame};
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::{debug, info};

use super::{Unreachable, read_token};
use crate::error::{EXIT_INTERRUPTED, EXIT_UNREACHABLE};

/// The agent name when neither `--agent` nor `$LEO_AGENT` gives one.
pub const DEFAULT_AGENT: &str = "cli";
/// How long the broker has to welcome the session.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(10);
/// After a cancel, how long to wait for the broker to confirm the call ended.
const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// The id of the session's call; a call refused `store_unavailable` is made again with the next.
const FIRST_CALL_ID: u64 = 1;
/// With `--wait`, how often to try the socket again while no broker listens.
const RETRY: Duration = Duration::from_millis(100);
/// With `--wait`, the longest pause between attempts to get the session back.
const RETRY_CAP: Duration = Duration::from_secs(1);
/// The refusal that ends by itself: the broker's database is away, or no instance leads.
const STORE_UNAVAILABLE: &str = "store_unavailable";

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The client tool to call, by the name agents see.
    pub tool: String,
    /// The arguments, a JSON object (default {}); `-` reads them from stdin.
    #[arg(value_name = "ARGS_JSON")]
    pub args: Option<String>,
    /// Call as this agent (default: $LEO_AGENT, else `cli`); `deny_tools` applies.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Stop waiting after S seconds: cancel the call and exit 1 (default: the tool's timeout).
    #[arg(long, value_name = "S", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Wait up to S seconds for the broker to run and an app to serve the tool, and again for
    /// the broker to come back each time it is lost while the call runs.
    #[arg(long, value_name = "S", value_parser = parse_timeout)]
    pub wait: Option<Duration>,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    super::clock::parse_secs(text, 0.001, 604_800.0)
}

/// Why the call could not be made or followed to its end.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0}")]
    Arguments(String),
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    #[error("the broker refused the session: {code}: {message}")]
    Refused { code: String, message: String },
    #[error("the broker did not welcome the session within {} s", WELCOME_TIMEOUT.as_secs())]
    NoWelcome,
    #[error("the broker closed the session before the call ended")]
    Lost,
    #[error("the broker sent a bad frame: {0}")]
    BadFrame(String),
    #[error("cannot talk to the broker on its sidecar socket")]
    Io(#[source] std::io::Error),
}

/// How the call ended, as far as this command saw it.
#[derive(Debug)]
enum Ended {
    Answered(Outcome),
    Interrupted,
    GaveUp(Duration),
}

pub fn run(home: &Home, args: &CallArgs) -> crate::error::Result {
    crate::error::reported(call_and_say(home, args))
}

/// Runs the call, says how it ended, and returns the exit code.
fn call_and_say(home: &Home, args: &CallArgs) -> u8 {
    let ended = parse_arguments(args.args.as_deref()).and_then(|arguments| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CallError::Io)?;
        runtime.block_on(call(home, args, arguments))
    });
    match ended {
        Ok(Ended::Answered(Outcome::Content {
            content,
            structured_content,
        })) => {
            // A closed stdout (`leo call … | head -1`) is not the tool's failure.
            let _ = print_content(&content);
            if let Some(structured) = structured_content.filter(|_| content.is_empty()) {
                let _ = writeln!(std::io::stdout(), "{structured}");
            }
            0
        }
        Ok(Ended::Answered(Outcome::Error { error })) => {
            let AppError { code, message } = error;
            eprintln!("{code}: {message}");
            1
        }
        Ok(Ended::GaveUp(after)) => {
            eprintln!(
                "timeout: no result within {} s (the call was cancelled)",
                after.as_secs_f64()
            );
            1
        }
        Ok(Ended::Interrupted) => {
            eprintln!("leo call: interrupted, the call was cancelled");
            EXIT_INTERRUPTED
        }
        Err(e) => {
            eprintln!("leo call: {:#}", anyhow::Error::from(e));
            EXIT_UNREACHABLE
        }
    }
}

/// ARGS_JSON as the call's arguments: an object, `{}` when absent, stdin for `-`.
fn parse_arguments(text: Option<&str>) -> Result<Value, CallError> {
    let bad = |m: String| CallError::Arguments(m);
    let text = match text {
        None => return Ok(Value::Object(Default::default())),
        Some("-") => {
            let mut buf = String::new();
            std::io::stdin()
                .take(MAX_FRAME_BYTES as u64)
                .read_to_string(&mut buf)
                .map_err(|e| bad(format!("ARGS_JSON from stdin: {e}")))?;
            buf
        }
        Some(text) => text.to_owned(),
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| bad(format!("ARGS_JSON is not valid JSON: {e}")))?;
    let kind = match &value {
        Value::Object(_) => return Ok(value),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    Err(bad(format!(
        "ARGS_JSON must be a JSON object such as '{{\"text\": \"hi\"}}', not {kind}"
    )))
}

/// The agent token and a connection to the sidecar socket; with `--wait`, retried while no
/// broker runs yet.
async fn connect(
    home: &Home,
    agent: &str,
    wait_until: Option<Instant>,
) -> Result<(String, UnixStream), CallError> {
    let socket = home.sidecar_socket();
    // An agent with its own token (`leo agent add`) is opened with it, as leo-mcp does.
    let own = home.own_agent_token(agent);
    let token_path = if own.exists() {
        own
    } else {
        home.agent_token()
    };
    loop {
        let attempt = async {
            let token = read_token(&token_path, "agent")?;
            let stream = UnixStream::connect(&socket)
                .await
                .map_err(|source| Unreachable::connecting(&socket, source))?;
            Ok::<_, Unreachable>((token, stream))
        };
        match attempt.await {
            Ok(connected) => return Ok(connected),
            Err(e) if e.not_running() && wait_until.is_some_and(|t| Instant::now() < t) => {
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// With `--wait`: reads tool-set frames until `tool` is among them or the wait is over. The call
/// is made either way; if nobody serves the tool, the broker says so (`no_client`).
async fn wait_for_tool(
    frames: &mut mpsc::Receiver<Result<BrokerLine, CallError>>,
    tool: &str,
    until: Instant,
) -> Result<(), CallError> {
    loop {
        let frame = match tokio::time::timeout_at(until, frames.recv()).await {
            Err(_) => return Ok(()),
            Ok(frame) => frame.ok_or(CallError::Lost)??,
        };
        match frame {
            BrokerLine::Frame(BrokerFrame::Tools { tools, .. })
                if tools.iter().any(|t| t.name == tool) =>
            {
                return Ok(());
            }
            BrokerLine::Frame(BrokerFrame::Error { code, message, .. }) => {
                return Err(CallError::Refused { code, message });
            }
            _ => {}
        }
    }
}

/// The session's first frame: `leo call` is a native agent session of its own, the same
/// session each time it connects, naming the call it waits for (`resume`) once it made one.
fn hello(agent: String, token: String, resume: Option<u64>) -> SidecarFrame {
    SidecarFrame::Hello {
        v: IPC_VERSION,
        agent,
        session: format!("leo-call-{}", std::process::id()),
        token,
        harness: Some(Harness {
            name: "leo call".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }),
        mode: Mode::Native,
        resume: resume.into_iter().collect(),
        transport: Default::default(),
    }
}

/// A welcomed session: what to write to, what the broker sends, and the tools it listed.
struct Session {
    writer: FramedWrite<OwnedWriteHalf, LineCodec>,
    frames: mpsc::Receiver<Result<BrokerLine, CallError>>,
    tools: Vec<String>,
}

/// Connects, says `hello` (re-attaching `resume`) and waits for `welcome`.
async fn open(
    home: &Home,
    agent: &str,
    resume: Option<u64>,
    wait_until: Option<Instant>,
) -> Result<Session, CallError> {
    let (token, stream) = connect(home, agent, wait_until).await?;
    let (reader, writer) = stream.into_split();
    let mut writer = FramedWrite::new(writer, LineCodec::default());
    let mut frames = read_frames(FramedRead::new(
        reader,
        LineCodec::default().whole_lines_only(),
    ));
    send(&mut writer, &hello(agent.to_owned(), token, resume)).await?;
    let welcome = tokio::time::timeout(WELCOME_TIMEOUT, frames.recv())
        .await
        .map_err(|_| CallError::NoWelcome)?
        .ok_or(CallError::Lost)??;
    match welcome {
        BrokerLine::Frame(BrokerFrame::Welcome { tools, .. }) => Ok(Session {
            writer,
            frames,
            tools: tools.into_iter().map(|t| t.name).collect(),
        }),
        BrokerLine::Frame(BrokerFrame::Error { code, message, .. }) => {
            Err(CallError::Refused { code, message })
        }
        other => Err(CallError::BadFrame(format!(
            "expected welcome, got {other:?}"
        ))),
    }
}

/// [`open`], tried again until `until` while the broker is away for a while: its session
/// closed before the welcome (a cluster's instance with no leader to forward to yet), the
/// connection broke, or the broker refused it `store_unavailable`. Without `until`, once.
async fn open_within(
    home: &Home,
    agent: &str,
    resume: Option<u64>,
    until: Option<Instant>,
) -> Result<Session, CallError> {
    let mut backoff = Backoff::new(RETRY, RETRY_CAP);
    loop {
        match open(home, agent, resume, until).await {
            Err(e) if e.passes() && until.is_some_and(|t| Instant::now() < t) => {
                debug!(error = %e, "the broker is away; trying again");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            opened => return opened,
        }
    }
}

impl CallError {
    /// True for what ends by itself: the broker restarting, or a cluster between leaders.
    fn passes(&self) -> bool {
        match self {
            CallError::Lost | CallError::NoWelcome | CallError::Io(_) => true,
            CallError::Unreachable(e) => e.not_running(),
            CallError::Refused { code, .. } => code == STORE_UNAVAILABLE,
            CallError::Arguments(_) | CallError::BadFrame(_) => false,
        }
    }
}

/// The end of a wait of `--wait` that starts now. It waits for the broker and the tool before
/// the call, and for the broker again each time the session is lost while the call runs (a
/// restart, a cluster's takeover), re-attaching the call.
fn wait_from_now(wait: Option<Duration>) -> Option<Instant> {
    wait.map(|w| Instant::now() + w)
}

async fn call(home: &Home, args: &CallArgs, arguments: Value) -> Result<Ended, CallError> {
    let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
    let wait = args.wait;
    let agent = args
        .agent
        .clone()
        .or_else(|| std::env::var("LEO_AGENT").ok().filter(|a| !a.is_empty()))
        .unwrap_or_else(|| DEFAULT_AGENT.to_owned());
    let mut session = tokio::select! {
        opened = ready(home, &agent, &args.tool, wait_from_now(wait)) => opened?,
        _ = &mut interrupt => return Ok(Ended::Interrupted),
    };
    let mut id = FIRST_CALL_ID;
    let call = |id| SidecarFrame::Call {
        id,
        tool: args.tool.clone(),
        arguments: arguments.clone(),
        traceparent: None,
    };
    send(&mut session.writer, &call(id)).await?;
    let deadline = args.timeout.map(|d| Instant::now() + d);
    let timer = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
    let mut timer = std::pin::pin!(timer);
    let gave_up = || Ended::GaveUp(args.timeout.unwrap_or_default());
    // With `--wait`, once the broker was away (the session lost, or the call refused
    // `store_unavailable`): the end of the wait for it to be back on its feet.
    let mut settling = None;
    let stop = loop {
        let ended = tokio::select! {
            outcome = outcome(&mut session, id) => Ok(outcome),
            _ = &mut interrupt => Err(Ended::Interrupted),
            () = &mut timer, if deadline.is_some() => Err(gave_up()),
        };
        let ended = match ended {
            Err(stop) => break stop,
            Ok(ended) => ended,
        };
        match ended {
            // Refused before it changed anything: made again, in the same session, while the
            // wait lasts.
            Ok(Outcome::Error { error }) if makes_again(&error, &mut settling, wait) => {
                debug!(call = id, code = %error.code, "refused; making the call again");
                tokio::select! {
                    () = pause_before_again(&mut session, &args.tool, &error) => {}
                    _ = &mut interrupt => return Ok(Ended::Interrupted),
                    () = &mut timer, if deadline.is_some() => return Ok(gave_up()),
                }
                id += 1;
                send(&mut session.writer, &call(id)).await?;
                continue;
            }
            Ok(outcome) => return Ok(Ended::Answered(outcome)),
            Err(e) if e.passes() && wait.is_some() => {}
            Err(e) => return Err(e),
        }
        // The session was lost: the same session again, re-attaching the call.
        info!(call = id, "the broker is away; waiting for it");
        settling = wait_from_now(wait);
        session = tokio::select! {
            opened = open_within(home, &agent, Some(id), wait_from_now(wait)) => opened?,
            _ = &mut interrupt => return Ok(Ended::Interrupted),
            () = &mut timer, if deadline.is_some() => return Ok(gave_up()),
        };
    };
    // Tell the broker, and give it a moment to end the call before the session closes (closing
    // alone would end it too, as `agent_gone`; `cancel` says what happened).
    send(&mut session.writer, &SidecarFrame::Cancel { id }).await?;
    let _ = tokio::time::timeout(CANCEL_GRACE, outcome(&mut session, id)).await;
    Ok(stop)
}

/// Whether a refused call is made again, with `--wait`, while `settling` lasts (the broker was
/// away during this call; a `store_unavailable` refusal starts it). Two refusals change nothing
/// and end by themselves: `store_unavailable` (no instance leads, or the database is away), and
/// a tool no connected app serves (`is_unserved`) while the broker just back may still be
/// collecting its apps (the broker refuses such a call before it records or parks anything).
/// Without `--wait`, or with no sign of the broker having been away, either is the answer.
fn makes_again(error: &AppError, settling: &mut Option<Instant>, wait: Option<Duration>) -> bool {
    let unavailable = error.code == STORE_UNAVAILABLE;
    if unavailable && settling.is_none() {
        *settling = wait_from_now(wait);
    }
    (unavailable || is_unserved(&error.code, &error.message))
        && settling.is_some_and(|t| Instant::now() < t)
}

/// The pause before a refused call is made again: `RETRY_CAP`, or, for a tool no app served,
/// until the session lists it if sooner. A session lost meanwhile is seen by the next read.
async fn pause_before_again(session: &mut Session, tool: &str, error: &AppError) {
    let until = Instant::now() + RETRY_CAP;
    if error.code == STORE_UNAVAILABLE {
        tokio::time::sleep_until(until).await;
    } else if wait_for_tool(&mut session.frames, tool, until)
        .await
        .is_err()
    {
        // Lost or refused meanwhile: the pause still ends at `until`, then the call's send
        // or read meets the loss and the session is opened again.
        tokio::time::sleep_until(until).await;
    }
}

/// A session in which the call can be made: opened (with `--wait`, once the broker runs) and,
/// with `--wait`, once the tool is listed or the wait is over.
async fn ready(
    home: &Home,
    agent: &str,
    tool: &str,
    until: Option<Instant>,
) -> Result<Session, CallError> {
    loop {
        let mut session = open_within(home, agent, None, until).await?;
        let Some(until) = until.filter(|_| !session.tools.iter().any(|t| t == tool)) else {
            return Ok(session);
        };
        match wait_for_tool(&mut session.frames, tool, until).await {
            Ok(()) => return Ok(session),
            // Lost while the tool was awaited: the broker is away again, wait for it.
            Err(e) if e.passes() && Instant::now() < until => tokio::time::sleep(RETRY).await,
            Err(e) => return Err(e),
        }
    }
}

/// Waits for the result of the one call, skipping tool-set changes, message pushes and
/// progress. A question from the app is refused at once: a terminal has no form to show, and
/// the app can fall back.
async fn outcome(session: &mut Session, id: u64) -> Result<Outcome, CallError> {
    let Session { frames, writer, .. } = session;
    loop {
        match frames.recv().await.ok_or(CallError::Lost)?? {
            BrokerLine::Result(result) if result.id == id => return Ok(result.outcome),
            BrokerLine::Frame(BrokerFrame::Input { input, .. }) => {
                let refused = leo_protocol::ipc::InputOutcome::Refused {
                    error: AppError {
                        code: "input_unsupported".into(),
                        message: "leo call cannot ask its user".into(),
                    },
                };
                send(
                    writer,
                    &SidecarFrame::InputAnswer {
                        input,
                        outcome: refused,
                    },
                )
                .await?;
            }
            BrokerLine::Frame(BrokerFrame::Error { code, message, .. }) => {
                return Err(CallError::Refused { code, message });
            }
            _ => continue,
        }
    }
}

/// The broker's frames, read by a task of their own so that waiting for one can be abandoned
/// (Ctrl-C) without losing half a line.
fn read_frames(
    mut reader: FramedRead<OwnedReadHalf, LineCodec>,
) -> mpsc::Receiver<Result<BrokerLine, CallError>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let frame = match reader.next().await {
                None => return,
                Some(Ok(Line::Frame(line))) => {
                    BrokerLine::parse(&line).map_err(|e| CallError::BadFrame(e.message))
                }
                Some(Ok(Line::TooLong { .. })) => Err(CallError::BadFrame(Line::too_long_message(
                    reader.decoder().max(),
                ))),
                Some(Err(e)) => Err(CallError::Io(e)),
            };
            let last = frame.is_err();
            if tx.send(frame).await.is_err() || last {
                return;
            }
        }
    });
    rx
}

async fn send(
    writer: &mut FramedWrite<OwnedWriteHalf, LineCodec>,
    frame: &SidecarFrame,
) -> Result<(), CallError> {
    writer
        .send(encode_frame(frame))
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => CallError::Lost,
            _ => CallError::Io(e),
        })
}

/// Text blocks as they are, one per line; any other block as one JSON line.
fn print_content(content: &[Value]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for block in content {
        match (block["type"].as_str(), block["text"].as_str()) {
            (Some("text"), Some(text)) => {
                out.write_all(text.as_bytes())?;
                if !text.ends_with('\n') {
                    out.write_all(b"\n")?;
                }
            }
            _ => writeln!(out, "{block}")?,
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_one_json_object() {
        assert_eq!(
            parse_arguments(None).unwrap_or_default(),
            serde_json::json!({})
        );
        assert_eq!(
            parse_arguments(Some(r#"{"text": "hi"}"#)).unwrap_or_default(),
            serde_json::json!({"text": "hi"})
        );
        let message = |text| match parse_arguments(Some(text)) {
            Err(e) => e.to_string(),
            Ok(v) => panic!("{text} gave {v}"),
        };
        assert!(
            message("{text: 1}")
                .contains("not valid JSON: key must be a string at line 1 column 2")
        );
        assert!(message("[1]").ends_with("not an array"));
        assert!(message("\"hi\"").ends_with("not a string"));
        assert!(message("").contains("not valid JSON"));
    }

    /// With `--wait`, `store_unavailable` is made again and starts the wait; a tool nobody
    /// serves is made again only while a wait started by the broker being away lasts.
    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_made_again_only_while_the_broker_settles() {
        let error = |code: &str, message: &str| AppError {
            code: code.into(),
            message: message.into(),
        };
        let unserved = error("no_client", "no connected app serves tool \"x\"");
        let unavailable = error(STORE_UNAVAILABLE, "no instance leads");
        let wait = Some(Duration::from_secs(10));

        let mut settling = None;
        assert!(!makes_again(&unserved, &mut settling, wait), "never away");
        assert!(
            !makes_again(&unavailable, &mut None, None),
            "without --wait"
        );
        assert!(makes_again(&unavailable, &mut settling, wait));
        assert!(
            makes_again(&unserved, &mut settling, wait),
            "away a moment ago"
        );
        let gone = error(
            "no_client",
            "the app that claimed the call of \"x\" disconnected",
        );
        assert!(
            !makes_again(&gone, &mut settling, wait),
            "the call may have run"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            !makes_again(&unserved, &mut settling, wait),
            "the wait is over"
        );
        assert!(
            !makes_again(&unavailable, &mut settling, wait),
            "the wait is over"
        );
    }

    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(parse_timeout("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["0", "-2", "NaN", "10m", "604801"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }
}
