//! The sidecar side of the broker: `run/sidecar.sock`, one connection per agent session.
//!
//! A connection is a session: `hello` (with the agent token, or the agent's own token, see
//! `agent_tokens`) opens it, closing it means the agent stopped, and every call still in flight
//! is cancelled with reason `agent_gone`. (A session a cluster's follower pipes here ends so
//! only when the follower says its sidecar left, [`SIDECAR_LEFT`]; one lost otherwise waits
//! for its sidecar to resume, see `session`.) Frames are JSON lines (`leo_protocol::lines`, the
//! one codec every part uses). `hello` is checked here; the open session is a `Session`
//! (`session`), which owns its connection and its calls in flight; tool-set changes reach it
//! through its own `Coalescer` (`coalesce`). Every allow and deny is the core's
//! (`Broker::call`, `Broker::fetch_messages`): this module only moves frames.
//!
//! At most `web.max_sessions` connections (1,024 by default) are open at once; one more
//! is answered with an `error` frame (`internal`, saying so) and closed, so a runaway client
//! cannot exhaust the broker's file descriptors. Sessions that come over the network (the TCP
//! listener's IPC upgrade and `/mcp`) take a [`RemoteSlot`] first, before they are upgraded or
//! created: at most three quarters of them, so that a quarter stays for the unix sockets
//! (`run/sidecar.sock`, and a follower's pipe for its own) whatever the network sends, and at
//! most `web.max_sessions_per_agent` for one agent, so that one token cannot take the others'.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use leo_protocol::ErrorCode;
use leo_protocol::ipc::{BrokerFrame, SidecarFrame};
use leo_protocol::limits::IPC_VERSION;
use leo_protocol::lines::{Line, LineCodec, encode_frame};
use leo_protocol::names::AgentName;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::UnixListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::{Instrument, info_span, warn};

use crate::agent_tokens::AgentKeys;
use crate::config::AgentMode;
use crate::core::Broker;

mod coalesce;
mod session;

pub use coalesce::Coalescer;
pub use session::Session;

/// How long a new connection has to say hello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one tool-set frame a second per session.
pub const COALESCE: Duration = Duration::from_secs(1);
/// Of `max` sessions (`web.max_sessions`), those only the unix sockets may take: a quarter.
fn local_reserved(max: usize) -> usize {
    max / 4
}
/// The last line a follower writes on a session it pipes to the leader when the sidecar's own
/// connection ended (`http::front`): the sidecar left, so its calls end now. A line no sidecar
/// frame can be (not JSON), read only on piped sessions.
pub const SIDECAR_LEFT: &[u8] = b"\x00leo: the sidecar left";

/// Any byte stream a session can run on: the unix socket, an upgraded HTTP connection (plain
/// or TLS), or an in-process pipe. One boxed type, so that a session is one type whatever
/// carries it (a call costs a few syscalls; the virtual call per read is not measurable).
pub trait Stream: AsyncRead + AsyncWrite + Send + 'static {}
impl<S: AsyncRead + AsyncWrite + Send + 'static> Stream for S {}

type BoxStream = std::pin::Pin<Box<dyn Stream>>;
/// A session's writing half, with the one codec.
type Writer = FramedWrite<WriteHalf<BoxStream>, LineCodec>;

/// A session's connection: JSON lines over its stream, read and written with the one codec.
/// Its halves are apart so that a session can read while a write waits on a slow sidecar.
pub struct Conn {
    reader: FramedRead<ReadHalf<BoxStream>, LineCodec>,
    writer: Writer,
}

impl Conn {
    fn new(stream: impl Stream) -> Conn {
        let boxed: BoxStream = Box::pin(stream);
        let (r, w) = tokio::io::split(boxed);
        Conn {
            reader: FramedRead::new(r, LineCodec::default()),
            writer: FramedWrite::new(w, LineCodec::default()),
        }
    }

    /// The longest line read.
    fn max(&self) -> usize {
        self.reader.decoder().max()
    }
}

/// The one way into a sidecar session, whatever carries it: it holds the budget of
/// `web.max_sessions` connections that every transport shares, and runs the hello check.
#[derive(Clone)]
pub struct Door {
    broker: Arc<Broker>,
    keys: AgentKeys,
    slots: Arc<Semaphore>,
    /// `web.max_sessions`.
    max: usize,
    remote: Remote,
}

/// The budget of sessions over the network: `max` in all (what the unix sockets' reserve
/// leaves), `per_agent` for each.
#[derive(Clone)]
struct Remote {
    slots: Arc<Semaphore>,
    max: usize,
    per_agent: usize,
    open: Arc<Mutex<HashMap<AgentName, usize>>>,
}

