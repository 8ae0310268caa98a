//! One open sidecar session: its connection, its calls in flight, its coalescer.
//!
//! A session is one task. It reads the sidecar's frames, hands calls to the core
//! (`Broker::call`) and keeps each parked call's receiver in `calls` (no task per call); one
//! `select!` writes whatever is ready: a call's result, a refusal, a coalesced `tools` frame, a
//! message arrival. When the sidecar leaves (or the broker shuts down) the core ends the calls
//! still in flight (`session_closed`, exactly once), and their endings are written before the
//! connection closes.
//!
//! A session a cluster's follower pipes here (`piped`) ends that way only when the follower
//! says its sidecar left ([`super::SIDECAR_LEFT`], its last line). A piped connection that
//! ends without it was lost with its follower (killed, its host gone, the network cut), not
//! left by its sidecar, which is reconnecting elsewhere: the session is detached
//! (`session_detached`) and its calls wait for that `resume`. Its result frames may have died
//! in the follower too, so it keeps the last ones it queued ([`Recent`]), bounded, and hands
//! them over for sending again; only the frames the resuming sidecar asks for go out twice.
//! The marker is not a secret: a sidecar that writes it itself only ends its own session, as
//! closing its connection would.
//!
//! A cluster's leader that stops cleanly hands its calls over (`Broker::begin_handover`): its
//! sessions write the frames already committed and close without ending their calls
//! (`End::HandedOver`), which the next leader restores, as after a kill, for their sidecars to
//! resume.
//!
//! A result frame waits for the commit of its outcome (`hold`, `release`: the commit gate), and
//! how that commit went decides what becomes of it (`commit_failed`):
//! - **fenced** (another instance took the database's lease): this instance decides nothing
//!   any more. The frames it holds were never committed, and the new leader owns their calls,
//!   so they are dropped unsent, and the session closes at once without ending its calls or
//!   writing anything more (`End::Deposed`): its sidecar reconnects and resumes them where the
//!   new leader serves, which restored every call this instance committed and answers them.
//! - **unreachable** (a PostgreSQL outage): the outcome stays queued in the store, which writes
//!   it once the database answers again; the frames stay held and the commit is asked again
//!   every [`RETRY`], so a harness is never told of a result the outage may still lose.
//! - **refused** (SQLite's failed commit, PostgreSQL refusing a change): the frames go out all
//!   the same. This broker lives on, and its memory holds the outcome: withheld, the harness
//!   would wait for an answer no later commit gives (nothing more is committed until a
//!   restart). What is lost is only the outcome's survival of a crash, and the log says so.
//!
//! [`RETRY`]: crate::store::postgres::RETRY

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
use leo_protocol::ipc::{BrokerFrame, BrokerLine, Message, RawOutcome, ResultFrame, SidecarFrame};
use leo_protocol::limits::IPC_VERSION;
use leo_protocol::lines::{Line, encode_frame};
use leo_protocol::names::{AgentName, RequestId};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::debug;

use super::{COALESCE, Coalescer, Conn, Writer};
use crate::core::{Broker, Resumed};
use crate::refusal::Refusal;
use crate::requests::ConnId;

/// A result frame's blocks as the broker writes them.
type RawBlocks = Vec<Box<serde_json::value::RawValue>>;

/// How long the endings of the last calls may take to write once the session is over.
const DRAIN: Duration = Duration::from_secs(2);
/// Frames queued for a sidecar that does not read, past which the session stops reading its
/// frames too (so a peer that only writes cannot grow the queue without end).
const MAX_QUEUED: usize = 4096;
/// Frames the core may push to this session (progress, questions) before it drops one.
const OUTBOX: usize = 256;
/// The result frames a piped session keeps for a resend, at most, and their bytes at most.
const RECENT_FRAMES: usize = 256;
const RECENT_BYTES: usize = 4 << 20;

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

/// How a session ended.
enum End {
    /// The sidecar left, said so, or the broker shuts down: its calls end now.
    Closed,
    /// A piped connection was lost without word from its follower: its calls wait.
    Lost,
    /// Another instance took the database's lease: the session closes, ending nothing and
    /// writing nothing more, so its sidecar resumes where the new leader serves.
    Deposed,
    /// This leader stops cleanly and hands its calls over: the session writes what was
    /// committed and closes, ending nothing, so its sidecar resumes where the next leader
    /// serves.
    HandedOver,
}

