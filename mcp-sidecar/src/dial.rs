//! How this sidecar reaches the broker: the one place that opens the byte stream the IPC runs
//! on. `Socket` is `run/sidecar.sock` on this host; `Url` is a broker on another host (or
//! outside this container), reached over its TCP listener (`--url`): TCP, TLS for `https://`
//! (the one client rule, `leo_protocol::tls`), then `GET /api/v1/ipc` with `Upgrade: leo-ipc`,
//! after which the connection carries the same frames as the socket. Other ways in are variants
//! here, so that `reconnect` keeps one connection loop, one hello and one resume whatever
//! carries the frames.
//!
//! What a failure is, for `reconnect`: nobody listening (no socket, a refused TCP connection)
//! is `NotRunning`, waited out quietly; a refused upgrade is `Refused` with the broker's code
//! and message; anything else on the way (a name that does not resolve, a certificate the
//! client does not trust, an answer that is not HTTP, no answer within `DIAL_TIMEOUT`) is
//! `Unreachable`, whose whole chain is the reason calls are answered with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::StatusCode;
use hyper::header::{AUTHORIZATION, CONNECTION, HOST, UPGRADE};
use hyper_util::rt::TokioIo;
use leo_protocol::ipc::{AGENT_HEADER, UPGRADE_PATH, UPGRADE_PROTOCOL};
use leo_protocol::names::AgentName;
use leo_protocol::tls::Connector;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::error::{Result, SidecarError};
use crate::frames::{self, Reader, Writer};

/// How long the way to a remote broker may take, from the TCP connect to the `101`.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of a refusal's body that is read.
const REFUSAL_BYTES: usize = 64 * 1024;

/// Where the broker is.
#[derive(Debug, Clone)]
pub enum Dial {
    /// The broker's sidecar socket on this host (`$LEO_HOME/run/sidecar.sock`).
    Socket(PathBuf),
    /// A broker's TCP listener (`--url`).
    Url(Arc<Remote>),
    /// A pipe into the broker's own process: `/mcp`, where this MCP server runs inside the
    /// broker (see `http`), and each MCP session is a sidecar session all the same.
    InProcess(Pipe),
}

/// Opens an in-process connection to the broker (`leo_broker::mcp::Pipe::open`, given by the
/// `leo` binary, so that this crate does not depend on the broker's).
#[derive(Clone)]
pub struct Pipe(Arc<dyn Fn() -> tokio::io::DuplexStream + Send + Sync>);

impl Pipe {
    pub fn new(open: impl Fn() -> tokio::io::DuplexStream + Send + Sync + 'static) -> Pipe {
        Pipe(Arc::new(open))
    }
}

impl std::fmt::Debug for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pipe")
    }
}

impl Dial {
    /// Opens a new stream to the broker, for a session that will say hello with `token`. A
    /// broker that is not there (no socket, nobody listening) is `NotRunning`, which
    /// `reconnect` waits out quietly.
    pub async fn open(&self, token: &str) -> Result<(Reader, Writer)> {
        match self {
            Dial::InProcess(pipe) => Ok(frames::split((pipe.0)())),
            Dial::Socket(path) => match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => Ok(frames::split(stream)),
                Err(e) if not_listening(&e) => Err(SidecarError::NotRunning),
                Err(source) => Err(SidecarError::Ipc {
                    context: "connect",
                    source,
                }),
            },
            Dial::Url(remote) => match tokio::time::timeout(DIAL_TIMEOUT, remote.open(token)).await
            {
                Ok(opened) => opened,
                Err(_) => Err(remote.unreachable(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {DIAL_TIMEOUT:?}"),
                ))),
            },
        }
    }
}