/// One session over the network of one agent, held while it lives (see the module's doc).
pub struct RemoteSlot {
    _slot: OwnedSemaphorePermit,
    agent: AgentName,
    open: Arc<Mutex<HashMap<AgentName, usize>>>,
}

impl Drop for RemoteSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.agent) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.agent);
            }
        }
    }
}

impl Door {
    /// The door of `broker`'s sessions: at most `web.max_sessions` at once, and at most
    /// `web.max_sessions_per_agent` over the network for one agent.
    pub fn new(broker: Arc<Broker>, keys: AgentKeys, web: &crate::config::Web) -> Door {
        let max = web.max_sessions;
        let remote = max - local_reserved(max);
        Door {
            broker,
            keys,
            slots: Arc::new(Semaphore::new(max)),
            max,
            remote: Remote {
                slots: Arc::new(Semaphore::new(remote)),
                max: remote,
                per_agent: web.max_sessions_per_agent,
                open: Arc::default(),
            },
        }
    }

    /// A place for one more session of `agent` over the network, or the `403` that says which
    /// limit is reached: taken before the session is upgraded or created, held while it lives.
    pub fn remote_slot(&self, agent: &AgentName) -> Result<RemoteSlot, crate::refusal::Refusal> {
        let refuse = |message: String| {
            warn!(%agent, "{message}");
            crate::refusal::Refusal::new(ErrorCode::Forbidden, message)
        };
        let mut open = self.remote.open.lock().unwrap_or_else(|e| e.into_inner());
        let held = open.get(agent).copied().unwrap_or(0);
        if held >= self.remote.per_agent {
            return Err(refuse(format!(
                "agent {agent:?} has {held} sessions open over the network, its limit \
                 (web.max_sessions_per_agent); end one and retry"
            )));
        }
        let Ok(slot) = self.remote.slots.clone().try_acquire_owned() else {
            let (remote, local) = (self.remote.max, self.max - self.remote.max);
            return Err(refuse(format!(
                "the broker has {remote} sessions open over the network, its limit \
                 (the other {local} of web.max_sessions are kept for its unix sockets); retry \
                 later"
            )));
        };
        *open.entry(agent.clone()).or_default() += 1;
        Ok(RemoteSlot {
            _slot: slot,
            agent: agent.clone(),
            open: self.remote.open.clone(),
        })
    }

    /// The agent `token` opens sessions for, as `/mcp` is given them (`AgentKeys::identify`).
    pub fn identify(
        &self,
        token: &str,
        named: Option<&AgentName>,
    ) -> Result<AgentName, crate::refusal::Refusal> {
        self.keys.identify(token, named)
    }

    /// Runs a new connection as a session (after its hello) on the broker's task tracker, or
    /// answers it an `error` frame when `web.max_sessions` are open.
    pub fn admit(&self, stream: impl Stream) {
        self.admit_bound(stream, None, ());
    }

    /// `admit` for a connection whose carrier authenticated it already (the TCP upgrade):
    /// its hello must then name `bound`'s agent with `bound`'s token. `hold` lives as long as
    /// the session (the TCP connection's place in `web.max_connections`).
    pub fn admit_bound(
        &self,
        stream: impl Stream,
        bound: Option<Bound>,
        hold: impl Send + 'static,
    ) {
        self.admit_via(stream, bound, hold, None);
    }

    /// `admit_bound` for a connection a follower of the cluster piped here: the session is
    /// listed as connected through `via`.
    pub fn admit_via(
        &self,
        stream: impl Stream,
        bound: Option<Bound>,
        hold: impl Send + 'static,
        via: Option<String>,
    ) {
        let mut conn = Conn::new(stream);
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            let max = self.max;
            warn!(max, "sidecar connection refused: too many open");
            let message = format!(
                "the broker has {max} sidecar connections open, its limit (web.max_sessions); \
                 close one and retry"
            );
            self.broker.tasks().spawn(async move {
                let _ = send_error(&mut conn, ErrorCode::Internal, message).await;
            });
            return;
        };
        let broker = self.broker.clone();
        let keys = self.keys.clone();
        self.broker.tasks().spawn(async move {
            accept(conn, broker, &keys, bound.as_ref(), via).await;
            drop(slot);
            drop(hold);
        });
    }

    /// Which tokens open which agent's sessions: the hello's rule, which the TCP upgrade
    /// applies to its bearer token too.
    pub fn keys(&self) -> &AgentKeys {
        &self.keys
    }
}

/// Who a connection's carrier authenticated before its first frame: the hello must say the same.
#[derive(Debug, Clone)]
pub struct Bound {
    pub agent: AgentName,
    pub token: String,
}

/// Accepts sidecar connections on the unix socket until shutdown.
pub async fn serve(listener: UnixListener, door: Door) {
    let shutdown = door.broker.shutdown_token();
    while let Some(stream) = crate::accept::next(&shutdown, "sidecar", || listener.accept()).await {
        door.admit(stream);
    }
}