/// The result frames a piped session queued last, with their requests: what the follower may
/// have lost with it. Oldest dropped first past `RECENT_FRAMES` or `RECENT_BYTES`.
#[derive(Default)]
struct Recent {
    frames: VecDeque<(Bytes, RequestId)>,
    bytes: usize,
}

impl Recent {
    /// Keeps `line`; returns the requests of the frames that fell out of the bound (oldest
    /// first), whose outcomes the store may now forget.
    fn keep(&mut self, line: Bytes, request: RequestId) -> Vec<RequestId> {
        self.bytes += line.len();
        self.frames.push_back((line, request));
        let mut old = Vec::new();
        while self.frames.len() > RECENT_FRAMES || self.bytes > RECENT_BYTES {
            let Some((line, request)) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= line.len();
            old.push(request);
        }
        old
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
    Committed(Result<(), Refusal>),
    Shutdown,
}

/// A commit the session waits for before it writes the result frames it covers.
type Commit = Pin<Box<dyn Future<Output = Result<(), Refusal>> + Send>>;

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
    /// A piped session's result frames queued lately (`None` for any other session).
    recent: Option<Recent>,
    /// The mode the operator chose for this agent (its own token's, else the config's), told
    /// in the `welcome`; `None`: the harness table decides.
    mode: Option<leo_protocol::ipc::Mode>,
}