fn not_listening(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// A broker reached over its TCP listener: where, and how.
#[derive(Debug)]
pub struct Remote {
    /// The URL as given, for messages.
    url: String,
    /// The host as the URL names it (brackets kept around an IPv6 address).
    host: String,
    port: u16,
    /// Present for `https://`.
    tls: Option<Connector>,
    agent: AgentName,
}

impl Remote {
    /// Reads `url` (`http://HOST[:PORT]` or `https://HOST[:PORT]`, nothing after the
    /// authority but `/`); `https://` trusts the system store and `LEO_CA_FILE`.
    pub fn parse(url: &str, agent: AgentName) -> Result<Remote> {
        let invalid = |why: &str| SidecarError::InvalidUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|_| invalid("not a URL (http://HOST:PORT or https://HOST:PORT)"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(invalid("the scheme must be http:// or https://")),
        };
        let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
        if authority.as_str().contains('@') {
            return Err(invalid(
                "a user name does not belong in the URL; the token is LEO_AGENT_TOKEN",
            ));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(invalid("give the broker's address only, without a path"));
        }
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let connector = if tls {
            Some(Connector::from_env().map_err(SidecarError::Tls)?)
        } else {
            None
        };
        Ok(Remote {
            url: url.trim_end_matches('/').to_owned(),
            host: authority.host().to_owned(),
            port,
            tls: connector,
            agent,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn unreachable(&self, source: std::io::Error) -> SidecarError {
        SidecarError::Unreachable {
            url: self.url.clone(),
            source,
        }
    }

    /// TCP, TLS when `https://`, then the upgrade.
    async fn open(&self, token: &str) -> Result<(Reader, Writer)> {
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        let tcp = match TcpStream::connect((bare, self.port)).await {
            Ok(tcp) => tcp,
            Err(e) if not_listening(&e) => return Err(SidecarError::NotRunning),
            Err(e) => return Err(self.unreachable(e)),
        };
        // The IPC is many small frames: do not hold them back.
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => self.upgrade(tcp, token).await,
            Some(tls) => {
                let stream = tls
                    .connect(&self.host, tcp)
                    .await
                    .map_err(|e| self.unreachable(e))?;
                self.upgrade(stream, token).await
            }
        }
    }

    /// `GET /api/v1/ipc` with `Upgrade: leo-ipc` over `io`; the upgraded stream's halves, or
    /// the broker's refusal.
    async fn upgrade<IO>(&self, io: IO, token: &str) -> Result<(Reader, Writer)>
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let http = |e: hyper::Error| self.unreachable(std::io::Error::other(e));
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(http)?;
        // Driven until the upgrade hands the connection over (or the refusal is read).
        tokio::spawn(conn.with_upgrades());
        let request = hyper::Request::get(UPGRADE_PATH)
            .header(HOST, format!("{}:{}", self.host, self.port))
            .header(CONNECTION, "upgrade")
            .header(UPGRADE, UPGRADE_PROTOCOL)
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .header(AGENT_HEADER, self.agent.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| self.unreachable(std::io::Error::other(e)))?;
        let response = sender.send_request(request).await.map_err(http)?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Err(refusal(response).await);
        }
        let upgraded = hyper::upgrade::on(response).await.map_err(http)?;
        Ok(frames::split(TokioIo::new(upgraded)))
    }
}

/// The broker's answer to an upgrade it refused, as the session's refusal: the envelope's code
/// and message, or the status and text of a plain answer (`403 forbidden host`).
async fn refusal(response: hyper::Response<hyper::body::Incoming>) -> SidecarError {
    let status = response.status();
    let body = Limited::new(response.into_body(), REFUSAL_BYTES)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    match serde_json::from_slice::<leo_protocol::envelope::Failure>(&body) {
        Ok(failure) => SidecarError::Refused {
            code: failure.code.as_str().to_owned(),
            message: failure.error,
        },
        Err(_) => SidecarError::Refused {
            code: status.as_u16().to_string(),
            message: format!(
                "the upgrade was answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> AgentName {
        AgentName::parse("scout").unwrap()
    }

    #[test]
    fn urls_name_a_listener_and_nothing_more() {
        let r = Remote::parse("http://10.203.0.1:8370/", agent()).unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.tls.is_none()),
            ("10.203.0.1", 8370, true)
        );
        assert_eq!(r.url(), "http://10.203.0.1:8370");
        let r = Remote::parse("http://[fd00::1]", agent()).unwrap();
        assert_eq!((r.host.as_str(), r.port), ("[fd00::1]", 80));
        for bad in [
            "leo.internal:8370",
            "ftp://leo.internal",
            "http://user@leo.internal:8370",
            "http://leo.internal:8370/api",
            "http://leo.internal:8370/?a=1",
            "not a url",
        ] {
            let e = Remote::parse(bad, agent()).unwrap_err();
            assert!(matches!(e, SidecarError::InvalidUrl { .. }), "{bad}: {e}");
        }
    }
}