/// Writes an `error` frame that ends the connection.
async fn send_error(
    conn: &mut Conn,
    code: ErrorCode,
    message: impl Into<String>,
) -> std::io::Result<()> {
    conn.writer
        .send(encode_frame(&BrokerFrame::Error {
            code: code.as_str().to_owned(),
            message: message.into(),
            id: None,
        }))
        .await
}

/// A hello that opens a session.
struct Hello {
    agent: AgentName,
    session: String,
    harness: Option<leo_protocol::ipc::Harness>,
    mode: leo_protocol::ipc::Mode,
    resume: Vec<u64>,
    transport: leo_protocol::ipc::Transport,
}

/// Reads and checks `hello`, then runs the session; refuses the connection otherwise.
async fn accept(
    mut conn: Conn,
    broker: Arc<Broker>,
    keys: &AgentKeys,
    bound: Option<&Bound>,
    via: Option<String>,
) {
    let hello = match read_hello(&mut conn, keys, bound).await {
        Ok(Some(hello)) => hello,
        Ok(None) => return,
        Err((code, message)) => {
            let _ = send_error(&mut conn, code, message).await;
            return;
        }
    };
    let id = broker.session_open(
        &hello.agent,
        &hello.session,
        hello.harness,
        hello.mode,
        hello.transport,
    );
    let piped = via.is_some();
    if let Some(via) = via {
        broker.session_via(id, via);
    }
    let span = info_span!("session", agent = %hello.agent, session = %hello.session, conn = id);
    // The agent's own token's mode wins over the config's (see `agent_tokens`).
    let mode = keys
        .mode_of(&hello.agent)
        .map_or_else(|| broker.config().mode_for(&hello.agent), AgentMode::chosen);
    let mut session = Session::new(broker, id, hello.agent, conn, piped, mode);
    session.resume(&hello.session, &hello.resume);
    session.run().instrument(span).await;
}

/// The first frame, checked: the version, the agent's name, its token, the session id.
/// `Ok(None)` when the peer left without a word.
async fn read_hello(
    conn: &mut Conn,
    keys: &AgentKeys,
    bound: Option<&Bound>,
) -> Result<Option<Hello>, (ErrorCode, String)> {
    use ErrorCode::InvalidFrame;
    let first = match tokio::time::timeout(HELLO_TIMEOUT, conn.reader.next()).await {
        Err(_) => return Err((InvalidFrame, "no hello within 10 s".to_owned())),
        Ok(None) => return Ok(None),
        Ok(Some(Err(e))) => return Err((InvalidFrame, e.to_string())),
        Ok(Some(Ok(Line::TooLong { .. }))) => {
            return Err((InvalidFrame, Line::too_long_message(conn.max())));
        }
        Ok(Some(Ok(Line::Frame(line)))) => line,
    };
    let frame = leo_protocol::envelope::parse_json::<SidecarFrame>(&first)
        .map_err(|e| (InvalidFrame, e.message))?;
    let SidecarFrame::Hello {
        v,
        agent,
        session,
        token,
        harness,
        mode,
        resume,
        transport,
    } = frame
    else {
        return Err((
            InvalidFrame,
            "at $.type: the first frame must be hello".to_owned(),
        ));
    };
    if v != IPC_VERSION {
        return Err((
            InvalidFrame,
            format!("at $.v: this broker speaks version {IPC_VERSION}, not {v}"),
        ));
    }
    // Checked before the token: the name picks the agent's own token file.
    let agent =
        AgentName::try_from(agent).map_err(|e| (InvalidFrame, format!("at $.agent: {e}")))?;
    if let Some(bound) = bound {
        check_bound(bound, &agent, &token)?;
    }
    keys.check(&agent, &token)
        .map_err(|refusal| (refusal.code, refusal.message))?;
    leo_protocol::ipc::check_session_id(&session)
        .map_err(|e| (InvalidFrame, format!("at $.session: {e}")))?;
    Ok(Some(Hello {
        agent,
        session,
        harness,
        mode,
        resume,
        transport,
    }))
}

/// The hello of an upgraded connection speaks for the agent the upgrade authenticated, with the
/// same token: one connection, one identity.
fn check_bound(bound: &Bound, agent: &AgentName, token: &str) -> Result<(), (ErrorCode, String)> {
    if *agent != bound.agent {
        return Err((
            ErrorCode::Unauthorized,
            format!(
                "at $.agent: this connection was opened for agent {:?}",
                bound.agent.as_str()
            ),
        ));
    }
    if !crate::agent_tokens::ct_eq(token, &bound.token) {
        return Err((
            ErrorCode::Unauthorized,
            "at $.token: not the token this connection was opened with".to_owned(),
        ));
    }
    Ok(())
}
