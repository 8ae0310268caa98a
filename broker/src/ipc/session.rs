//! One open sidecar session: its connection, its calls in flight, its coalescer.
//!
//! A session is one task. It reads the sidecar's frames, hands calls to the core
//! (`Broker::call`) and keeps each parked call's receiver in `calls` (no task per call); one
//! `select!` writes whatever is ready: a call's result, a refusal, a coalesced `tools` frame, a
//! message arrival. When the sidecar leaves (or the broker shuts down) the core ends the calls
//! still in flight (`session_closed`, exactly once), and their endings are written before the
//! connection closes.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::{Sink, SinkExt, StreamExt};
use leo_protocol::ErrorCode;
use leo_protocol::ipc::{BrokerFrame, Message, RawOutcome, ResultFrame, SidecarFrame};
use leo_protocol::limits::IPC_VERSION;
use leo_protocol::lines::{Line, encode_frame};
use leo_protocol::names::{AgentName, RequestId};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::debug;

use super::{COALESCE, Coalescer, Conn, Writer};
use crate::core::{Broker, Resumed};
use crate::requests::ConnId;

/// How long the endings of the last calls may take to write once the session is over.
const DRAIN: Duration = Duration::from_secs(2);
/// Frames queued for a sidecar that does not read, past which the session stops reading its
/// frames too (so a peer that only writes cannot grow the queue without end).
const MAX_QUEUED: usize = 4096;
/// Frames the core may push to this session (progress, questions) before it drops one.
const OUTBOX: usize = 256;

/// A parked call's receiver, resolving to its ids and outcome.
struct InFlight {
    id: u64,
    request: Option<RequestId>,
    rx: oneshot::Receiver<RawOutcome>,
}

impl Future for InFlight {
    type Output = (u64, Option<RequestId>, Option<RawOutcome>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|outcome| (id, self.request.take(), outcome.ok()))
    }
}

/// What woke the session.
enum Event {
    Read(Option<std::io::Result<Line>>),
    Ended(u64, Option<RequestId>, Option<RawOutcome>),
    Written(std::io::Result<()>),
    Revision(bool),
    Due,
    Arrival(Result<(String, Message), broadcast::error::RecvError>),
    Pushed(Option<Bytes>),
    Committed,
    Shutdown,
}

/// A commit the session waits for before it writes the result frames it covers.
type Commit = Pin<Box<dyn Future<Output = Result<(), crate::refusal::Refusal>> + Send>>;

/// One sidecar connection after its hello.
pub struct Session {
    broker: Arc<Broker>,
    id: ConnId,
    agent: AgentName,
    conn: Conn,
    /// Frames waiting for the socket, oldest first.
    out: VecDeque<Bytes>,
    /// Requests whose result frame is queued but not yet written to the socket: the store
    /// keeps their outcomes until it is, so a broker killed in between sends it on resume.
    unwritten: Vec<RequestId>,
    /// Result frames waiting for their outcome to be committed, with their requests: a frame
    /// written before the commit could tell the harness of a result a killed broker forgets,
    /// and the call would be answered again after the restart.
    held: Vec<(Bytes, Option<RequestId>)>,
    /// The commit under way, and how many of `held` it covers.
    commit: Option<(Commit, usize)>,
    calls: FuturesUnordered<InFlight>,
    /// False once the broker's revision channel closed (at shutdown).
    watching: bool,
    /// False once the arrivals channel closed (at shutdown).
    mail_open: bool,
    revisions: watch::Receiver<u64>,
    arrivals: broadcast::Receiver<(String, Message)>,
    /// Frames the core pushes for a call in flight (`progress`, `input`); see `core/relay.rs`.
    outbox: mpsc::Receiver<Bytes>,
    coalescer: Coalescer,
}

