//! The sidecar's handle on the broker: the live connection (if any), the calls and message
//! fetches in flight, the harness it reported, the tool view, and message arrivals.
//!
//! The connection and the in-flight tables sit under one lock so that "send a call" and "the
//! connection dropped" cannot interleave badly: a call (or a `fetch_messages`) is either
//! registered on a live connection (and then ended by its `result` / `messages` frame or by
//! `detached`), or refused at once with the reason the broker is unreachable. That is what
//! makes "every call ends" hold.
//!
//! **Architecture Invariant:** only `reconnect` attaches or detaches a connection; the MCP side
//! only starts and cancels calls and message fetches, and reports the harness.
//!
//! Message arrivals (`message_arrived`) go out on a broadcast channel that only the channel
//! pusher listens to; with no listener they are dropped here, and stay unread in the broker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use std::collections::{HashMap, VecDeque};

use leo_protocol::input::sanitized_question;
use leo_protocol::ipc::{BrokerFrame, Harness, InputOutcome, Message, Mode, SidecarFrame};
use leo_protocol::sanitize::{Lines, sanitize};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use crate::frames::Answers;
use crate::messages::{Fetch, Fetched, MAX_UNSHOWN};
use crate::outcome::Ending;
use crate::pending::Pending;
use crate::view::View;

/// Why calls fail while no broker is connected.
pub const NOT_RUNNING: &str = "broker not running";
/// What calls in flight get when the connection drops.
pub const CONNECTION_LOST: &str = "broker connection lost";
/// How long a new call waits for a connection that was lost to come back before it is
/// answered `no_client`: long enough for a broker's restart or a cluster's takeover (the
/// lease, then the restore), short enough that a broker that is down stays a quick answer.
pub const RIDE_OUT: Duration = Duration::from_secs(30);

/// Frames queued for the connection's writer.
pub type Outbox = mpsc::UnboundedSender<SidecarFrame>;

/// Arrivals buffered for a slow channel pusher before it starts missing some (they stay unread).
const ARRIVALS: usize = 64;

/// What the app sends the harness while a call is live.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A question for the user; answered with `BrokerLink::answer_input(input, …)`.
    Input {
        input: u64,
        message: String,
        requested_schema: Value,
    },
    /// A log message for the harness (`notifications/message`).
    Log {
        level: leo_protocol::logging::LogLevel,
        logger: Option<String>,
        data: Value,
    },
    /// A completion asked of the harness's model; answered with
    /// `BrokerLink::answer_sample(sample, …)`.
    Sample { sample: u64, params: Value },
}

/// A live call's stream of `CallEvent`s.
pub type CallEvents = mpsc::UnboundedReceiver<CallEvent>;

#[derive(Debug)]
struct State {
    conn: Option<Outbox>,
    pending: Pending<Ending>,
    /// Live calls' event streams, by the call's id.
    events: HashMap<u64, mpsc::UnboundedSender<CallEvent>>,
    fetches: Pending<Fetch>,
    /// Messages the broker acknowledged that no `leo_messages` answer has shown yet, oldest
    /// first (their call was cancelled or gave up waiting).
    unshown: VecDeque<Message>,
    harness: Option<(Harness, Mode)>,
    down_reason: String,
    /// Calls the harness cancelled while no broker was connected: named in the next `hello`
    /// and then cancelled, so the broker ends them instead of waiting for them.
    cancelled_offline: Vec<u64>,
    /// When the last connection was lost, while none replaced it (`back_within`).
    lost_at: Option<tokio::time::Instant>,
    /// When the connection the live one replaced was lost (`rejoining`); `None` for a first
    /// connection.
    back_from: Option<tokio::time::Instant>,
}

/// Shared by the MCP server and the reconnect task.
#[derive(Debug)]
pub struct BrokerLink {
    state: Mutex<State>,
    /// Behind an `Arc`: every call and listing reads it, and a read must not copy every tool.
    view: watch::Sender<Arc<View>>,
    settled: watch::Sender<bool>,
    arrivals: broadcast::Sender<Message>,
    /// Ids for calls and fetches alike, unique within the session.
    next_id: AtomicU64,
    /// Reads of prompts and resources, and their notifications (`offers`).
    pub offers: crate::offers::LinkOffers,
}

