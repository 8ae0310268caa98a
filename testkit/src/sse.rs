//! An SSE reader over `Http::open`, on the SDK's parser (`leo_protocol::sse`): a test reads the
//! stream exactly as an app does, frames split anywhere and UTF-8 kept whole across chunks.

use http_body_util::BodyExt;
use hyper::body::Incoming;
use leo_protocol::sse::{Frame, Parser};
use serde_json::Value;

use crate::{Http, WAIT};

/// One event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

/// An open stream.
pub struct Sse {
    body: Incoming,
    parser: Parser,
    pub status: u16,
}

impl Sse {
    /// Opens `path` with optional `Last-Event-ID`; panics unless the status is 200.
    pub async fn open(http: &Http, path: &str, last_event_id: Option<u64>) -> Sse {
        let sse = Sse::try_open(http, path, last_event_id).await;
        assert_eq!(sse.status, 200, "stream {path} refused");
        sse
    }

    /// Opens `path` and returns whatever status came back.
    pub async fn try_open(http: &Http, path: &str, last_event_id: Option<u64>) -> Sse {
        let id = last_event_id.map(|i| i.to_string());
        let mut headers = vec![("accept", "text/event-stream")];
        if let Some(id) = &id {
            headers.push(("last-event-id", id.as_str()));
        }
        let resp = http.open("GET", path, Default::default(), &headers).await;
        Sse {
            status: resp.status().as_u16(),
            body: resp.into_body(),
            parser: Parser::default(),
        }
    }

    /// A provider stream with the operator token; returns it and its client_id.
    pub async fn provider(http: &Http) -> (Sse, String) {
        let mut sse = Sse::open(http, "/api/v1/events?client_tools=1", None).await;
        let hello = sse.next().await;
        assert_eq!(hello.event, "hello");
        let id = hello.data["client_id"]
            .as_str()
            .expect("client_id")
            .to_owned();
        (sse, id)
    }

    /// The next event; panics after `WAIT` or at end of stream.
    pub async fn next(&mut self) -> SseEvent {
        match tokio::time::timeout(WAIT, self.next_or_end()).await {
            Ok(Some(e)) => e,
            Ok(None) => panic!("event stream ended"),
            Err(_) => panic!("no event within {WAIT:?}"),
        }
    }

    /// The next event of type `kind`, skipping others.
    pub async fn next_of(&mut self, kind: &str) -> SseEvent {
        loop {
            let e = self.next().await;
            if e.event == kind {
                return e;
            }
        }
    }

    /// The next event, or `None` when the stream ends.
    pub async fn next_or_end(&mut self) -> Option<SseEvent> {
        loop {
            match self.parser.next_frame() {
                Ok(Some(frame)) => return Some(event(frame)),
                Ok(None) => {}
                Err(too_large) => panic!("the stream sent a frame over the limit: {too_large:?}"),
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.parser.push(&data);
            }
        }
    }

    /// Waits up to `d` for an event; `None` if none came.
    pub async fn within(&mut self, d: std::time::Duration) -> Option<SseEvent> {
        tokio::time::timeout(d, self.next_or_end())
            .await
            .ok()
            .flatten()
    }
}

/// A frame with its data read as JSON (or kept as a string when it is not JSON).
fn event(frame: Frame) -> SseEvent {
    let data = serde_json::from_slice(&frame.data)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&frame.data).into_owned()));
    SseEvent {
        id: frame.id,
        event: frame.event,
        data,
    }
}
