//! A small HTTP/1.1 client over TCP or a unix socket, built on hyper's connection API so both
//! transports share one code path. Each request opens its own connection.
//!
//! Apps, the CLI and the bench share the SDK's client (`leo_app::http`); the tests keep this
//! one because they send what no client should: no Host, a foreign Host, no token, a body the
//! server stops reading, and they read headers and half-open streams.

use std::net::SocketAddr;
use std::path::PathBuf;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::WAIT;

#[derive(Debug, Clone)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A client bound to one broker and one token.
#[derive(Debug, Clone)]
pub struct Http {
    pub target: Target,
    pub token: Option<String>,
    /// The Host header sent over TCP; defaults to the listener's `ip:port`.
    pub host: Option<String>,
    /// Headers sent with every request (a cookie, an Origin…).
    pub headers: Vec<(String, String)>,
}

/// A response: status, and the body as JSON when it parses (else `Value::String`).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub content_type: String,
    pub headers: hyper::HeaderMap,
}

impl Reply {
    /// `body.data`, asserting `ok: true` and a 200.
    pub fn data(&self) -> &Value {
        assert_eq!(self.status, 200, "expected 200, got {self:?}");
        assert_eq!(self.body["ok"], true, "{self:?}");
        &self.body["data"]
    }

    /// The error code, asserting the status and `ok: false`.
    pub fn code(&self, status: u16) -> &str {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.body["ok"], false, "{self:?}");
        self.body["code"].as_str().expect("code")
    }

    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }

    /// The first value of response header `name`, if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Http {
    pub fn tcp(addr: SocketAddr, token: Option<String>) -> Http {
        Http {
            target: Target::Tcp(addr),
            token,
            host: None,
            headers: Vec::new(),
        }
    }

    pub fn unix(path: PathBuf, token: Option<String>) -> Http {
        Http {
            target: Target::Unix(path),
            token,
            host: None,
            headers: Vec::new(),
        }
    }

    /// The same client with another token (`None`: no Authorization header).
    pub fn with_token(&self, token: Option<&str>) -> Http {
        Http {
            token: token.map(str::to_owned),
            ..self.clone()
        }
    }

    /// The same client sending header `name: value` with every request too.
    pub fn with_header(&self, name: &str, value: &str) -> Http {
        let mut http = self.clone();
        http.headers.push((name.to_owned(), value.to_owned()));
        http
    }

    /// The same client sending `host` as the Host header (`""`: none).
    pub fn with_host(&self, host: &str) -> Http {
        Http {
            host: Some(host.to_owned()),
            ..self.clone()
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, Bytes::new(), &[]).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send("POST", path, Bytes::from(body.to_string()), &[])
            .await
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<Bytes>) -> Reply {
        self.send("POST", path, body.into(), &[]).await
    }

    /// Like `post_raw`, but a connection the server closed before reading the whole body (as it
    /// may after answering 413) is `Err` instead of a panic.
    pub async fn try_post_raw(&self, path: &str, body: impl Into<Bytes>) -> Result<u16, String> {
        let req = self.request("POST", path, body.into(), &[]);
        let fut = async {
            let mut sender = handshake(&self.target).await?;
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            Ok(resp.status().as_u16())
        };
        tokio::time::timeout(WAIT, fut)
            .await
            .map_err(|_| "timed out".to_owned())?
    }

    /// The status of `GET path`, or `None` when the connection fails or closes before the
    /// answer (a broker stopping, or a follower handing its listeners to the core it starts
    /// when it takes the lead): for polling until a broker serves.
    pub async fn try_status(&self, path: &str) -> Option<u16> {
        let req = self.request("GET", path, Bytes::new(), &[]);
        let fut = async {
            let mut sender = handshake(&self.target).await.ok()?;
            let resp = sender.send_request(req).await.ok()?;
            Some(resp.status().as_u16())
        };
        tokio::time::timeout(WAIT, fut).await.ok().flatten()
    }

    /// `GET path` answered in full, or `None` when the connection fails or closes before the
    /// answer's end, as [`Http::try_status`] tolerates: for polling a cluster during takeovers.
    pub async fn try_get(&self, path: &str) -> Option<Reply> {
        let req = self.request("GET", path, Bytes::new(), &[]);
        let fut = async {
            let mut sender = handshake(&self.target).await.ok()?;
            let resp = sender.send_request(req).await.ok()?;
            try_read_reply(resp).await
        };
        tokio::time::timeout(WAIT, fut).await.ok().flatten()
    }

    /// Sends a request and reads the whole response.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Reply {
        let resp = self.open(method, path, body, headers).await;
        tokio::time::timeout(WAIT, read_reply(resp))
            .await
            .expect("response body timed out")
    }

    /// Sends a request and returns the response with its body unread (for SSE).
    pub async fn open(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Response<Incoming> {
        let req = self.request(method, path, body, headers);
        let fut = async {
            let mut sender = handshake(&self.target).await.expect("connect");
            sender.send_request(req).await.expect("send request")
        };
        tokio::time::timeout(WAIT, fut)
            .await
            .expect("request timed out")
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Request<Full<Bytes>> {
        let mut req = Request::builder().method(method).uri(path);
        let host = match (&self.host, &self.target) {
            (Some(h), _) => h.clone(),
            (None, Target::Tcp(addr)) => addr.to_string(),
            (None, Target::Unix(_)) => "localhost".to_owned(),
        };
        if !host.is_empty() {
            req = req.header("host", host);
        }
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let own: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(headers.iter().copied())
            .collect();
        let typed = own
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if !body.is_empty() && !typed {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in own {
            req = req.header(k, v);
        }
        req.body(Full::new(body)).expect("request")
    }
}

/// One keep-alive connection, for tests that send many requests in a row.
pub struct Conn {
    http: Http,
    sender: Sender,
}

impl Http {
    /// Opens a keep-alive connection with this client's target, token and Host.
    pub async fn connect(&self) -> Conn {
        let sender = handshake(&self.target).await.expect("connect");
        Conn {
            http: self.clone(),
            sender,
        }
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A new connection to `target`, driven by its own task.
async fn handshake(target: &Target) -> Result<Sender, String> {
    match target {
        Target::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            // Without it, a request written in two segments waits for a delayed ACK.
            let _ = stream.set_nodelay(true);
            handshake_on(TokioIo::new(stream)).await
        }
        Target::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| e.to_string())?;
            handshake_on(TokioIo::new(stream)).await
        }
    }
}

async fn handshake_on<IO>(io: IO) -> Result<Sender, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl Conn {
    /// POSTs `body` as JSON on this connection.
    pub async fn post(&mut self, path: &str, body: &Value) -> Reply {
        let req = self
            .http
            .request("POST", path, Bytes::from(body.to_string()), &[]);
        let fut = async {
            self.sender.ready().await.expect("connection ready");
            let resp = self.sender.send_request(req).await.expect("send request");
            read_reply(resp).await
        };
        tokio::time::timeout(WAIT, fut)
            .await
            .expect("request timed out")
    }
}

/// Reads a whole response: status, content type, and the body as JSON (else a string).
async fn read_reply(resp: Response<Incoming>) -> Reply {
    try_read_reply(resp).await.expect("response body")
}

/// The whole response, or `None` when the connection closes before its body's end.
async fn try_read_reply(resp: Response<Incoming>) -> Option<Reply> {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = resp.into_body().collect().await.ok()?.to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Some(Reply {
        status,
        body,
        content_type,
        headers,
    })
}