impl Session {
    /// A session for `agent`, opened in the core as `id`.
    pub fn new(broker: Arc<Broker>, id: ConnId, agent: AgentName, conn: Conn) -> Session {
        let mut revisions = broker.watch_revision();
        revisions.mark_unchanged();
        // Taken before the welcome: a change in between then differs and is sent, never lost.
        let offered = broker.offer_fingerprint(&agent);
        let (tx, outbox) = mpsc::channel(OUTBOX);
        broker.attach_outbox(id, tx);
        Session {
            outbox,
            arrivals: broker.watch_arrivals(),
            revisions,
            coalescer: Coalescer::new(COALESCE, offered, Instant::now()),
            calls: FuturesUnordered::new(),
            out: VecDeque::new(),
            unwritten: Vec::new(),
            held: Vec::new(),
            commit: None,
            watching: true,
            mail_open: true,
            broker,
            id,
            agent,
            conn,
        }
    }

    /// Runs the session to its end, then closes it in the core.
    pub async fn run(mut self) {
        if self.welcome().await.is_ok() {
            self.serve().await;
        }
        // Calls still in flight end now (agent_gone); their endings go out before we close.
        self.broker.detach_outbox(self.id);
        self.broker.session_closed(self.id);
        let _ = tokio::time::timeout(DRAIN, self.drain()).await;
    }

    async fn welcome(&mut self) -> std::io::Result<()> {
        // Encoded and dropped at once: a session lives for hours, and holding its copy of
        // every tool definition would cost each session the whole tool set in memory.
        let welcome = {
            let (revision, tools, ever_registered) = self.broker.agent_tools(&self.agent);
            encode_frame(&BrokerFrame::Welcome {
                v: IPC_VERSION,
                session: self.id.to_string(),
                revision,
                tools,
                ever_registered,
                denied: self.broker.config().denied_for(&self.agent),
                otlp_endpoint: self.broker.config().telemetry.otlp_endpoint.clone(),
            })
        };
        self.conn.writer.send(welcome).await
    }

    /// True while frames wait to be written.
    fn writing(&self) -> bool {
        !self.out.is_empty() || !self.conn.writer.write_buffer().is_empty()
    }

