//! The sidecar side of the broker: `run/sidecar.sock`, one connection per agent session.
//!
//! A connection is a session: `hello` (with the agent token, or the agent's own token, see
//! `agent_tokens`) opens it, closing it means the agent stopped, and every call still in flight
//! is cancelled with reason `agent_gone`. Frames
//! are JSON lines (see `leo_protocol::ipc`). Tool-set changes reach each session through its
//! own coalescer: the first change after a quiet second is sent at once, later ones are folded
//! into one frame a second, and the last state is always sent. A change that leaves what this
//! session's agent is offered as it was (another agent's scope, a tool it is denied) sends
//! nothing.

use std::sync::Arc;

use bytes::Bytes;
use std::time::Duration;

use leo_protocol::ipc::{BrokerFrame, ResultFrame, SidecarFrame};
use leo_protocol::limits::{IPC_VERSION, MAX_FRAME_BYTES};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tracing::{Instrument, debug, info_span, warn};

use crate::agent_tokens::AgentKeys;
use crate::core::{Broker, encode_line};
use crate::requests::ConnId;

/// How long a new connection has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one tool-set frame a second per session.
pub const COALESCE: Duration = Duration::from_secs(1);

/// Accepts sidecar connections until shutdown.
pub async fn serve(listener: UnixListener, broker: Arc<Broker>, keys: AgentKeys) {
    let shutdown = broker.shutdown_token();
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    warn!(error = %e, "sidecar accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let broker2 = broker.clone();
        let keys = keys.clone();
        broker.tasks().spawn(async move {
            let (r, w) = stream.into_split();
            session(BufReader::new(r), w, broker2, &keys).await;
        });
    }
}

/// Reads one line of at most `MAX_FRAME_BYTES`. `Ok(None)` at end of stream. `leo call` reads
/// the broker's frames with it too.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let n = (&mut *reader)
        .take(MAX_FRAME_BYTES as u64 + 1)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    // A last frame without its newline still counts; a line over the limit does not.
    if buf.last() != Some(&b'\n') && buf.len() > MAX_FRAME_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame longer than {MAX_FRAME_BYTES} bytes"),
        ));
    }
    Ok(Some(buf))
}

async fn write_frame(w: &mut OwnedWriteHalf, frame: &BrokerFrame) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(frame).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

fn error_frame(code: leo_protocol::ErrorCode, message: impl Into<String>) -> BrokerFrame {
    BrokerFrame::Error {
        code: code.as_str().to_owned(),
        message: message.into(),
    }
}

fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

async fn session(
    mut reader: BufReader<OwnedReadHalf>,
    mut writer: OwnedWriteHalf,
    broker: Arc<Broker>,
    keys: &AgentKeys,
) {
    use leo_protocol::ErrorCode::InvalidFrame;
    let first = match tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut reader)).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            let _ = write_frame(&mut writer, &error_frame(InvalidFrame, e.to_string())).await;
            return;
        }
        Err(_) => {
            let _ = write_frame(
                &mut writer,
                &error_frame(InvalidFrame, "no hello within 10 s"),
            )
            .await;
            return;
        }
    };
    let hello = match leo_protocol::envelope::parse_json::<SidecarFrame>(&first) {
        Ok(SidecarFrame::Hello {
            v,
            agent,
            session,
            token,
            harness,
            mode,
        }) => {
            let refusal = if v != IPC_VERSION {
                Some((
                    InvalidFrame,
                    format!("at $.v: this broker speaks version {IPC_VERSION}, not {v}"),
                ))
            } else if !valid_agent_name(&agent) {
                // Checked before the token: the name picks the agent's own token file.
                Some((
                    InvalidFrame,
                    "at $.agent: must be 1 to 64 of [A-Za-z0-9_.-]".to_owned(),
                ))
            } else if let Err(refusal) = keys.check(&agent, &token) {
                Some((refusal.code, refusal.message))
            } else if session.is_empty() || session.len() > 128 {
                Some((
                    InvalidFrame,
                    "at $.session: must be 1 to 128 bytes".to_owned(),
                ))
            } else {
                None
            };
            if let Some((code, message)) = refusal {
                let _ = write_frame(&mut writer, &error_frame(code, message)).await;
                return;
            }
            (agent, session, harness, mode)
        }
        Ok(_) => {
            let _ = write_frame(
                &mut writer,
                &error_frame(InvalidFrame, "at $.type: the first frame must be hello"),
            )
            .await;
            return;
        }
        Err(e) => {
            let _ = write_frame(&mut writer, &error_frame(InvalidFrame, e.message)).await;
            return;
        }
    };
    let (agent, session_id, harness, mode) = hello;
    let conn = broker.session_open(&agent, &session_id, harness, mode);
    let span = info_span!("session", agent = %agent, session = %session_id, conn);
    run_session(conn, &agent, reader, writer, &broker)
        .instrument(span)
        .await;
    broker.session_closed(conn);
}