impl BrokerLink {
    pub fn new() -> Arc<BrokerLink> {
        Arc::new(BrokerLink {
            state: Mutex::new(State {
                conn: None,
                pending: Pending::default(),
                events: HashMap::new(),
                fetches: Pending::default(),
                unshown: VecDeque::new(),
                harness: None,
                down_reason: NOT_RUNNING.to_owned(),
                cancelled_offline: Vec::new(),
                lost_at: None,
                back_from: None,
            }),
            view: watch::channel(Arc::new(View::default())).0,
            settled: watch::channel(false).0,
            arrivals: broadcast::channel(ARRIVALS).0,
            next_id: AtomicU64::new(1),
            offers: crate::offers::LinkOffers::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves State consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ----- read by the MCP server -----

    /// The current tool view.
    pub fn view(&self) -> Arc<View> {
        self.view.borrow().clone()
    }

    /// A receiver that wakes on every view change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<View>> {
        self.view.subscribe()
    }

    /// Returns once a call can be sent, or would be refused for a reason a short wait does not
    /// end: at once while connected, or when no connection was lost (none was ever made, or
    /// the harness left); else when the connection is back, or `ride_out` after it was lost.
    /// So a call made while the broker restarts, or while a cluster's follower takes over
    /// from a leader that was killed, waits for it instead of failing.
    pub async fn back_within(&self, ride_out: Duration) {
        let mut views = self.view.subscribe();
        loop {
            let until = {
                let state = self.lock();
                match (&state.conn, state.lost_at) {
                    (None, Some(at)) => at + ride_out,
                    _ => return,
                }
            };
            match tokio::time::timeout_at(until, views.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }

    /// Until when a call refused because no app serves its tool is made again (see
    /// `call::run`): while connected again after a loss less than `ride_out` ago. The broker it
    /// now talks to (restarted, or a cluster's new leader) may still be collecting its apps,
    /// which reconnect on their own backoff. `None` otherwise: on a first connection, or long
    /// after the loss, such a refusal is the answer.
    pub fn rejoining(&self, ride_out: Duration) -> Option<tokio::time::Instant> {
        let state = self.lock();
        let until = state.conn.as_ref().and(state.back_from)? + ride_out;
        (tokio::time::Instant::now() < until).then_some(until)
    }

    /// Waits until the first connection attempt has succeeded or failed, at most `max`; a
    /// `tools/list` right after start then sees the broker's answer, not an empty view.
    pub async fn wait_settled(&self, max: Duration) {
        let mut rx = self.settled.subscribe();
        let _ = tokio::time::timeout(max, rx.wait_for(|s| *s)).await;
    }

    /// Sends a call to the broker. `Err` carries the message of an immediate `no_client`.
    pub fn start_call(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<(u64, oneshot::Receiver<Ending>), String> {
        self.start_live_call(tool, arguments)
            .map(|(id, rx, _)| (id, rx))
    }

    /// `start_call`, with the stream of what the app sends the harness meanwhile.
    pub fn start_live_call(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<(u64, oneshot::Receiver<Ending>, CallEvents), String> {
        let mut state = self.lock();
        let Some(conn) = state.conn.clone() else {
            return Err(state.down_reason.clone());
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rx = state.pending.insert(id);
        let frame = SidecarFrame::Call {
            id,
            tool: tool.to_owned(),
            arguments,
            traceparent: crate::trace::current_traceparent(),
        };
        if conn.send(frame).is_err() {
            state.pending.forget(id);
            return Err(CONNECTION_LOST.to_owned());
        }
        let (events_tx, events) = mpsc::unbounded_channel();
        state.events.insert(id, events_tx);
        debug!(call = id, tool, "call sent");
        Ok((id, rx, events))
    }

    /// A new id, unique within the session.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `frame` on the live connection; `Err` says why there is none.
    pub fn send(&self, frame: SidecarFrame) -> Result<(), String> {
        let state = self.lock();
        match &state.conn {
            Some(conn) => conn.send(frame).map_err(|_| CONNECTION_LOST.to_owned()),
            None => Err(state.down_reason.clone()),
        }
    }

    /// Answers the broker's question `input` (the user's answer, or why there is none).
    pub fn answer_input(&self, input: u64, outcome: InputOutcome) {
        if let Some(conn) = &self.lock().conn {
            let _ = conn.send(SidecarFrame::InputAnswer { input, outcome });
        }
    }

    /// Answers the broker's sampling request `sample` (the harness's result, or why none).
    pub fn answer_sample(&self, sample: u64, outcome: leo_protocol::sampling::SampleOutcome) {
        if let Some(conn) = &self.lock().conn {
            let _ = conn.send(SidecarFrame::SampleAnswer { sample, outcome });
        }
    }

    /// Passes a progress or input frame to its call; a question (or sampling request) for a
    /// call that is no longer waiting is answered `cancelled` at once, so the app is not left
    /// waiting.
    fn to_call(&self, id: u64, event: CallEvent) {
        let state = self.lock();
        let delivered = state
            .events
            .get(&id)
            .is_some_and(|tx| tx.send(event.clone()).is_ok());
        drop(state);
        if !delivered && let CallEvent::Sample { sample, .. } = event {
            let gone = crate::sampling::refused("cancelled", "the call is no longer waiting");
            self.answer_sample(sample, gone);
            return;
        }
        if !delivered && let CallEvent::Input { input, .. } = event {
            self.answer_input(
                input,
                InputOutcome::Refused {
                    error: leo_protocol::content::AppError {
                        code: "cancelled".into(),
                        message: "the call is no longer waiting".into(),
                    },
                },
            );
        }
    }

    /// The harness cancelled call `id`: tell the broker (now, or when it is back) and stop
    /// waiting for it.
    pub fn cancel(&self, id: u64) {
        let mut state = self.lock();
        let waiting = state.pending.contains(id);
        state.pending.forget(id);
        state.events.remove(&id);
        match &state.conn {
            Some(conn) => {
                let _ = conn.send(SidecarFrame::Cancel { id });
            }
            None if waiting => state.cancelled_offline.push(id),
            None => {}
        }
        debug!(call = id, "call cancelled by the harness");
    }

    /// Asks the broker for this agent's unread messages (`leo_messages`). `Err` carries the
    /// message of an immediate `no_client`.
    pub fn start_fetch(&self) -> Result<(u64, oneshot::Receiver<Fetch>), String> {
        let mut state = self.lock();
        let Some(conn) = state.conn.clone() else {
            return Err(state.down_reason.clone());
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rx = state.fetches.insert(id);
        if conn.send(SidecarFrame::FetchMessages { id }).is_err() {
            state.fetches.forget(id);
            return Err(CONNECTION_LOST.to_owned());
        }
        debug!(fetch = id, "fetch_messages sent");
        Ok((id, rx))
    }

    /// Stops waiting for fetch `id`; its answer, if it still comes, is kept as unshown.
    pub fn forget_fetch(&self, id: u64) {
        self.lock().fetches.forget(id);
    }

    /// Takes the acknowledged messages no answer has shown yet, oldest first.
    pub fn take_unshown(&self) -> Vec<Message> {
        self.lock().unshown.drain(..).collect()
    }

    /// Keeps acknowledged messages for the next `leo_messages` call.
    pub fn keep_unshown(&self, messages: Vec<Message>) {
        if messages.is_empty() {
            return;
        }
        let mut state = self.lock();
        // They are older than anything kept since (a later fetch took those), so they go first.
        for m in messages.into_iter().rev() {
            state.unshown.push_front(m);
        }
        trim_unshown(&mut state);
    }

    /// A receiver of the messages the broker pushes as they arrive.
    pub fn subscribe_arrivals(&self) -> broadcast::Receiver<Message> {
        self.arrivals.subscribe()
    }

    /// Records the harness seen in `initialize` and tells the broker if connected.
    pub fn set_harness(&self, harness: Harness, mode: Mode) {
        let mut state = self.lock();
        state.harness = Some((harness.clone(), mode));
        if let Some(conn) = &state.conn {
            let _ = conn.send(SidecarFrame::Harness { harness, mode });
        }
    }

    /// The harness and mode to put in `hello`, if known.
    pub fn harness(&self) -> Option<(Harness, Mode)> {
        self.lock().harness.clone()
    }

    /// Why calls fail now, or `None` while connected.
    pub fn down_reason(&self) -> Option<String> {
        let state = self.lock();
        match state.conn {
            Some(_) => None,
            None => Some(state.down_reason.clone()),
        }
    }

    /// How many calls wait for a result.
    pub fn in_flight(&self) -> usize {
        self.lock().pending.len()
    }

    /// The ids to name in `hello`'s `resume`: calls still waiting for a result, and those
    /// cancelled while the broker was away.
    pub fn resume_ids(&self) -> Vec<u64> {
        let state = self.lock();
        let mut ids = state.pending.ids();
        ids.extend(&state.cancelled_offline);
        ids.sort_unstable();
        ids
    }

    // ----- driven by the reconnect task -----

    /// A connection reached `welcome`. `hello_harness` is what the hello carried, so a harness
    /// learned meanwhile is reported at once.
    pub fn attached(&self, conn: Outbox, welcome: &BrokerFrame, hello_harness: Option<&Harness>) {
        let mut state = self.lock();
        if let Some((harness, mode)) = &state.harness
            && hello_harness != Some(harness)
        {
            let _ = conn.send(SidecarFrame::Harness {
                harness: harness.clone(),
                mode: *mode,
            });
        }
        for id in std::mem::take(&mut state.cancelled_offline) {
            let _ = conn.send(SidecarFrame::Cancel { id });
        }
        state.conn = Some(conn);
        state.back_from = state.lost_at.take();
        self.view.send_modify(|v| *v = Arc::new(v.apply(welcome)));
        drop(state);
        // What apps offer may have changed while the broker was away.
        self.offers.notify(crate::offers::OfferEvent::Changed);
        self.mark_settled();
        info!("connected to the broker");
    }

    /// A frame arrived on the live connection.
    pub fn apply(&self, frame: BrokerFrame) {
        match frame {
            BrokerFrame::Messages {
                id,
                messages,
                dropped,
            } => self.fetched(id, Fetched { messages, dropped }),
            BrokerFrame::MessageArrived { message } => {
                debug!(from = %message.from, "message arrived");
                // No subscriber (no channel pusher) is normal: the message stays unread.
                let _ = self.arrivals.send(message);
            }
            BrokerFrame::Tools { .. } => self.view.send_modify(|v| *v = Arc::new(v.apply(&frame))),
            BrokerFrame::Error {
                code,
                message,
                id: Some(id),
            } => self.fetch_refused(id, code, message),
            BrokerFrame::Error {
                code,
                message,
                id: None,
            } => {
                warn!(
                    code,
                    message, "the broker reported an error on this session"
                );
            }
            BrokerFrame::Welcome { .. } => {
                warn!("unexpected second welcome; ignored");
            }
            BrokerFrame::Offers { .. }
            | BrokerFrame::OfferResult { .. }
            | BrokerFrame::OffersChanged
            | BrokerFrame::ResourceUpdated { .. } => self.offers.apply(frame),
            BrokerFrame::Progress { .. }
            | BrokerFrame::Input { .. }
            | BrokerFrame::Log { .. }
            | BrokerFrame::Sample { .. } => self.call_frame(frame),
        }
    }

    /// Passes what an app sends during a call (progress, a question, a log message, a
    /// sampling request) to its call.
    fn call_frame(&self, frame: BrokerFrame) {
        match frame {
            BrokerFrame::Progress {
                id,
                progress,
                total,
                message,
            } => self.to_call(
                id,
                CallEvent::Progress {
                    progress,
                    total,
                    // The broker sanitized it; a second pass here changes nothing.
                    message: message.map(|m| sanitize(&m, Lines::Join).into_owned()),
                },
            ),
            BrokerFrame::Input {
                id,
                input,
                message,
                requested_schema,
            } => {
                // Both revisions' questions (elicitation, input_required) start here.
                let (message, requested_schema) = sanitized_question(&message, requested_schema);
                self.to_call(
                    id,
                    CallEvent::Input {
                        input,
                        message,
                        requested_schema,
                    },
                )
            }
            BrokerFrame::Log {
                id,
                level,
                logger,
                data,
            } => self.to_call(
                id,
                CallEvent::Log {
                    level,
                    logger,
                    data,
                },
            ),
            BrokerFrame::Sample { id, sample, params } => self.to_call(
                id,
                CallEvent::Sample {
                    sample,
                    params: leo_protocol::sampling::sanitized_params(params),
                },
            ),
            _ => {}
        }
    }

    /// The messages a fetch asked for.
    fn fetched(&self, id: u64, fetched: Fetched) {
        debug!(
            fetch = id,
            messages = fetched.messages.len(),
            "messages received"
        );
        let mut state = self.lock();
        if let Err(Ok(fetched)) = state.fetches.settle(id, Ok(fetched)) {
            // Acknowledged by the broker already: keep them for the next call.
            debug!(fetch = id, "messages for a fetch nobody waits for; kept");
            state.unshown.extend(fetched.messages);
            trim_unshown(&mut state);
        }
    }

    /// The broker refused this fetch (its policy, not ours): that call fails alone.
    fn fetch_refused(&self, id: u64, code: String, message: String) {
        if self
            .lock()
            .fetches
            .settle(id, Err((code, message)))
            .is_err()
        {
            debug!(fetch = id, "a refusal for a fetch nobody waits for");
        }
    }

    /// A frame arrived that this sidecar cannot read: the call or fetch it answers, if known,
    /// fails alone with a clear error; the connection and every other call go on.
    pub fn unreadable(&self, answers: Option<Answers>, why: &str) {
        warn!(
            error = why,
            ?answers,
            "a frame from the broker could not be read; the session goes on"
        );
        match answers {
            Some(Answers::Call(id)) => self.settle(
                id,
                leo_protocol::ipc::Outcome::failed(
                    "invalid_result",
                    format!("leo-mcp could not read this call's result ({why})"),
                ),
            ),
            Some(Answers::Fetch(id)) => {
                let failed = Err((
                    "invalid_frame".to_owned(),
                    format!(
                        "leo-mcp could not read the broker's answer ({why}); the messages in it \
                         were acknowledged and are lost"
                    ),
                ));
                if self.lock().fetches.settle(id, failed).is_err() {
                    debug!(
                        fetch = id,
                        "unreadable messages for a fetch nobody waits for"
                    );
                }
            }
            None => {}
        }
    }

    /// Call `id` ended (a result frame, read by either path of `frames`).
    pub fn settle(&self, id: u64, ending: Ending) {
        let mut state = self.lock();
        state.events.remove(&id);
        if state.pending.settle(id, ending).is_err() {
            debug!(call = id, "result for a call nobody waits for");
        }
    }

    /// The connection ended (or never reached `welcome`). Calls in flight keep waiting: the
    /// next `hello` names them in `resume` and the broker (restarted or not) re-attaches
    /// them or answers how they ended. Message fetches fail (the broker acknowledges a
    /// mailbox only when it answers).
    pub fn detached(&self, down_reason: &str) {
        self.drop_connection(down_reason, false);
    }

    /// The harness is gone: the connection closes and every call in flight fails.
    pub fn stopped(&self, down_reason: &str) {
        self.drop_connection(down_reason, true);
    }

    fn drop_connection(&self, down_reason: &str, fail_calls: bool) {
        let mut state = self.lock();
        let was_connected = state.conn.take().is_some();
        let failed = if fail_calls {
            state.events.clear();
            state.cancelled_offline.clear();
            state
                .pending
                .fail_all(|| leo_protocol::ipc::Outcome::failed("no_client", CONNECTION_LOST))
        } else {
            0
        };
        let waiting = state.pending.len();
        state
            .fetches
            .fail_all(|| Err(("no_client".to_owned(), CONNECTION_LOST.to_owned())));
        state.down_reason = down_reason.to_owned();
        state.back_from = None;
        if fail_calls {
            state.lost_at = None;
        } else if was_connected {
            state.lost_at = Some(tokio::time::Instant::now());
        }
        drop(state);
        self.offers.detached();
        if was_connected {
            self.view.send_modify(|v| *v = Arc::new(v.disconnected()));
            if fail_calls {
                // The harness left (a clean exit): nothing went wrong, and harnesses show a
                // server's stderr to their users, so this is no warning.
                info!(failed, waiting, "closed the broker connection");
            } else {
                warn!(waiting, "lost the broker connection");
            }
        }
        self.mark_settled();
    }

    fn mark_settled(&self) {
        self.settled
            .send_if_modified(|s| !std::mem::replace(s, true));
    }
}

/// Keeps at most `MAX_UNSHOWN` unshown messages, the newest.
fn trim_unshown(state: &mut State) {
    let excess = state.unshown.len().saturating_sub(MAX_UNSHOWN);
    if excess > 0 {
        state.unshown.drain(..excess);
        warn!(
            lost = excess,
            "too many acknowledged messages left unshown; dropped the oldest"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leo_protocol::ipc::Message;

    fn welcome() -> BrokerFrame {
        BrokerFrame::Welcome {
            v: 1,
            session: "1".into(),
            revision: 0,
            tools: vec![],
            ever_registered: false,
            denied: vec![],
            otlp_endpoint: None,
            mode: None,
        }
    }

    fn msg(text: &str) -> Message {
        Message {
            text: text.into(),
            from: "scout".into(),
            at: "t".into(),
        }
    }

    fn messages(id: u64, texts: &[&str]) -> BrokerFrame {
        BrokerFrame::Messages {
            id,
            messages: texts.iter().map(|t| msg(t)).collect(),
            dropped: 0,
        }
    }

    fn texts(messages: &[Message]) -> Vec<&str> {
        messages.iter().map(|m| m.text.as_str()).collect()
    }

    #[test]
    fn fetches_are_answered_failed_or_kept_for_later() {
        let link = BrokerLink::new();
        assert_eq!(link.start_fetch().err().as_deref(), Some(NOT_RUNNING));

        let (tx, mut sent) = mpsc::unbounded_channel();
        link.attached(tx, &welcome(), None);
        let (id, mut rx) = link.start_fetch().unwrap();
        assert_eq!(
            sent.try_recv().ok(),
            Some(SidecarFrame::FetchMessages { id })
        );
        link.apply(messages(id, &["a"]));
        let fetched = rx.try_recv().unwrap().unwrap();
        assert_eq!(texts(&fetched.messages), ["a"]);

        // A fetch the harness gave up on: its answer is kept, oldest first, for the next call.
        let (id, _rx) = link.start_fetch().unwrap();
        link.forget_fetch(id);
        link.apply(messages(id, &["b", "c"]));
        link.apply(messages(999, &["d"]));
        link.keep_unshown(vec![msg("a2")]);
        assert_eq!(texts(&link.take_unshown()), ["a2", "b", "c", "d"]);
        assert!(link.take_unshown().is_empty());

        // The connection dropping ends a waiting fetch with no_client's reason.
        let (_, mut rx) = link.start_fetch().unwrap();
        link.detached(NOT_RUNNING);
        assert_eq!(
            rx.try_recv().unwrap(),
            Err(("no_client".to_owned(), CONNECTION_LOST.to_owned()))
        );
    }

    /// A new call waits for a lost connection to come back, up to the bound, and not for one
    /// that was never made or that the harness closed.
    #[tokio::test(start_paused = true)]
    async fn a_new_call_waits_only_for_a_connection_that_was_lost() {
        let link = BrokerLink::new();
        let waited = |link: Arc<BrokerLink>| async move {
            let start = tokio::time::Instant::now();
            link.back_within(RIDE_OUT).await;
            start.elapsed()
        };
        assert_eq!(
            waited(link.clone()).await,
            Duration::ZERO,
            "never connected"
        );

        let (tx, _sent) = mpsc::unbounded_channel();
        link.attached(tx, &welcome(), None);
        assert_eq!(waited(link.clone()).await, Duration::ZERO, "connected");
        link.detached(NOT_RUNNING);
        let waiting = tokio::spawn(waited(link.clone()));
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (tx, _sent) = mpsc::unbounded_channel();
        link.attached(tx, &welcome(), None);
        assert_eq!(waiting.await.unwrap(), Duration::from_secs(3), "back");

        link.detached(NOT_RUNNING);
        assert_eq!(waited(link.clone()).await, RIDE_OUT, "not back in time");
        assert!(link.start_call("echo", Value::Null).is_err());

        let (tx, _sent) = mpsc::unbounded_channel();
        link.attached(tx, &welcome(), None);
        link.stopped(CONNECTION_LOST);
        assert_eq!(waited(link).await, Duration::ZERO, "the harness left");
    }

    /// A refusal of an unserved tool is made again only while connected again after a loss,
    /// within the ride-out counted from the loss; not on a first connection, not once the
    /// ride-out is over, not after the harness left.
    #[tokio::test(start_paused = true)]
    async fn a_refused_call_is_made_again_only_soon_after_a_reconnect() {
        let link = BrokerLink::new();
        let attach = |link: &BrokerLink| {
            let (tx, sent) = mpsc::unbounded_channel();
            link.attached(tx, &welcome(), None);
            sent
        };
        assert_eq!(link.rejoining(RIDE_OUT), None, "never connected");
        let _sent = attach(&link);
        assert_eq!(link.rejoining(RIDE_OUT), None, "a first connection");

        link.detached(NOT_RUNNING);
        let lost = tokio::time::Instant::now();
        assert_eq!(link.rejoining(RIDE_OUT), None, "not connected");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _sent = attach(&link);
        assert_eq!(link.rejoining(RIDE_OUT), Some(lost + RIDE_OUT), "back");
        tokio::time::sleep(RIDE_OUT - Duration::from_secs(3)).await;
        assert_eq!(
            link.rejoining(RIDE_OUT),
            Some(lost + RIDE_OUT),
            "still within"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(link.rejoining(RIDE_OUT), None, "counted from the loss");

        link.detached(NOT_RUNNING);
        let _sent = attach(&link);
        assert!(link.rejoining(RIDE_OUT).is_some(), "back again");
        link.stopped(CONNECTION_LOST);
        assert_eq!(link.rejoining(RIDE_OUT), None, "the harness left");
    }

    #[test]
    fn unshown_messages_are_bounded() {
        let link = BrokerLink::new();
        let many: Vec<Message> = (0..MAX_UNSHOWN + 5).map(|i| msg(&i.to_string())).collect();
        link.keep_unshown(many);
        let kept = link.take_unshown();
        assert_eq!(kept.len(), MAX_UNSHOWN);
        assert_eq!(kept[0].text, "5", "the oldest go first");
    }

    #[test]
    fn arrivals_reach_subscribers_and_are_dropped_without_one() {
        let link = BrokerLink::new();
        link.apply(BrokerFrame::MessageArrived { message: msg("x") });
        let mut rx = link.subscribe_arrivals();
        link.apply(BrokerFrame::MessageArrived { message: msg("y") });
        assert_eq!(rx.try_recv().map(|m| m.text).ok().as_deref(), Some("y"));
    }
}
