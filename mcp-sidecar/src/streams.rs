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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

/// A session manager `M` whose streams carry no event ids and do not repeat themselves.
pub struct Sessions<M> {
    inner: M,
    seen: Mutex<HashMap<SessionId, Arc<Seen>>>,
}

impl<M> Sessions<M> {
    pub fn new(inner: M) -> Sessions<M> {
        Sessions {
            inner,
            seen: Mutex::default(),
        }
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

impl<M: SessionManager> SessionManager for Sessions<M> {
    type Error = M::Error;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
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
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(stream.filter_map(|event| futures_util::future::ready(unnumbered(event))))
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
        Ok(stream.filter_map(move |event| futures_util::future::ready(seen.pass(event))))
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
