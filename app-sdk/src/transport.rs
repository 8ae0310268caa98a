//! HTTP/1.1 to the broker over its unix socket, TCP, or TLS over TCP (`https://`, with the one
//! client rule of `leo_protocol::tls`): a small pool of keep-alive connections
//! for the JSON routes, and one dedicated connection for the event stream.
//!
//! It is the one HTTP client of the workspace: the SDK's transport, and, as `leo_app::http`,
//! the client the `leo` CLI and the relay bench use, so what they measure and show is what an
//! app goes through. Its public face carries no hyper type: bodies in are bytes, answers out
//! are a status and bytes.
//!
//! Claims and results are two requests per call, so a connection per request would double the
//! round trips (and on TCP pay a handshake each time); the pool keeps up to `MAX_IDLE` idle
//! connections and drops any idle longer than `IDLE_FOR`, before a server could time it out. A
//! request that a reused connection could not deliver is sent again on a fresh one. Bodies are
//! lists of `Bytes` chunks, so pre-serialized content is written without being copied.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use leo_protocol::ErrorCode;
use leo_protocol::envelope::{Failure, Success};
pub use leo_protocol::tls::Connector;
use serde::de::DeserializeOwned;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 32;
/// An idle connection older than this is closed rather than reused.
const IDLE_FOR: Duration = Duration::from_secs(20);
/// A bound on connecting and on any JSON request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A request body made of chunks, with an exact length.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chunks {
    parts: VecDeque<Bytes>,
    len: u64,
}

