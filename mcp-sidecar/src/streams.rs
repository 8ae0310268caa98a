//! `/mcp`'s sessions: rmcp's session manager, with what its event streams promise kept.
//!
//! rmcp's `LocalSessionManager` numbers each stream's events on its own (a call's stream `0/N`,
//! `1/N`…, the standalone `GET` stream `0`, `1`…, and the service puts a priming event `0` at
//! the head of that stream and of the `initialize` stream), so event ids repeat within a
//! session; and without an event store it replays its whole cache of the standalone stream to
//! every new `GET`, so a client that reconnects is sent again what it already had, questions
//! it already answered included. `Sessions` wraps it through rmcp's `SessionManager` trait.
//!
//! **Decision: `/mcp` does not offer resumption.** A call's stream that drops cancels the call
//! (`abandon`: a harness whose connection is cut is not coming back for it), so an event id
//! would promise what is not kept. Events carry no `id:` and streams no `retry:` (the priming
//! events are off: `Http::new` sets no `sse_retry`), and a `GET` with `Last-Event-ID` is a new
//! standalone stream, as one without it is. With no ids, none repeats.
//!
//! **Decision: a new standalone stream carries only what no earlier one delivered.** Of what
//! rmcp's cache replays to a new `GET`, an event passes only if no earlier stream of the
//! session passed it (by its place in the session's standalone stream) and it is not a
//! request the client has answered.
//!
//! **Decision: a call's log messages travel on the call's own `POST` stream.** rmcp's
//! `LocalSessionManager` routes to a request's stream only its response, its progress, its
//! cancellation and the server requests tagged with it (`OriginatingRequestId`); every other
//! notification goes to the standalone stream, which a client need not open. So `Sessions`
//! also wraps each session's transport (`Routed`): a `notifications/message` tagged with the
//! request it belongs to (`logging::send` puts the same `OriginatingRequestId` on it) is taken
//! out there and put on that request's stream (`Joined`), which `create_stream` opened with a
//! channel of its own. The diversion happens as the service hands the message to the
//! transport, before the call's response is handed over, and `Joined` passes every diverted
//! message before the next event of rmcp's stream: so the messages come before the response,
//! in order. A message whose request's stream is gone (or full) goes the usual way.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::future::{Either, Ready, ready};
use futures_util::{Stream, StreamExt};
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerNotification};
use rmcp::service::{OriginatingRequestId, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use tokio::sync::mpsc;

/// How many diverted log messages a call's stream holds before further ones take the
/// standalone stream: a client that does not read its call's stream does not grow the broker.
const DIVERTED: usize = 256;

/// A session manager `M` whose streams carry no event ids and do not repeat themselves, and
/// whose calls' log messages travel on the calls' own streams.
pub struct Sessions<M> {
    inner: M,
    seen: Mutex<HashMap<SessionId, Arc<Seen>>>,
    routes: Mutex<HashMap<SessionId, Routes>>,
}

impl<M> Sessions<M> {
    pub fn new(inner: M) -> Sessions<M> {
        Sessions {
            inner,
            seen: Mutex::default(),
            routes: Mutex::default(),
        }
    }

    /// The streams of session `id`'s requests in flight.
    fn routes(&self, id: &SessionId) -> Routes {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.entry(id.clone()).or_default().clone()
    }

    /// What session `id` has delivered on its standalone streams and had answered.
    fn seen(&self, id: &SessionId) -> Arc<Seen> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.entry(id.clone()).or_default().clone()
    }
}

/// What a session's client has had.
#[derive(Default)]
struct Seen {
    /// One past the place of the last standalone event delivered.
    delivered: AtomicUsize,
    /// The server's requests the client answered.
    answered: Mutex<HashSet<RequestId>>,
}

impl Seen {
    /// `event` of the standalone stream, unless the client had it already.
    fn pass(&self, event: ServerSseMessage) -> Option<ServerSseMessage> {
        let place = event
            .event_id
            .as_deref()
            .and_then(|id| id.parse::<usize>().ok());
        let event = unnumbered(event)?;
        if let Some(place) = place
            && place < self.delivered.fetch_max(place + 1, Ordering::SeqCst)
        {
            return None;
        }
        if let Some(ServerJsonRpcMessage::Request(request)) = event.message.as_deref() {
            let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
            if answered.contains(&request.id) {
                return None;
            }
        }
        Some(event)
    }

