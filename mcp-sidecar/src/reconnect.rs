//! The task that keeps this session connected to the broker.
//!
//! It connects to the broker (`run/sidecar.sock`, or `--url`: see `dial`), says `hello` with the agent token, waits for `welcome`,
//! then feeds every broker frame to the `BrokerLink` until the connection ends. Then it waits
//! (capped backoff) and starts over. A broker that is down, restarting or refusing the session
//! is therefore never an error the harness sees: new calls are answered `no_client` while it
//! is down (after waiting up to `link::RIDE_OUT` for a connection that was lost to come back:
//! `BrokerLink::back_within`), and calls already in flight keep waiting; the next `hello` names them in
//! `resume` (with the same session id) and the broker re-attaches them, so their results
//! still arrive after a broker restart.
//!
//! When the harness closes stdin (`stdin_closed`), the task closes the connection at once and
//! ends: the broker then ends the session's calls as `agent_gone` (see `run`).

use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ipc::{BrokerFrame, Harness, SidecarFrame};
use leo_protocol::limits::IPC_VERSION;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::cli::Settings;
use crate::error::{Result, SidecarError};
use crate::frames::{Incoming, Reader, Writer, read_frame, read_incoming, write_frame};
use crate::link::{BrokerLink, NOT_RUNNING};
use crate::mode;
use leo_protocol::backoff::Backoff;
use leo_protocol::chain::error_chain;

/// Why calls fail once the harness has closed stdin.
pub const HARNESS_GONE: &str = "the harness closed stdin";

/// How long the broker has to answer `hello`.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs until the process ends, or until stdin closes.
pub async fn run(
    settings: Settings,
    session: String,
    link: Arc<BrokerLink>,
    mut stdin_closed: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    let mut last_failure = String::new();
    loop {
        let attempt = async {
            let result = connect(&settings, &session, &link).await;
            match result {
                Ok(conn) => {
                    backoff.reset();
                    last_failure.clear();
                    match conn.serve(&link).await {
                        Ok(()) => info!("the broker closed the connection"),
                        Err(e) => warn!(error = %error_chain(&e), "broker connection failed"),
                    }
                    link.detached(NOT_RUNNING);
                }
                Err(e) => failed(&e, &mut last_failure, &link),
            }
            tokio::time::sleep(backoff.next_delay()).await;
        };
        // Dropping `attempt` drops the connection's reader; `detached` drops the outbox, which
        // ends the writer: the socket closes and the broker ends the session's calls.
        tokio::select! {
            () = attempt => {}
            _ = stdin_closed.wait_for(|closed| *closed) => {
                info!("the harness closed stdin; ending this session's calls");
                link.stopped(HARNESS_GONE);
                return;
            }
        }
    }
}

/// A connection attempt failed: say so once per kind of failure, not every 5 s while the
/// broker is down.
fn failed(e: &SidecarError, last_failure: &mut String, link: &BrokerLink) {
    let reason = match e {
        SidecarError::Refused { .. } => e.to_string(),
        SidecarError::Unreachable { .. } | SidecarError::NoToken => error_chain(e),
        _ => NOT_RUNNING.to_owned(),
    };
    let text = error_chain(e);
    if text != *last_failure {
        warn!(error = %text, "cannot reach the broker; retrying in the background");
        *last_failure = text;
    } else {
        debug!(error = %last_failure, "broker still unreachable");
    }
    link.detached(&reason);
}

/// A connection that has been welcomed.
struct Connection {
    reader: Reader,
    writer: Writer,
    outbox: mpsc::UnboundedReceiver<SidecarFrame>,
}

impl Connection {
    /// Writes queued frames and applies incoming ones until either side fails or ends.
    async fn serve(self, link: &BrokerLink) -> Result<()> {
        let Connection {
            mut reader,
            mut writer,
            mut outbox,
        } = self;
        let mut writer_task = tokio::spawn(async move {
            while let Some(frame) = outbox.recv().await {
                write_frame(&mut writer, &frame).await?;
            }
            Ok::<(), SidecarError>(())
        });
        let result = loop {
            tokio::select! {
                frame = read_incoming(&mut reader) => match frame {
                    Ok(Some(Incoming::Result { id, ending })) => link.settle(id, ending),
                    Ok(Some(Incoming::Frame(frame))) => link.apply(frame),
                    Ok(Some(Incoming::Unreadable { answers, message })) => {
                        link.unreadable(answers, &message)
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                },
                written = &mut writer_task => break match written {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(SidecarError::Join(e)),
                },
            }
        };
        writer_task.abort();
        result
    }
}

async fn connect(settings: &Settings, session: &str, link: &BrokerLink) -> Result<Connection> {
    let token = settings.read_token()?;
    let (mut reader, mut writer) = settings.dial().open(&token).await?;
    let known = link.harness();
    let hello_harness: Option<Harness> = known.as_ref().map(|(h, _)| h.clone());
    let mode = known
        .as_ref()
        .map(|(_, m)| *m)
        .unwrap_or_else(|| mode::provisional(settings.mode));
    let hello = SidecarFrame::Hello {
        v: IPC_VERSION,
        agent: settings.agent.to_string(),
        session: session.to_owned(),
        token,
        harness: hello_harness.clone(),
        mode,
        // The same session id on every connection: the broker re-attaches these calls to it.
        resume: link.resume_ids(),
        transport: settings.transport,
    };
    write_frame(&mut writer, &hello).await?;
    let first = tokio::time::timeout(WELCOME_TIMEOUT, read_frame(&mut reader))
        .await
        .map_err(|_| SidecarError::BadFrame {
            message: format!("no welcome within {WELCOME_TIMEOUT:?}"),
        })??;
    match first {
        Some(welcome @ BrokerFrame::Welcome { .. }) => {
            if let BrokerFrame::Welcome { otlp_endpoint, .. } = &welcome {
                crate::trace::start_from_welcome(otlp_endpoint.as_deref());
            }
            let (tx, rx) = mpsc::unbounded_channel();
            link.attached(tx, &welcome, hello_harness.as_ref());
            Ok(Connection {
                reader,
                writer,
                outbox: rx,
            })
        }
        Some(BrokerFrame::Error { code, message, .. }) => {
            Err(SidecarError::Refused { code, message })
        }
        Some(_) => Err(SidecarError::BadFrame {
            message: "the first frame must be welcome".into(),
        }),
        None => Err(SidecarError::NotRunning),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::too_many_lines)]
    use super::*;
    use crate::outcome::Ending;
    use leo_protocol::ipc::Outcome;
    use leo_protocol::limits::MAX_FRAME_BYTES;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    fn welcome() -> BrokerFrame {
        BrokerFrame::Welcome {
            v: IPC_VERSION,
            session: "1".into(),
            revision: 0,
            tools: vec![],
            ever_registered: true,
            denied: vec![],
            otlp_endpoint: None,
            mode: None,
        }
    }

