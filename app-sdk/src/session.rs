//! The connection loop: open the event stream, register every group, recover what waits, serve
//! events until the stream ends, and start over after a jittered delay.
//!
//! Order matters. The stream is opened first (its `hello` carries the `client_id` every other
//! route wants), with `Last-Event-ID` so that a short outage replays what it missed. Then every
//! group is registered again, because the broker withdrew them when the old stream closed. Then
//! `GET …/requests?pending=1` lists the calls that still wait: any unclaimed one for our tools
//! that this app has not seen (published before we subscribed, or while we were away and
//! another client of the same group kept the tool alive, or older than the broker's replay
//! ring) is served like a fresh request, and one listed as claimed by this very client (the
//! answer to its claim was lost in a broker restart) is run without claiming again. Requests are
//! offered to `Calls` once, however many of these paths bring them.
//!
//! The stream reopens with the resume key of the last `hello`, so a restarted broker knows the
//! app as the same client with its claims: handlers running through the outage go on and post
//! their replies when the broker is back. Only when the app comes back as another client (its
//! key expired) are they cancelled.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use leo_protocol::ErrorCode;
use leo_protocol::events::{CancelledEvent, Hello, kind};
use leo_protocol::names::ClientId;
use leo_protocol::offers::{OFFER_EVENT, OfferRequest};
use leo_protocol::requests::{PendingRequest, Request, RequestState};
use leo_protocol::tool::RegisterBody;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::app::{Group, Settings, Status};
use crate::calls::Calls;
use crate::error::{Error, Result};
use crate::transport::Client;
use crate::worker::{Finished, Link, Start, work};
use leo_protocol::backoff::Backoff;
use leo_protocol::chain::error_chain;
use leo_protocol::sse::{Frame, Parser};