    /// Notes the answer `message` is, if it is one.
    fn note(&self, message: &ClientJsonRpcMessage) {
        let id = match message {
            ClientJsonRpcMessage::Response(r) => Some(r.id.clone()),
            ClientJsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        if let Some(id) = id {
            let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
            answered.insert(id);
        }
    }
}

/// `event` without its id and retry hint; nothing if that leaves no message (a priming event).
fn unnumbered(mut event: ServerSseMessage) -> Option<ServerSseMessage> {
    event.event_id = None;
    event.retry = None;
    event.message.is_some().then_some(event)
}

/// A session's requests in flight whose streams take their log messages, by request id.
#[derive(Clone, Default)]
struct Routes(Arc<Mutex<HashMap<RequestId, mpsc::Sender<ServerSseMessage>>>>);

impl Routes {
    /// `message`, unless it is a log message of a request whose stream took it.
    fn divert(&self, message: ServerJsonRpcMessage) -> Option<ServerJsonRpcMessage> {
        let ServerJsonRpcMessage::Notification(note) = &message else {
            return Some(message);
        };
        let ServerNotification::LoggingMessageNotification(log) = &note.notification else {
            return Some(message);
        };
        let Some(OriginatingRequestId(origin)) = log.extensions.get::<OriginatingRequestId>()
        else {
            return Some(message);
        };
        let routes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stream) = routes.get(origin) else {
            return Some(message);
        };
        match stream.try_send(ServerSseMessage::from_message(message)) {
            Ok(()) => None,
            Err(
                mpsc::error::TrySendError::Full(event) | mpsc::error::TrySendError::Closed(event),
            ) => event.message.map(Arc::unwrap_or_clone),
        }
    }

    /// Opens the channel of request `id`'s stream; it closes when the `Route` is dropped.
    fn open(&self, id: RequestId) -> (Route, mpsc::Receiver<ServerSseMessage>) {
        let (tx, rx) = mpsc::channel(DIVERTED);
        let mut routes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        routes.insert(id.clone(), tx);
        (
            Route {
                routes: self.clone(),
                id,
            },
            rx,
        )
    }
}

/// A request's place in `Routes`, removed with it.
struct Route {
    routes: Routes,
    id: RequestId,
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut routes = self.routes.0.lock().unwrap_or_else(|e| e.into_inner());
        routes.remove(&self.id);
    }
}

/// A session's transport `T`, whose requests' log messages `Routes` takes out.
pub struct Routed<T> {
    inner: T,
    routes: Routes,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Routed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Diverted here, before the future: the service calls `send` in the order the
        // messages were sent, so a call's log messages are on its stream before its response.
        match self.routes.divert(item) {
            Some(item) => Either::Left(self.inner.send(item)),
            None => Either::Right(ready(Ok(()))) as Either<_, Ready<Result<(), Self::Error>>>,
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A request's stream: rmcp's `inner`, with the request's diverted log messages passed before
/// each of its events.
struct Joined<S> {
    inner: Pin<Box<S>>,
    logs: mpsc::Receiver<ServerSseMessage>,
    /// An event of `inner` waiting behind the log messages already diverted (`Some(None)`:
    /// the end of `inner`).
    next: Option<Option<ServerSseMessage>>,
    done: bool,
    _route: Route,
}

impl<S: Stream<Item = ServerSseMessage>> Stream for Joined<S> {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(next) = this.next.take() {
                if let Ok(log) = this.logs.try_recv() {
                    this.next = Some(next);
                    return Poll::Ready(Some(log));
                }
                this.done = next.is_none();
                return Poll::Ready(next);
            }
            if let Poll::Ready(Some(log)) = this.logs.poll_recv(cx) {
                return Poll::Ready(Some(log));
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(event) => this.next = Some(event),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<M: SessionManager> SessionManager for Sessions<M> {
    type Error = M::Error;
    type Transport = Routed<M::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, inner) = self.inner.create_session().await?;
        let routes = self.routes(&id);
        Ok((id, Routed { inner, routes }))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let request = match &message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        // Opened before the request is handed on, so that no log message of it comes first.
        let route = request.map(|request| self.routes(id).open(request));
        let stream = self
            .inner
            .create_stream(id, message)
            .await?
            .filter_map(|event| ready(unnumbered(event)));
        Ok(match route {
            Some((route, logs)) => Either::Left(Joined {
                inner: Box::pin(stream),
                logs,
                next: None,
                done: false,
                _route: route,
            }),
            None => Either::Right(stream),
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.seen(id).note(&message);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let seen = self.seen(id);
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(stream.filter_map(move |event| ready(seen.pass(event))))
    }

    /// No event carries an id to resume from: a new standalone stream.
    async fn resume(
        &self,
        id: &SessionId,
        _last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.create_standalone_stream(id).await
    }
}