async fn run_session(
    conn: ConnId,
    agent: &str,
    mut reader: BufReader<OwnedReadHalf>,
    mut writer: OwnedWriteHalf,
    broker: &Arc<Broker>,
) {
    let mut revisions = broker.watch_revision();
    revisions.mark_unchanged();
    // Taken before the welcome: a change in between then differs and is sent, never lost.
    let offered = broker.offer_fingerprint(agent);
    // The welcome is encoded and dropped at once: a session lives for hours, and holding its
    // copy of every tool definition would cost each session the whole tool set in memory.
    let welcome = {
        let (revision, tools, ever_registered) = broker.agent_tools(agent);
        encode_line(&BrokerFrame::Welcome {
            v: IPC_VERSION,
            session: conn.to_string(),
            revision,
            tools,
            ever_registered,
            denied: broker.config().denied_for(agent),
        })
    };
    if writer.write_all(&welcome).await.is_err() {
        return;
    }
    drop(welcome);
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let writer_task = tokio::spawn(write_loop(
        writer,
        rx,
        revisions,
        broker.watch_arrivals(),
        broker.clone(),
        agent.to_owned(),
        offered,
    ));
    broker.attach_outbox(conn, tx.clone());
    let send = |frame: BrokerFrame| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(encode_line(&frame)).await;
        }
    };
    let shutdown = broker.shutdown_token();
    loop {
        let line = tokio::select! {
            _ = shutdown.cancelled() => break,
            line = read_frame(&mut reader) => line,
        };
        let line = match line {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                send(error_frame(
                    leo_protocol::ErrorCode::InvalidFrame,
                    e.to_string(),
                ))
                .await;
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match leo_protocol::envelope::parse_json::<SidecarFrame>(&line) {
            Ok(SidecarFrame::Call {
                id,
                tool,
                arguments,
            }) => {
                let span = tracing::info_span!("call", call = id, tool = %tool);
                let outcome = span.in_scope(|| {
                    debug!("call received");
                    broker.call(conn, id, &tool, arguments)
                });
                let tx = tx.clone();
                broker.tasks().spawn(
                    async move {
                        if let Ok(outcome) = outcome.await {
                            debug!(
                                ok = matches!(outcome, leo_protocol::ipc::Outcome::Content { .. }),
                                "call ended"
                            );
                            let frame = ResultFrame {
                                id,
                                outcome: &outcome,
                            };
                            let _ = tx.send(encode_line(&frame)).await;
                        }
                    }
                    .instrument(span),
                );
            }
            Ok(SidecarFrame::Cancel { id }) => broker.cancel_call(conn, id),
            Ok(SidecarFrame::FetchMessages { .. })
                if broker
                    .config()
                    .denied_for(agent)
                    .iter()
                    .any(|t| t == "leo_messages") =>
            {
                // The mailbox stays unread: a denied agent cannot drain it through raw frames.
                send(BrokerFrame::Error {
                    code: leo_protocol::ErrorCode::Denied.as_str().to_owned(),
                    message: format!("tool \"leo_messages\" is denied to agent {agent:?}"),
                })
                .await;
            }
            Ok(SidecarFrame::FetchMessages { id }) => {
                let (messages, dropped) = broker.take_messages(agent);
                send(BrokerFrame::Messages {
                    id,
                    messages,
                    dropped,
                })
                .await;
            }
            Ok(SidecarFrame::Harness { harness, mode }) => {
                broker.session_harness(conn, harness, mode)
            }
            Ok(SidecarFrame::InputAnswer { input, outcome }) => {
                broker.input_answered(conn, input, outcome)
            }
            Ok(SidecarFrame::Hello { .. }) => {
                send(error_frame(
                    leo_protocol::ErrorCode::InvalidFrame,
                    "at $.type: hello was already received",
                ))
                .await;
            }
            Err(e) => {
                send(error_frame(
                    leo_protocol::ErrorCode::InvalidFrame,
                    e.message,
                ))
                .await
            }
        }
    }
    // Calls still in flight end now (agent_gone); their results go out before the writer stops.
    broker.detach_outbox(conn);
    broker.session_closed(conn);
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer_task).await;
}

/// The session's one writer: frames queued by the reader and by call tasks, the coalesced
/// tool-set changes (the first at once, then at most one a second, the last state always),
/// and message arrivals for this agent. It ends when every sender is gone.
async fn write_loop(
    mut writer: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Bytes>,
    mut revisions: tokio::sync::watch::Receiver<u64>,
    mut arrivals: tokio::sync::broadcast::Receiver<(String, leo_protocol::ipc::Message)>,
    broker: Arc<Broker>,
    agent: String,
    mut offered: u64,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changed = false;
    let mut watching = true;
    let mut next_at = tokio::time::Instant::now();
    loop {
        let line: Bytes = tokio::select! {
            biased;
            frame = rx.recv() => match frame {
                Some(line) => line,
                None => return,
            },
            r = revisions.changed(), if watching && !changed => {
                match r {
                    Ok(()) => changed = true,
                    Err(_) => watching = false,
                }
                continue;
            }
            _ = tokio::time::sleep_until(next_at), if changed => {
                changed = false;
                let now = broker.offer_fingerprint(&agent);
                if now == offered {
                    continue;
                }
                offered = now;
                next_at = tokio::time::Instant::now() + COALESCE;
                broker.tools_line(&agent)
            }
            arrival = arrivals.recv() => match arrival {
                Ok((to, message)) if to == agent => {
                    encode_line(&BrokerFrame::MessageArrived { message })
                }
                // A missed push loses nothing: the message stays queued until fetched.
                Ok(_) | Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => std::future::pending().await,
            },
        };
        if writer.write_all(&line).await.is_err() {
            return;
        }
    }
}