    async fn next_event(&mut self) -> Event {
        let shutdown = self.broker.shutdown_token();
        let watching = self.watching && !self.coalescer.is_pending();
        let writing = self.writing();
        let reading = self.out.len() < MAX_QUEUED;
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => Event::Shutdown,
            Some((id, request, outcome)) = self.calls.next(), if !self.calls.is_empty() => {
                Event::Ended(id, request, outcome)
            }
            w = flush(&mut self.conn.writer, &mut self.out), if writing => Event::Written(w),
            line = self.conn.reader.next(), if reading => Event::Read(line),
            r = self.revisions.changed(), if watching => Event::Revision(r.is_ok()),
            () = self.coalescer.wait() => Event::Due,
            a = self.arrivals.recv(), if self.mail_open => Event::Arrival(a),
            p = self.outbox.recv(), if reading => Event::Pushed(p),
            () = committing(&mut self.commit), if self.commit.is_some() => Event::Committed,
        }
    }

    /// The session's loop: until the sidecar leaves, the connection breaks, or shutdown.
    async fn serve(&mut self) {
        loop {
            let line = match self.next_event().await {
                Event::Shutdown | Event::Read(None) | Event::Written(Err(_)) => return,
                Event::Written(Ok(())) => {
                    self.written();
                    None
                }
                Event::Read(Some(Err(e))) => Some(error_frame(ErrorCode::InvalidFrame, e)),
                Event::Read(Some(Ok(Line::TooLong { .. }))) => {
                    let message = Line::too_long_message(self.conn.max());
                    self.out
                        .push_back(error_frame(ErrorCode::InvalidFrame, message));
                    let _ = tokio::time::timeout(DRAIN, self.drain()).await;
                    return;
                }
                Event::Read(Some(Ok(Line::Frame(line)))) => self.on_frame(&line),
                Event::Ended(id, request, outcome) => {
                    self.hold(id, request, outcome);
                    None
                }
                Event::Committed => {
                    self.release();
                    None
                }
                Event::Revision(true) => {
                    self.coalescer.changed();
                    None
                }
                Event::Revision(false) => {
                    // The broker is going away; no more tool-set changes will come.
                    self.watching = false;
                    None
                }
                Event::Due => self.tools_frame(),
                Event::Arrival(a) => self.arrival(a),
                // The core holds the sender until `detach_outbox`; `None` does not come sooner.
                Event::Pushed(p) => p,
            };
            self.out.extend(line);
        }
    }

    /// One frame from the sidecar; what to answer at once, if anything.
    fn on_frame(&mut self, line: &[u8]) -> Option<Bytes> {
        let frame = match leo_protocol::envelope::parse_json::<SidecarFrame>(line) {
            Ok(frame) => frame,
            Err(e) => return Some(error_frame(ErrorCode::InvalidFrame, e.message)),
        };
        match frame {
            SidecarFrame::Call {
                id,
                tool,
                arguments,
                traceparent,
            } => {
                let span = tracing::info_span!("call", call = id, tool = %tool);
                let _entered = span.enter();
                debug!("call received");
                match self
                    .broker
                    .call(self.id, id, &tool, arguments, traceparent.as_deref())
                {
                    Ok((request, rx)) => {
                        self.calls.push(InFlight {
                            id,
                            request: Some(request.into()),
                            rx,
                        });
                        None
                    }
                    Err(refusal) => Some(result_line(
                        crate::metrics::global().rejected_then(
                            crate::metrics::Door::Ipc,
                            refusal.code,
                            id,
                        ),
                        RawOutcome::failed(refusal.code.as_str(), refusal.message),
                    )),
                }
            }
            SidecarFrame::Cancel { id } => {
                self.broker.cancel_call(self.id, id);
                None
            }
            SidecarFrame::FetchMessages { id } => Some(self.fetch(id)),
            SidecarFrame::Harness { harness, mode } => {
                self.broker.session_harness(self.id, harness, mode);
                None
            }
            SidecarFrame::InputAnswer { input, outcome } => {
                self.broker.input_answered(self.id, input, outcome);
                None
            }
            SidecarFrame::Hello { .. } => Some(error_frame(
                ErrorCode::InvalidFrame,
                "at $.type: hello was already received",
            )),
        }
    }

    /// A call ended: its result frame. The store may forget the outcome once the frame is
    /// written (`written`), not before: a broker killed with the frame still queued would
    /// otherwise have neither sent it nor kept it.
    fn ended(
        &mut self,
        id: u64,
        request: Option<RequestId>,
        outcome: Option<RawOutcome>,
    ) -> Option<Bytes> {
        let line = result_line(id, outcome?);
        self.unwritten.extend(request);
        Some(line)
    }

    /// Holds a result frame until its outcome is committed; starts a commit if none runs.
    fn hold(&mut self, id: u64, request: Option<RequestId>, outcome: Option<RawOutcome>) {
        let Some(outcome) = outcome else { return };
        self.held.push((result_line(id, outcome), request));
        if self.commit.is_none() {
            self.start_commit();
        }
    }

    fn start_commit(&mut self) {
        let commit: Commit = Box::pin(self.broker.committed_after_lock());
        self.commit = Some((commit, self.held.len()));
    }

    /// The commit finished: the frames it covers go out; a newer batch gets its own commit.
    fn release(&mut self) {
        let covered = self.commit.take().map_or(self.held.len(), |(_, n)| n);
        for (line, request) in self.held.drain(..covered.min(self.held.len())) {
            self.out.push_back(line);
            self.unwritten.extend(request);
        }
        if !self.held.is_empty() {
            self.start_commit();
        }
    }

    /// Everything queued was written to the socket: the sidecar has those result frames even
    /// if the broker dies now, so the store may forget their outcomes.
    fn written(&mut self) {
        for request in self.unwritten.drain(..) {
            self.broker.delivered(&request);
        }
    }

    /// Re-attaches the calls this sidecar had in flight before it reconnected (`resume` in
    /// its hello): each waits again, or its ending is written at once.
    pub fn resume(&mut self, session: &str, ids: &[u64]) {
        for resumed in self.broker.resume(self.id, &self.agent, session, ids) {
            match resumed {
                Resumed::Waiting {
                    local_id,
                    request,
                    rx,
                } => self.calls.push(InFlight {
                    id: local_id,
                    request: Some(request),
                    rx,
                }),
                Resumed::Ended {
                    local_id,
                    request,
                    outcome,
                } => {
                    let line = self.ended(local_id, request, Some(outcome));
                    self.out.extend(line);
                }
            }
        }
    }

    /// Answers `fetch_messages`: the messages, or the core's refusal naming the fetch.
    fn fetch(&self, id: u64) -> Bytes {
        match self.broker.fetch_messages(&self.agent) {
            Ok((messages, dropped)) => encode_frame(&BrokerFrame::Messages {
                id,
                messages,
                dropped,
            }),
            Err(refusal) => encode_frame(&BrokerFrame::Error {
                code: refusal.code.as_str().to_owned(),
                message: refusal.message,
                id: Some(id),
            }),
        }
    }

    /// The coalesced change is due: the `tools` frame, unless this agent's offer is unchanged.
    fn tools_frame(&mut self) -> Option<Bytes> {
        let now = self.broker.offer_fingerprint(&self.agent);
        self.coalescer
            .fire(Instant::now(), now)
            .then(|| self.broker.tools_line(&self.agent))
    }

    /// A message arrived somewhere: pushed when it is for this agent.
    fn arrival(
        &mut self,
        arrival: Result<(String, Message), broadcast::error::RecvError>,
    ) -> Option<Bytes> {
        match arrival {
            Ok((to, message)) if to == self.agent.as_str() => {
                Some(encode_frame(&BrokerFrame::MessageArrived { message }))
            }
            // A missed push loses nothing: the message stays queued until fetched.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => None,
            Err(broadcast::error::RecvError::Closed) => {
                self.mail_open = false;
                None
            }
        }
    }

    /// Writes what is queued and the endings of the calls still in flight.
    async fn drain(&mut self) {
        if let Some((commit, _)) = self.commit.take() {
            let _ = commit.await;
        }
        self.commit = Some((Box::pin(async { Ok(()) }), self.held.len()));
        self.release();
        loop {
            if flush(&mut self.conn.writer, &mut self.out).await.is_err() {
                return;
            }
            self.written();
            match self.calls.next().await {
                Some((id, request, outcome)) => {
                    let line = self.ended(id, request, outcome);
                    self.out.extend(line);
                }
                None => return,
            }
        }
    }
}