impl Session {
    /// A session for `agent`, opened in the core as `id`; `piped` when a follower of the
    /// cluster pipes it here.
    pub fn new(
        broker: Arc<Broker>,
        id: ConnId,
        agent: AgentName,
        conn: Conn,
        piped: bool,
        mode: Option<leo_protocol::ipc::Mode>,
    ) -> Session {
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
            recent: piped.then(Recent::default),
            mode,
            broker,
            id,
            agent,
            conn,
        }
    }

    /// Runs the session to its end, then closes it in the core, or detaches it (see the
    /// module's doc).
    pub async fn run(mut self) {
        let end = match self.welcome().await {
            Ok(()) => self.serve().await,
            Err(_) => self.lost(),
        };
        // However it ended, a session of a deposed leader ends as one: the shutdown that
        // follows the deposition may wake it before the failed commit does.
        let end = if self.broker.store().is_deposed() {
            End::Deposed
        } else if matches!(end, End::Closed) && self.broker.is_handing_over() {
            End::HandedOver
        } else {
            end
        };
        self.broker.detach_outbox(self.id);
        match end {
            End::Closed => {
                // Calls still in flight end now (agent_gone); their endings go out first.
                self.broker.session_closed(self.id);
                let _ = tokio::time::timeout(DRAIN, self.drain()).await;
                // The sidecar left: no one will ask for a piped session's frames again.
                for (_, request) in self.recent.take().unwrap_or_default().frames {
                    self.broker.delivered(&request);
                }
            }
            End::Lost => {
                let left = self.left();
                self.broker.session_detached(self.id, left);
            }
            End::HandedOver => {
                // What was decided and committed goes out; the calls stay, for the sidecar
                // to resume where the next leader serves.
                let _ = tokio::time::timeout(DRAIN, self.drain()).await;
                debug!(agent = %self.agent, waiting = self.calls.len(), "this instance hands the database over: the sidecar session closes, its calls wait for it");
            }
            End::Deposed => {
                tracing::warn!(
                    agent = %self.agent,
                    unsent = self.held.len(),
                    "this instance no longer leads the database: the sidecar session closes \
                     unanswered, for its sidecar to resume where the new leader serves"
                );
            }
        }
    }

    /// The end of a connection that broke or reached its end of stream: lost if piped (its
    /// follower would have said that the sidecar left), else the sidecar left.
    fn lost(&self) -> End {
        if self.recent.is_some() {
            End::Lost
        } else {
            End::Closed
        }
    }

    /// What a lost session leaves in the core: its calls' receivers, and the result frames
    /// held for a commit or queued lately, read back into their outcomes.
    fn left(&mut self) -> crate::core::Left {
        let calls = std::mem::take(&mut self.calls)
            .into_iter()
            .filter_map(|c| {
                Some(crate::core::Orphan {
                    local_id: c.id,
                    request: c.request?,
                    rx: c.rx,
                })
            })
            .collect();
        let recent = self.recent.take().unwrap_or_default().frames;
        let held = self.held.drain(..).filter_map(|(l, r)| Some((l, r?)));
        let resend = recent.into_iter().chain(held).filter_map(read_back);
        crate::core::Left {
            calls,
            resend: resend.collect(),
        }
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
                mode: self.mode,
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
            c = committing(&mut self.commit), if self.commit.is_some() => Event::Committed(c),
        }
    }

    /// The session's loop: until the sidecar leaves, the connection breaks, or shutdown.
    async fn serve(&mut self) -> End {
        loop {
            let line = match self.next_event().await {
                Event::Shutdown => return End::Closed,
                Event::Read(None) | Event::Written(Err(_)) => return self.lost(),
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
                    return End::Closed;
                }
                Event::Read(Some(Ok(Line::Frame(line))))
                    if self.recent.is_some() && line == super::SIDECAR_LEFT =>
                {
                    return End::Closed;
                }
                Event::Read(Some(Ok(Line::Frame(line)))) => self.on_frame(&line),
                Event::Ended(id, request, outcome) => {
                    self.hold(id, request, outcome);
                    None
                }
                Event::Committed(Ok(())) => {
                    self.release();
                    None
                }
                Event::Committed(Err(refusal)) => {
                    if let Some(end) = self.commit_failed(refusal) {
                        return end;
                    }
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
            SidecarFrame::SampleAnswer { sample, outcome } => {
                self.broker.sample_answered(self.id, sample, outcome);
                None
            }
            SidecarFrame::ListOffers { id } => {
                let list = self.broker.offers_for(&self.agent);
                Some(encode_frame(&BrokerFrame::Offers {
                    id,
                    prompts: list.prompts,
                    resources: list.resources,
                    resource_templates: list.resource_templates,
                }))
            }
            SidecarFrame::Offer { id, kind, params } => {
                self.broker
                    .start_read(self.id, &self.agent, id, kind, params);
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
    fn ended(&mut self, id: u64, request: Option<RequestId>, outcome: Option<RawOutcome>) {
        if let Some(outcome) = outcome {
            self.queue_result(result_line(id, outcome), request);
        }
    }

    /// Queues a result frame for the socket; a piped session also keeps it for a resend, and
    /// lets the store forget the outcomes of the frames that fall out of what it keeps.
    fn queue_result(&mut self, line: Bytes, request: Option<RequestId>) {
        if let (Some(recent), Some(request)) = (&mut self.recent, &request) {
            for old in recent.keep(line.clone(), request.clone()) {
                // One not written yet stays in the store (until its rows are trimmed): a
                // broker killed before the write sends it on resume.
                if !self.unwritten.contains(&old) {
                    self.broker.delivered(&old);
                }
            }
        }
        self.out.push_back(line);
        self.unwritten.extend(request);
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

    /// The commit the held frames wait for failed (the module's doc says why each way):
    /// deposed, the session ends unanswered; unreachable, the same frames wait for the next
    /// commit; refused, they go out all the same.
    fn commit_failed(&mut self, refusal: Refusal) -> Option<End> {
        if self.broker.store().is_deposed() {
            return Some(End::Deposed);
        }
        if refusal.code == ErrorCode::StoreUnavailable {
            let (_, covered) = self.commit.take()?;
            let broker = self.broker.clone();
            let retry: Commit = Box::pin(async move {
                tokio::time::sleep(crate::store::postgres::RETRY).await;
                broker.committed_after_lock().await
            });
            self.commit = Some((retry, covered));
            return None;
        }
        tracing::warn!(
            agent = %self.agent,
            error = %refusal.message,
            "result frames are sent although their commit failed: a crash would forget them"
        );
        self.release();
        None
    }

    /// The commit finished: the frames it covers go out; a newer batch gets its own commit.
    fn release(&mut self) {
        let covered = self.commit.take().map_or(self.held.len(), |(_, n)| n);
        // Taken out and put back (with what the commit did not cover): no allocation.
        let mut held = std::mem::take(&mut self.held);
        for (line, request) in held.drain(..covered.min(held.len())) {
            self.queue_result(line, request);
        }
        self.held = held;
        if !self.held.is_empty() {
            self.start_commit();
        }
    }

    /// Everything queued was written to the socket: the sidecar has those result frames even
    /// if the broker dies now, so the store may forget their outcomes. Not so for a piped
    /// session: a frame written to its follower may die there, and the leader with it before
    /// the sidecar comes back, so its outcome stays in the store while the frame is in
    /// `recent` (`queue_result` lets it go), for a later leader to send again.
    fn written(&mut self) {
        if self.recent.is_some() {
            self.unwritten.clear();
            return;
        }
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
                } => self.ended(local_id, request, Some(outcome)),
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
            // A failed commit's frames go out at the end too; a deposed leader writes nothing.
            if commit.await.is_err() && self.broker.store().is_deposed() {
                return;
            }
        }
        self.commit = Some((Box::pin(async { Ok(()) }), self.held.len()));
        self.release();
        loop {
            if self.broker.store().is_deposed()
                || flush(&mut self.conn.writer, &mut self.out).await.is_err()
            {
                return;
            }
            self.written();
            match self.calls.next().await {
                Some((id, request, outcome)) => self.ended(id, request, outcome),
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

/// Resolves when the commit under way does, with how it went (never without one; the select
/// guards on it).
async fn committing(commit: &mut Option<(Commit, usize)>) -> Result<(), Refusal> {
    match commit {
        Some((c, _)) => c.await,
        None => std::future::pending().await,
    }
}

/// A result frame this session queued, read back into its call's local id, its request and
/// its outcome's JSON, as the core keeps an outcome to send again.
fn read_back((line, request): (Bytes, RequestId)) -> Option<(u64, RequestId, String)> {
    let BrokerLine::Result(frame) = BrokerLine::<RawBlocks>::parse(&line).ok()? else {
        return None;
    };
    let outcome = serde_json::to_string(&frame.outcome).ok()?;
    Some((frame.id, request, outcome))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn content(text: &str) -> RawOutcome {
        let block = format!(r#"{{"type":"text","text":"{text}"}}"#);
        RawOutcome::Content {
            content: vec![serde_json::value::RawValue::from_string(block).unwrap()],
            structured_content: None,
        }
    }

    #[test]
    fn a_queued_result_frame_reads_back_into_the_outcome_it_carries() {
        let line = result_line(7, content("kept"));
        let (id, request, outcome) = read_back((line, "r_1".into())).unwrap();
        assert_eq!((id, request.as_str()), (7, "r_1"));
        assert_eq!(
            outcome, r#"{"content":[{"type":"text","text":"kept"}]}"#,
            "the blocks as the app sent them"
        );
        let failed = result_line(8, RawOutcome::failed("timeout", "late"));
        let (_, _, outcome) = read_back((failed, "r_2".into())).unwrap();
        assert_eq!(outcome, r#"{"error":{"code":"timeout","message":"late"}}"#);
        assert!(read_back((Bytes::from_static(b"{\"type\":\"tools\"}"), "r".into())).is_none());
    }

    #[test]
    fn a_piped_session_keeps_its_newest_result_frames_within_bounds() {
        let mut recent = Recent::default();
        let mut let_go = Vec::new();
        for n in 0..RECENT_FRAMES + 10 {
            let_go
                .extend(recent.keep(result_line(n as u64, content("x")), format!("r_{n}").into()));
        }
        assert_eq!(recent.frames.len(), RECENT_FRAMES);
        let want: Vec<RequestId> = (0..10).map(|n| format!("r_{n}").into()).collect();
        assert_eq!(let_go, want, "what falls out is what the store may forget");
        assert_eq!(
            recent.frames[0].1.as_str(),
            "r_10",
            "the oldest dropped first"
        );
        let big = Bytes::from(vec![b'x'; RECENT_BYTES / 2 + 1]);
        recent.keep(big.clone(), "r_big1".into());
        let let_go = recent.keep(big, "r_big2".into());
        assert_eq!(recent.frames.len(), 1, "past the bytes, only the newest");
        assert_eq!(let_go.last().map(RequestId::as_str), Some("r_big1"));
        assert_eq!(recent.bytes, RECENT_BYTES / 2 + 1);
    }
}
