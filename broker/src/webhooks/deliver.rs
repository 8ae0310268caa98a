//! One signed delivery: a `POST` of an event's JSON to the webhook's url, on a fresh
//! connection to the address its check admitted, bounded in time and in answer size.
//!
//! hyper's client connection is used as it is (the workspace's one HTTP stack); the SDK's
//! client is not, since it speaks to the broker (bearer token, unix socket) rather than to
//! foreign servers.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::header::{CONTENT_TYPE, HOST, USER_AGENT};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper_util::rt::TokioIo;
use leo_protocol::webhooks::{HEADER_EVENT, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP};

use super::sign::signature;
use super::url::{Target, Unreachable, UrlRefused};

/// How long connecting to the app may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the app may take to answer, from the request sent to its answer read whole.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the app answered.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// One delivery's content.
pub struct Message<'a> {
    /// `webhook-id`.
    pub id: &'a str,
    /// `leo-event`.
    pub event: &'static str,
    pub body: Bytes,
}

/// Why a delivery got no answer; its chain (`error_chain`) is the webhook's `last_error`.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The webhook's url is refused by the rule of `url`.
    #[error("the url is refused: {0}")]
    Refused(UrlRefused),
    /// Its host has no address the rule admits.
    #[error(transparent)]
    Address(Unreachable),
    #[error("connecting to {addr} took over {} s", CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout { addr: SocketAddr },
    #[error("cannot connect to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP handshake with {addr} failed")]
    Handshake {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("cannot build the request")]
    Request(#[source] axum::http::Error),
    #[error("{addr} did not answer")]
    NoAnswer {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("cannot read the answer of {addr} (at most {max} bytes)")]
    Body {
        addr: SocketAddr,
        max: usize,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{addr} did not answer within {} s", ANSWER_TIMEOUT.as_secs())]
    AnswerTimeout { addr: SocketAddr },
}

/// Sends `message` to `target`, signed with `key`; the answer, or why there is none.
pub async fn send(
    target: &Target,
    key: &[u8],
    message: &Message<'_>,
    max_answer: usize,
) -> Result<Answer, DeliveryError> {
    let addr = target.resolve().await.map_err(DeliveryError::Address)?;
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| DeliveryError::ConnectTimeout { addr })?
        .map_err(|source| DeliveryError::Connect { addr, source })?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| DeliveryError::Handshake { addr, source })?;
    let conn = tokio::spawn(conn);
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let req = Request::post(target.path.as_str())
        .header(HOST, target.authority.as_str())
        .header(CONTENT_TYPE, "application/json")
        .header(
            USER_AGENT,
            concat!("leo-broker/", env!("CARGO_PKG_VERSION")),
        )
        .header(HEADER_ID, message.id)
        .header(HEADER_TIMESTAMP, timestamp.to_string())
        .header(
            HEADER_SIGNATURE,
            signature(key, message.id, timestamp, &message.body),
        )
        .header(HEADER_EVENT, message.event)
        .body(Full::new(message.body.clone()))
        .map_err(DeliveryError::Request)?;
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|source| DeliveryError::NoAnswer { addr, source })?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), max_answer)
            .collect()
            .await
            .map_err(|source| DeliveryError::Body {
                addr,
                max: max_answer,
                source,
            })?
            .to_bytes();
        Ok(Answer { status, body })
    })
    .await
    .map_err(|_| DeliveryError::AnswerTimeout { addr })?;
    conn.abort();
    answer
}