impl Chunks {
    pub(crate) fn new(parts: impl IntoIterator<Item = Bytes>) -> Chunks {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|b| !b.is_empty()).collect();
        let len = parts.iter().map(|b| b.len() as u64).sum();
        Chunks { parts, len }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Infallible>>> {
        let next = self.parts.pop_front();
        if let Some(part) = &next {
            self.len -= part.len() as u64;
        }
        Poll::Ready(next.map(|part| Ok(Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

/// A whole response.
#[derive(Debug)]
pub struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

impl Answer {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The body, as the broker sent it.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// `data` of a 200 `{ok: true, data}`, else the refusal.
    pub fn data<T: DeserializeOwned>(&self) -> Result<T> {
        if self.status != 200 {
            return Err(self.refusal());
        }
        serde_json::from_slice::<Success<T>>(&self.body)
            .map(|ok| ok.data)
            .map_err(|e| Error::Protocol {
                what: "response",
                message: e.to_string(),
            })
    }

    /// The documented error of a failed response.
    pub fn refusal(&self) -> Error {
        match serde_json::from_slice::<Failure>(&self.body) {
            Ok(f) => Error::Refused {
                code: f.code,
                message: f.error,
            },
            // The Host check answers a plain-text 403 before any JSON.
            Err(_) if self.status == 403 => Error::Refused {
                code: ErrorCode::Forbidden,
                message: String::from_utf8_lossy(&self.body).trim().to_owned(),
            },
            Err(_) => Error::Protocol {
                what: "error response",
                message: format!(
                    "HTTP {}: {}",
                    self.status,
                    String::from_utf8_lossy(&self.body[..self.body.len().min(200)])
                ),
            },
        }
    }
}

type Sender = SendRequest<Chunks>;

/// A client of one broker with one token: keep-alive connections, reused one request at a
/// time, each request bounded in time (`REQUEST_TIMEOUT` unless `with_timeout`).
pub struct Client {
    endpoint: Endpoint,
    tls: Option<Connector>,
    host: HeaderValue,
    auth: HeaderValue,
    idle: Mutex<Vec<(Sender, Instant)>>,
    timeout: Duration,
    max_body: usize,
}

/// The TLS of an `https://` endpoint: the system's roots plus `ca_file`, or, without one, the
/// file `LEO_CA_FILE` names (the one client rule, `leo_protocol::tls`).
pub fn connector(ca_file: Option<&std::path::Path>) -> Result<Connector> {
    let made = match ca_file {
        Some(path) => Connector::new(Some(path)),
        None => Connector::from_env(),
    };
    made.map_err(|e| Error::Config(leo_protocol::chain::error_chain(&e)))
}

impl Client {
    /// A client of `endpoint`; an `https://` one trusts what [`connector`] trusts with no CA
    /// file given.
    pub fn new(endpoint: Endpoint, token: &str) -> Result<Client> {
        let tls = match endpoint {
            Endpoint::Https { .. } => Some(connector(None)?),
            _ => None,
        };
        Client::with_tls(endpoint, token, tls)
    }

    /// A client of `endpoint` whose `https://` connections use `tls` (built once, shared by
    /// the clients of one app); `None` for a plain endpoint.
    pub fn with_tls(endpoint: Endpoint, token: &str, tls: Option<Connector>) -> Result<Client> {
        if matches!(endpoint, Endpoint::Https { .. }) && tls.is_none() {
            return Err(Error::Config(format!("{endpoint} needs TLS settings")));
        }
        let host = HeaderValue::from_str(endpoint.host())
            .map_err(|_| Error::Config(format!("invalid host {:?}", endpoint.host())))?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Config("the token has characters a header cannot carry".into()))?;
        auth.set_sensitive(true);
        Ok(Client {
            endpoint,
            tls,
            host,
            auth,
            idle: Mutex::new(Vec::new()),
            timeout: REQUEST_TIMEOUT,
            max_body: usize::MAX,
        })
    }

    /// The same client refusing an answer whose body is larger than `bytes`
    /// (`Error::TooLarge`); by default there is no bound.
    pub fn with_max_body(mut self, bytes: usize) -> Client {
        self.max_body = bytes;
        self
    }

    /// The same client with another bound on connecting and on each request.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    fn request(&self, method: &str, path: &str, body: Chunks) -> Result<Request<Chunks>> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(AUTHORIZATION, self.auth.clone());
        if body.len > 0 {
            req = req.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        req.body(body)
            .map_err(|e| Error::Config(format!("invalid request {path:?}: {e}")))
    }

    /// Opens a new connection.
    async fn connect(&self) -> Result<Sender> {
        let fail = |source| Error::Connect {
            endpoint: self.endpoint.to_string(),
            source,
        };
        match &self.endpoint {
            Endpoint::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await.map_err(fail)?;
                spawn_conn(http1::handshake(TokioIo::new(stream)).await)
            }
            Endpoint::Tcp { authority } => {
                let stream = tcp(authority).await.map_err(fail)?;
                spawn_conn(http1::handshake(TokioIo::new(stream)).await)
            }
            Endpoint::Https { authority } => {
                let stream = tcp(authority).await.map_err(fail)?;
                let tls = self.tls.as_ref().ok_or_else(|| {
                    Error::Config(format!("{} needs TLS settings", self.endpoint))
                })?;
                let host = authority
                    .rsplit_once(':')
                    .map_or(authority.as_str(), |(h, _)| h);
                let stream = tls.connect(host, stream).await.map_err(fail)?;
                spawn_conn(http1::handshake(TokioIo::new(stream)).await)
            }
        }
    }

    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((sender, since)) = idle.pop() {
            if since.elapsed() < IDLE_FOR && !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((sender, Instant::now()));
        }
    }

    /// Sends a request on a pooled connection and reads the whole answer.
    pub(crate) async fn send(&self, method: &str, path: &str, body: Chunks) -> Result<Answer> {
        tokio::time::timeout(self.timeout, self.send_now(method, path, body))
            .await
            .map_err(|_| Error::Timeout(self.timeout))?
    }

    async fn send_now(&self, method: &str, path: &str, body: Chunks) -> Result<Answer> {
        loop {
            let (mut sender, reused) = match self.take_idle() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            let req = self.request(method, path, body.clone())?;
            let sent = match sender.ready().await {
                Ok(()) => sender.try_send_request(req).await,
                Err(e) if reused => {
                    tracing::debug!(error = %e, "a pooled connection closed; using a new one");
                    continue;
                }
                Err(e) => return Err(Error::Http(e.into())),
            };
            let resp = match sent {
                Ok(resp) => resp,
                // A reused connection the server had closed: the request never reached it.
                Err(e) if reused && (e.message().is_some() || e.error().is_canceled()) => {
                    tracing::debug!(error = %e.error(), "a pooled connection closed; using a new one");
                    continue;
                }
                Err(e) => return Err(Error::Http(e.into_error().into())),
            };
            let status = resp.status().as_u16();
            let body = read_limited(resp.into_body(), self.max_body).await?;
            self.put_idle(sender);
            return Ok(Answer { status, body });
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer> {
        self.send("GET", path, Chunks::default()).await
    }

    pub(crate) async fn post(&self, path: &str, body: Chunks) -> Result<Answer> {
        self.send("POST", path, body).await
    }

    /// `POST path` without the client's bound: for a request the broker itself bounds (a
    /// question to the user ends with its call).
    pub(crate) async fn post_unbounded(&self, path: &str, body: Chunks) -> Result<Answer> {
        self.send_now("POST", path, body).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<Answer> {
        self.send("DELETE", path, Chunks::default()).await
    }

    /// `POST path` with a JSON body (already serialized, sent as it is).
    pub async fn post_json(&self, path: &str, json: impl Into<Vec<u8>>) -> Result<Answer> {
        self.post(path, Chunks::new([Bytes::from(json.into())]))
            .await
    }

    /// Opens the provider event stream on its own connection; returns its body once the
    /// broker has answered 200.
    pub(crate) async fn open_events(
        &self,
        name: Option<&str>,
        last_event_id: Option<u64>,
        resume: Option<&str>,
    ) -> Result<Incoming> {
        let mut path = String::from("/api/v1/events?client_tools=1");
        if let Some(name) = name {
            path.push_str("&name=");
            path.extend(form_urlencoded::byte_serialize(name.as_bytes()));
        }
        if let Some(key) = resume {
            path.push_str("&resume=");
            path.extend(form_urlencoded::byte_serialize(key.as_bytes()));
        }
        self.open_stream(&path, last_event_id).await
    }

    /// Opens an event stream (`path`) on its own connection; returns its body once the broker
    /// has answered 200.
    pub(crate) async fn open_stream(
        &self,
        path: &str,
        last_event_id: Option<u64>,
    ) -> Result<Incoming> {
        let fut = async {
            let mut sender = self.connect().await?;
            let mut req = self.request("GET", path, Chunks::default())?;
            req.headers_mut()
                .insert("accept", HeaderValue::from_static("text/event-stream"));
            if let Some(id) = last_event_id {
                req.headers_mut()
                    .insert("last-event-id", HeaderValue::from(id));
            }
            let resp: Response<Incoming> = sender
                .send_request(req)
                .await
                .map_err(|e| Error::Http(e.into()))?;
            let status = resp.status().as_u16();
            if status == 200 {
                return Ok(resp.into_body());
            }
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Error::Http(e.into()))?;
            Err(Answer {
                status,
                body: body.to_bytes(),
            }
            .refusal())
        };
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| Error::Timeout(self.timeout))?
    }
}

/// A TCP connection to `authority`, with `TCP_NODELAY`: without it a body written after its
/// headers waits for a delayed ACK.
async fn tcp(authority: &str) -> std::io::Result<tokio::net::TcpStream> {
    let stream = tokio::net::TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads a whole body, refusing one over `limit` bytes as it arrives.
async fn read_limited(body: Incoming, limit: usize) -> Result<Bytes> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Error::TooLarge(limit)),
        Err(e) => Err(Error::Http(e)),
    }
}

/// Runs the connection in its own task; it ends when the connection closes.
fn spawn_conn<IO>(
    handshake: std::result::Result<(Sender, http1::Connection<IO, Chunks>), hyper::Error>,
) -> Result<Sender>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = handshake.map_err(|e| Error::Http(e.into()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "broker connection ended");
        }
    });
    Ok(sender)
}