    /// A result frame for call `id` whose one block nests `levels` deep in `annotations`.
    fn deep_result(id: u64, levels: usize) -> String {
        format!(
            r#"{{"type":"result","id":{id},"outcome":{{"content":[{{"type":"text","text":"deep","annotations":{}0{}}}]}}}}"#,
            r#"{"a":"#.repeat(levels),
            "}".repeat(levels)
        )
    }

    fn error_text(ending: Ending) -> String {
        match ending {
            Outcome::Error { error } => format!("{}: {}", error.code, error.message),
            Outcome::Content { content, .. } => panic!("expected an error, got {content:?}"),
        }
    }

    #[tokio::test]
    async fn one_unreadable_frame_fails_its_call_alone_and_the_link_stays_up() {
        let link = BrokerLink::new();
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let (reader, writer) = crate::frames::split(ours);
        let (tx, outbox) = mpsc::unbounded_channel();
        link.attached(tx, &welcome(), None);
        let conn = Connection {
            reader,
            writer,
            outbox,
        };
        let serving = {
            let link = link.clone();
            tokio::spawn(async move { conn.serve(&link).await })
        };

        // Four calls in flight.
        let calls: Vec<_> = (0..4)
            .map(|_| link.start_call("echo", serde_json::json!({})).unwrap())
            .collect();
        let (theirs_r, mut theirs_w) = theirs.into_split();
        let mut lines = tokio::io::BufReader::new(theirs_r).lines();
        for _ in 0..4 {
            let line = lines.next_line().await.unwrap().unwrap();
            assert!(line.contains(r#""type":"call""#), "{line}");
        }
        let ids: Vec<u64> = calls.iter().map(|(id, _)| *id).collect();

        // Too deep for serde_json; longer than a frame may be; no frame at all; and a good one.
        let too_long = format!(
            r#"{{"type":"result","id":{},"outcome":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
            ids[1],
            "x".repeat(MAX_FRAME_BYTES)
        );
        let good = format!(
            r#"{{"type":"result","id":{},"outcome":{{"content":[{{"type":"text","text":"fine"}}]}}}}"#,
            ids[3]
        );
        let text = format!(
            "{}\n{too_long}\n{{\"type\":\"nonsense\"}}\n{{\"type\":\"result\",\"id\":{},\"outcome\":7}}\n{good}\n",
            deep_result(ids[0], 200),
            ids[2],
        );
        theirs_w.write_all(text.as_bytes()).await.unwrap();

        let mut endings = Vec::new();
        for (_, rx) in calls {
            endings.push(
                tokio::time::timeout(Duration::from_secs(10), rx)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        let mut endings = endings.into_iter();
        let deep = error_text(endings.next().unwrap());
        assert!(
            deep.starts_with("invalid_result: leo-mcp could not read this call's result (")
                && deep.contains("recursion limit"),
            "{deep}"
        );
        let long = error_text(endings.next().unwrap());
        assert!(long.contains("frame longer than"), "{long}");
        let odd = error_text(endings.next().unwrap());
        assert!(odd.starts_with("invalid_result: "), "{odd}");
        match endings.next().unwrap() {
            Outcome::Content { content, .. } => {
                assert_eq!(content, vec![rmcp::model::ContentBlock::text("fine")])
            }
            other => panic!("{other:?}"),
        }

        // The connection is still the session's: a new call goes out and comes back.
        assert_eq!(link.down_reason(), None);
        assert!(!serving.is_finished());
        let (id, rx) = link.start_call("echo", serde_json::json!({})).unwrap();
        assert!(
            lines
                .next_line()
                .await
                .unwrap()
                .unwrap()
                .contains(r#""type":"call""#)
        );
        let again = format!(
            "{{\"type\":\"result\",\"id\":{id},\"outcome\":{{\"error\":{{\"code\":\"x\",\"message\":\"y\"}}}}}}\n"
        );
        theirs_w.write_all(again.as_bytes()).await.unwrap();
        assert_eq!(error_text(rx.await.unwrap()), "x: y");

        // The broker closing is what ends it.
        drop(theirs_w);
        drop(lines);
        let ended = tokio::time::timeout(Duration::from_secs(10), serving).await;
        assert!(ended.unwrap().unwrap().is_ok());
    }
}