/// Moves the queued frames into the writer and flushes it. Safe to drop at any await: a frame
/// leaves `out` only as it enters the writer's buffer, which the next call goes on flushing.
async fn flush(writer: &mut Writer, out: &mut VecDeque<Bytes>) -> std::io::Result<()> {
    std::future::poll_fn(|cx| {
        while !out.is_empty() {
            std::task::ready!(Pin::new(&mut *writer).poll_ready(cx))?;
            if let Some(line) = out.pop_front() {
                Pin::new(&mut *writer).start_send(line)?;
            }
        }
        Pin::new(&mut *writer).poll_flush(cx)
    })
    .await
}

/// Resolves when the commit under way does (never without one; the select guards on it).
async fn committing(commit: &mut Option<(Commit, usize)>) {
    match commit {
        Some((c, _)) => {
            let _ = c.await;
        }
        None => std::future::pending().await,
    }
}

fn result_line(id: u64, outcome: RawOutcome) -> Bytes {
    debug!(
        call = id,
        ok = matches!(outcome, RawOutcome::Content { .. }),
        "call ended"
    );
    encode_frame(&ResultFrame { id, outcome })
}

fn error_frame(code: ErrorCode, message: impl ToString) -> Bytes {
    encode_frame(&BrokerFrame::Error {
        code: code.as_str().to_owned(),
        message: message.to_string(),
        id: None,
    })
}
