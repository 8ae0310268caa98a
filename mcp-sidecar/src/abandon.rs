//! `/mcp`: a tool call whose client went away is cancelled.
//!
//! Over stdio, a harness that dies closes `leo-mcp`'s stdin and its calls end at once. Over
//! Streamable HTTP nothing closes: the session lives on in the broker until the client
//! `DELETE`s it or five minutes pass without a message, and a harness that was killed does
//! neither. What does end is the HTTP response that carries the call's answer: its stream is
//! dropped before the answer when the client's connection is gone (seen at once, or at the
//! next keep-alive the server writes, every 15 s).
//!
//! **Decision: a `tools/call` whose response stream is dropped before its answer is cancelled**,
//! as if the client had sent `notifications/cancelled` for it: the same notification is handed
//! to the session, so the call ends the one way a cancel ends (`cancelled_by_agent`, the app
//! told at once). The MCP specification lets a client resume a dropped stream instead
//! (`Last-Event-ID`); no harness we know does that for a call's stream, and a call nobody
//! waits for must not stay parked at the apps.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, header};
use http_body::{Frame, SizeHint};
use http_body_util::Full;
use rmcp::model::RequestId;

use crate::http::Body;

/// A call's response body that runs `on_abandon` if it is dropped before its end.
pub struct Watched {
    inner: Body,
    ended: bool,
    on_abandon: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Watched {
    pub fn new(inner: Body, on_abandon: impl FnOnce() + Send + Sync + 'static) -> Watched {
        Watched {
            inner,
            ended: false,
            on_abandon: Some(Box::new(on_abandon)),
        }
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let poll = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(poll, Poll::Ready(None)) {
            self.ended = true;
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.ended
            && let Some(on_abandon) = self.on_abandon.take()
        {
            on_abandon();
        }
    }
}

/// The `notifications/cancelled` of call `id` in session `session`, as its client would send
/// it (`version`: the session's `Mcp-Protocol-Version`, when the client sent one).
pub fn cancel(session: &str, version: Option<&str>, id: &RequestId) -> Request<Full<Bytes>> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "the client went away"},
    });
    // rmcp wants a Host; the broker checked the client's.
    let mut request = Request::post("/mcp")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-session-id", session);
    if let Some(version) = version {
        request = request.header("mcp-protocol-version", version);
    }
    request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
}
