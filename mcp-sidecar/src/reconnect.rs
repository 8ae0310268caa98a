//! The task that keeps this session connected to the broker.
//!
//! It connects to `run/sidecar.sock`, says `hello` with the agent token, waits for `welcome`,
//! then feeds every broker frame to the `BrokerLink` until the connection ends. Then it waits
//! (capped backoff) and starts over. A broker that is down, restarting or refusing the session
//! is therefore never an error the harness sees, only calls answered with `no_client`.
//!
//! When the harness closes stdin (`stdin_closed`), the task closes the connection at once and
//! ends: the broker then ends the session's calls as `agent_gone` (see `run`).

use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ipc::{BrokerFrame, Harness, SidecarFrame};
use leo_protocol::limits::IPC_VERSION;
use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::cli::Settings;
use crate::error::{Result, SidecarError};
use crate::frames::{Incoming, read_frame, read_incoming, write_frame};
use crate::link::{BrokerLink, NOT_RUNNING};
use crate::mode;

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
                link.detached(HARNESS_GONE);
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
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
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
        let mut line = Vec::new();
        let result = loop {
            tokio::select! {
                frame = read_incoming(&mut reader, &mut line) => match frame {
                    Ok(Some(Incoming::Result { id, ending })) => link.settle(id, ending),
                    Ok(Some(Incoming::Frame(frame))) => link.apply(frame),
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
    let token = settings.home.read_agent_token()?;
    let stream = match UnixStream::connect(settings.home.socket()).await {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(SidecarError::NotRunning);
        }
        Err(source) => {
            return Err(SidecarError::Ipc {
                context: "connect",
                source,
            });
        }
    };
    let (r, mut writer) = stream.into_split();
    // Results can be large (an image is hundreds of KiB): read the socket in large chunks.
    let mut reader = BufReader::with_capacity(64 * 1024, r);
    let known = link.harness();
    let hello_harness: Option<Harness> = known.as_ref().map(|(h, _)| h.clone());
    let mode = known
        .as_ref()
        .map(|(_, m)| *m)
        .unwrap_or_else(|| mode::provisional(settings.mode));
    let hello = SidecarFrame::Hello {
        v: IPC_VERSION,
        agent: settings.agent.clone(),
        session: session.to_owned(),
        token,
        harness: hello_harness.clone(),
        mode,
    };
    write_frame(&mut writer, &hello).await?;
    let first = tokio::time::timeout(WELCOME_TIMEOUT, read_frame(&mut reader))
        .await
        .map_err(|_| SidecarError::BadFrame {
            message: format!("no welcome within {WELCOME_TIMEOUT:?}"),
        })??;
    match first {
        Some(welcome @ BrokerFrame::Welcome { .. }) => {
            let (tx, rx) = mpsc::unbounded_channel();
            link.attached(tx, &welcome, hello_harness.as_ref());
            Ok(Connection {
                reader,
                writer,
                outbox: rx,
            })
        }
        Some(BrokerFrame::Error { code, message }) => Err(SidecarError::Refused { code, message }),
        Some(_) => Err(SidecarError::BadFrame {
            message: "the first frame must be welcome".into(),
        }),
        None => Err(SidecarError::NotRunning),
    }
}

/// `error: cause: cause`, for one log line.
fn error_chain(e: &SidecarError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