/// The broker sends a keep-alive comment every 15 s; a stream silent for this long is dead.
const STREAM_IDLE: Duration = Duration::from_secs(45);
/// How long the broker has to send `hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Added to the cancel grace for the replies still posted at shutdown.
const SHUTDOWN_POST: Duration = Duration::from_secs(5);
/// Bound on withdrawing the groups at shutdown; the stream closes after it regardless.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs sessions until `shutdown` or a fatal error.
pub async fn serve(
    settings: Arc<Settings>,
    status: &watch::Sender<Status>,
    shutdown: CancellationToken,
) -> Result<()> {
    let mut backoff = Backoff::new(settings.backoff.0, settings.backoff.1).jittered();
    let mut calls = Calls::new(settings.max_concurrent);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut last_event_id = None;
    // The key from the last stream's hello: the next stream is the same client again, with
    // its claims, after a dropped stream or a broker restart.
    let mut resume: Option<String> = None;
    let mut last_error = String::new();
    let mut sessions = 0u64;
    let mut client: Option<ClientId> = None;
    loop {
        status.send_replace(Status::Connecting);
        let opened = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            opened = open(&settings, last_event_id, &mut resume) => opened,
        };
        let error = match opened {
            Ok(mut session) => {
                resume = session.resume.take();
                if client
                    .replace(session.link.client_id.clone())
                    .is_some_and(|old| old != session.link.client_id)
                {
                    // Back as another client: the old one's claims are not ours any more.
                    calls.claims_lost();
                }
                backoff.reset();
                last_error.clear();
                connected(
                    &settings,
                    status,
                    &mut session,
                    &mut last_event_id,
                    sessions,
                );
                sessions += 1;
                let mut loop_state = Loop {
                    settings: &settings,
                    calls: &mut calls,
                    done_tx: &done_tx,
                    done_rx: &mut done_rx,
                    last_event_id: &mut last_event_id,
                };
                match loop_state.run(&mut session, &shutdown).await {
                    None => return Ok(()),
                    Some(error) => {
                        calls.session_lost();
                        error
                    }
                }
            }
            Err(e) if e.is_fatal() => return Err(e),
            Err(e) => e,
        };
        waiting(status, &error, &mut last_error);
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

/// Opens a session with the resume key if there is one. A key the broker no longer holds
/// (`ErrorCode::RESUME_REFUSED` answering an open that carried it) is dropped and the stream
/// opened again at once without it, as a new client; any refusal of an open without a key is
/// read like every other (`Error::is_fatal`), so a wrong setting is never taken for an expired
/// key.
async fn open(
    settings: &Settings,
    last_event_id: Option<u64>,
    resume: &mut Option<String>,
) -> Result<Session> {
    if let Some(key) = resume.as_deref() {
        match Session::open(settings, last_event_id, Some(key)).await {
            Err(Error::Refused { code, message }) if code == ErrorCode::RESUME_REFUSED => {
                info!(%message, "the broker refused the resume key; connecting as a new client");
                *resume = None;
            }
            opened => return opened,
        }
    }
    Session::open(settings, last_event_id, None).await
}

/// Bookkeeping for a stream just opened: the replay position, the log line, the status.
fn connected(
    settings: &Settings,
    status: &watch::Sender<Status>,
    session: &mut Session,
    last_event_id: &mut Option<u64>,
    sessions: u64,
) {
    if last_event_id.is_some_and(|last| last > session.hello_seq) {
        // A restarted broker counts from zero again.
        *last_event_id = Some(session.hello_seq);
    }
    let client_id = &session.link.client_id;
    if sessions == 0 {
        debug!(%client_id, endpoint = %settings.endpoint, "serving");
    } else {
        info!(%client_id, endpoint = %settings.endpoint, "reconnected; serving");
    }
    status.send_replace(Status::Serving {
        client_id: session.link.client_id.to_string(),
    });
}

/// Says why the app is not connected: a warning when the reason changes, else a debug line.
fn waiting(status: &watch::Sender<Status>, error: &Error, last_error: &mut String) {
    let text = error_chain(error);
    if text != *last_error {
        warn!(error = %text, "not connected to the broker; retrying");
        last_error.clone_from(&text);
    } else {
        debug!(error = %text, "still not connected");
    }
    status.send_replace(Status::Waiting { error: text });
}

/// One connected stream.
struct Session {
    link: Arc<Link>,
    events: Events,
    hello_seq: u64,
    /// The resume key of this stream.
    resume: Option<String>,
    /// Requests the pending list holds for us, served once the loop starts.
    recovered: Vec<Request>,
    /// Requests the pending list says this client claimed, to run without claiming.
    ours: Vec<Request>,
}

impl Session {
    async fn open(
        settings: &Settings,
        last_event_id: Option<u64>,
        resume: Option<&str>,
    ) -> Result<Session> {
        let token = settings.token.read()?;
        let client = Arc::new(Client::with_tls(
            settings.endpoint.clone(),
            &token,
            settings.tls.clone(),
        )?);
        let mut events = Events::new(
            client
                .open_events(settings.name.as_deref(), last_event_id, resume)
                .await?,
        );
        let hello = match tokio::time::timeout(HELLO_TIMEOUT, events.next()).await {
            Ok(Ok(Some(frame))) if frame.event == kind::HELLO => parse::<Hello>(&frame, "hello")?,
            Ok(Ok(_)) => {
                return Err(Error::Protocol {
                    what: "stream",
                    message: "the first event is not hello".into(),
                });
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(Error::Timeout(HELLO_TIMEOUT)),
        };
        let link = Arc::new(Link::new(client.clone(), hello.client_id.clone())?);
        for group in &settings.groups {
            register(&client, &hello.client_id, group).await?;
        }
        let (ours, recovered) = waiting_for(&client, settings, &hello.client_id).await?;
        settings.notifier.serving(&link);
        if !recovered.is_empty() {
            info!(
                count = recovered.len(),
                "serving requests that waited for us"
            );
        }
        Ok(Session {
            link,
            events,
            hello_seq: hello.seq,
            resume: hello.resume,
            recovered,
            ours,
        })
    }
}

/// What the pending list says waits for this app: the calls claimed by `client_id` (the answer
/// to its claim was lost: they run without claiming again) and the parked calls of its tools.
/// Read after every reconnect, and again when a claim got no definite answer (the store was
/// away, say) while the stream stayed up.
async fn waiting_for(
    client: &Client,
    settings: &Settings,
    client_id: &ClientId,
) -> Result<(Vec<Request>, Vec<Request>)> {
    let pending: Vec<PendingRequest> = client
        .get("/api/v1/client-tools/requests?pending=1")
        .await?
        .data()?;
    let (ours, parked): (Vec<_>, Vec<_>) = pending
        .into_iter()
        .filter(|p| serves(settings, &p.group, &p.tool))
        .filter(|p| {
            p.state == RequestState::Parked || p.claimed_by.as_deref() == Some(client_id.as_str())
        })
        .partition(|p| p.state == RequestState::Claimed);
    let requests = |list: Vec<PendingRequest>| list.into_iter().map(|p| p.request).collect();
    Ok((requests(ours), requests(parked)))
}

/// Registers one group (`registration_refused` says which refusals are fatal).
async fn register(client: &Client, client_id: &ClientId, group: &Group) -> Result<()> {
    let body = RegisterBody {
        client_id: client_id.clone(),
        group: group.name.clone(),
        tools: group.tools.clone(),
        agents: group.agents.clone(),
        prompts: group.prompts.clone(),
        resources: group.resources.clone(),
        resource_templates: group.templates.clone(),
    };
    let group = group.name.as_str();
    match post_group(client, &body).await {
        Ok(()) => {
            debug!(group, "registered");
            Ok(())
        }
        Err(e) => Err(registration_refused(group, e)),
    }
}

/// Posts one group's registration (with no tools: its withdrawal); the broker's refusal is
/// `Err`.
async fn post_group(client: &Client, body: &RegisterBody) -> Result<()> {
    let body = serde_json::to_vec(body).map_err(|e| Error::Config(e.to_string()))?;
    let answer = client.post_json("/api/v1/client-tools", body).await?;
    answer.data::<serde_json::Value>().map(drop)
}

/// What a refused registration of `group` is to the app: a refusal of the shared table's
/// `REGISTER_AGAIN` (the stream closed since `hello`, the store is away) stays a refusal, which
/// the loop retries on a new stream; any other is the app's own (`Error::Registration`, fatal).
fn registration_refused(group: &str, e: Error) -> Error {
    match e {
        Error::Refused { code, message } if !code.registers_again() => Error::Registration {
            group: group.to_owned(),
            code,
            message,
        },
        e => e,
    }
}

/// At a deliberate stop, once the handlers are done: withdraws every group (registers it with
/// no tools), so the broker ends the calls still parked for them at once (`tool_withdrawn`)
/// instead of keeping them for the resume grace, as it does for a stream that merely dropped.
/// Best effort, bounded by `WITHDRAW_TIMEOUT`: a failure is logged and the stream closes anyway.
async fn withdraw(link: &Link, groups: &[Group]) {
    let all = async {
        for group in groups {
            let body = RegisterBody {
                client_id: link.client_id.clone(),
                group: group.name.clone(),
                tools: Vec::new(),
                agents: None,
                prompts: Vec::new(),
                resources: Vec::new(),
                resource_templates: Vec::new(),
            };
            match post_group(&link.client, &body).await {
                Ok(()) => debug!(group = %group.name, "withdrawn"),
                // The broker answered (a refusal, or an answer it could not read): go on.
                Err(e @ (Error::Refused { .. } | Error::Protocol { .. })) => {
                    debug!(group = %group.name, error = %e, "withdrawal refused");
                }
                Err(e) => return debug!(group = %group.name, error = %e, "cannot withdraw"),
            }
        }
    };
    if tokio::time::timeout(WITHDRAW_TIMEOUT, all).await.is_err() {
        debug!("withdrawing the groups took too long; closing the stream");
    }
}

fn serves(settings: &Settings, group: &str, tool: &str) -> bool {
    settings
        .handlers
        .get(tool)
        .is_some_and(|(served, _, _)| served == group)
}

fn parse<T: DeserializeOwned>(frame: &Frame, what: &'static str) -> Result<T> {
    serde_json::from_slice(&frame.data).map_err(|e| Error::Protocol {
        what,
        message: e.to_string(),
    })
}

/// The event stream's body, read frame by frame.
pub(crate) struct Events {
    body: Incoming,
    parser: Parser,
}

impl Events {
    pub(crate) fn new(body: Incoming) -> Events {
        Events {
            body,
            parser: Parser::default(),
        }
    }

    /// The next frame; `None` when the broker closed the stream. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>> {
        loop {
            match self.parser.next_frame() {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(_) => {
                    return Err(Error::Protocol {
                        what: "stream",
                        message: "an event is larger than 8 MiB".into(),
                    });
                }
            }
            match tokio::time::timeout(STREAM_IDLE, self.body.frame()).await {
                Err(_) => return Err(Error::Timeout(STREAM_IDLE)),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(Error::Http(e.into())),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.push(&data);
                    }
                }
            }
        }
    }
}

/// When to read the pending list again (`Loop::recheck`): armed by a claim without a definite
/// answer, due after a short backoff, again after a failed read, reset by a good one.
struct Recheck {
    at: Option<tokio::time::Instant>,
    backoff: Backoff,
}

impl Recheck {
    fn new(settings: &Settings) -> Recheck {
        Recheck {
            at: None,
            backoff: Backoff::new(settings.backoff.0, settings.backoff.1).jittered(),
        }
    }

    fn arm(&mut self) {
        if self.at.is_none() {
            self.retry();
        }
    }

    fn retry(&mut self) {
        self.at = Some(tokio::time::Instant::now() + self.backoff.next_delay());
    }

    fn done(&mut self) {
        self.at = None;
        self.backoff.reset();
    }

    /// Resolves when the list is due; never while unarmed.
    async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// The state one session's loop works on; most of it outlives the session.
struct Loop<'a> {
    settings: &'a Arc<Settings>,
    calls: &'a mut Calls,
    done_tx: &'a mpsc::UnboundedSender<Finished>,
    done_rx: &'a mut mpsc::UnboundedReceiver<Finished>,
    last_event_id: &'a mut Option<u64>,
}

impl Loop<'_> {
    /// Serves the session; `None` after a shutdown, else why the session ended.
    async fn run(&mut self, session: &mut Session, shutdown: &CancellationToken) -> Option<Error> {
        // What ended during the outage first, so that a forgotten claim can be offered again.
        while let Ok(done) = self.done_rx.try_recv() {
            self.finished(done);
        }
        for request in std::mem::take(&mut session.ours) {
            self.calls.offer_ours(request);
        }
        for request in std::mem::take(&mut session.recovered) {
            self.calls.offer(request);
        }
        self.start(&session.link);
        let mut recheck = Recheck::new(self.settings);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    self.drain().await;
                    withdraw(&session.link, &self.settings.groups).await;
                    return None;
                }
                Some(done) = self.done_rx.recv() => {
                    if self.finished(done) {
                        recheck.arm();
                    }
                }
                () = recheck.due() => self.recheck(&session.link, &mut recheck).await,
                frame = session.events.next() => match frame {
                    Ok(Some(frame)) => self.event(frame, &session.link),
                    Ok(None) => return Some(Error::StreamEnded),
                    Err(e) => return Some(e),
                },
            }
            self.start(&session.link);
        }
    }

    /// Books a finished call; true when its claim got no definite answer (forgotten), so
    /// that the pending list should be read again.
    fn finished(&mut self, done: Finished) -> bool {
        if done.forget {
            self.calls.forget(&done.id);
        }
        self.calls.finished(&done.id);
        done.forget
    }

    /// Reads the pending list again after a claim without a definite answer, with the stream
    /// still up: a call still parked is offered again, one the broker recorded as claimed by
    /// this client (its claim was decided but not acknowledged) runs without claiming again.
    async fn recheck(&mut self, link: &Link, recheck: &mut Recheck) {
        match waiting_for(&link.client, self.settings, &link.client_id).await {
            Ok((ours, parked)) => {
                recheck.done();
                for request in ours {
                    self.calls.offer_ours(request);
                }
                for request in parked {
                    self.calls.offer(request);
                }
            }
            Err(e) => {
                debug!(error = %e, "cannot read the pending list; trying again");
                recheck.retry();
            }
        }
    }

    fn event(&mut self, frame: Frame, link: &Arc<Link>) {
        if let Some(id) = frame.id {
            *self.last_event_id = Some(id);
        }
        match frame.event.as_str() {
            kind::REQUEST => match parse::<Request>(&frame, "client_tool.request") {
                Ok(request) if serves(self.settings, &request.group, &request.tool) => {
                    self.calls.offer(request);
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "skipping an event"),
            },
            OFFER_EVENT => match parse::<OfferRequest>(&frame, OFFER_EVENT) {
                Ok(request) => crate::offers::serve(&self.settings.offered, link, request),
                Err(e) => warn!(error = %e, "skipping an event"),
            },
            kind::CANCELLED => match parse::<CancelledEvent>(&frame, "client_tool.cancelled") {
                Ok(cancelled) => {
                    debug!(request = %cancelled.id, reason = cancelled.reason.as_str(), "cancelled");
                    self.calls.cancelled(&cancelled.id);
                }
                Err(e) => warn!(error = %e, "skipping an event"),
            },
            _ => {}
        }
    }

    /// Starts every waiting request a free slot allows.
    fn start(&mut self, link: &Arc<Link>) {
        while let Some((request, control, claimed)) = self.calls.next_to_start() {
            let Some((_, handler, at_once)) = self.settings.handlers.get(&request.tool) else {
                self.calls.finished(&request.id);
                continue;
            };
            let span = tracing::info_span!("call", request = %request.id, tool = %request.tool);
            tokio::spawn(
                work(
                    link.clone(),
                    request,
                    control,
                    handler.clone(),
                    if claimed {
                        Start::Claimed
                    } else if *at_once {
                        Start::AtOnce
                    } else {
                        Start::Claim
                    },
                    self.settings.cancel_grace,
                    self.done_tx.clone(),
                )
                .instrument(span),
            );
        }
    }

    /// At shutdown: asks every handler to stop and waits for them (bounded).
    async fn drain(&mut self) {
        self.calls.shutdown();
        let bound = self.settings.cancel_grace + SHUTDOWN_POST;
        let _ = tokio::time::timeout(bound, async {
            while self.calls.running() > 0 {
                match self.done_rx.recv().await {
                    Some(done) => self.calls.finished(&done.id),
                    None => return,
                }
            }
        })
        .await;
        // A reply still waiting for the broker is given up.
        self.calls.claims_lost();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: ErrorCode) -> Error {
        Error::Refused {
            code,
            message: "m".into(),
        }
    }

    /// A registration refused by the shared table's `REGISTER_AGAIN` is retried on a new
    /// stream; one refused for the app's own tools stops it, as does a fatal refusal.
    #[test]
    fn only_the_shared_tables_refusals_of_a_registration_are_retried() {
        for code in ErrorCode::REGISTER_AGAIN {
            assert!(
                !registration_refused("g", refused(code)).is_fatal(),
                "{code}"
            );
        }
        for code in [
            ErrorCode::InvalidTool,
            ErrorCode::NameConflict,
            ErrorCode::TooManyTools,
            ErrorCode::Forbidden,
        ] {
            assert!(
                registration_refused("g", refused(code)).is_fatal(),
                "{code}"
            );
        }
    }
}
