//! Serving a router on TCP with bounds: a cap on concurrent connections, a deadline for a
//! request's head, and an idle deadline for a connection on which nothing moves.
//!
//! `axum::serve` keeps every connection as long as its peer likes: twenty thousand idle
//! sockets used up the broker's file descriptors, and with them the sidecar socket, and a head
//! sent one line every few seconds was never cut off. So TCP has its own accept loop on
//! hyper's HTTP/1 connection, with hyper's header-read timer and a semaphore:
//!
//! - at most `web.max_connections` connections are served at once, counted over every TCP
//!   listener together (the main one and `metrics.bind` draw on one [`TcpBudget`]); one past
//!   the cap is answered `503` with `Connection: close` and closed, never served (up to 64
//!   refusals at a time linger a second so the client reads the answer; past that, one write
//!   and a close);
//! - a request's head must be complete `web.header_timeout_s` after the connection became ready
//!   for it (accepted, or the previous response sent), which bounds both a slow head and an
//!   idle keep-alive connection;
//! - a connection on which no byte moves either way for `web.idle_timeout_s` is closed (a body
//!   that stalls, a reader that stopped reading). Event streams send a keep-alive every 15 s, so
//!   a live stream is never idle.
//!
//! A connection upgraded to the sidecar IPC (`GET /api/v1/ipc`) leaves hyper and these timers
//! (a session may be quiet for hours) but keeps its place in the cap: every request carries its
//! connection's [`ConnSlot`], which the upgrade hands to the session.
//!
//! Every accepted connection is also watched for a peer that vanished without closing it (its
//! host lost, the network cut), which would otherwise hold it for as long as the kernel
//! retransmits, a quarter of an hour: see [`watch_peer`]. In a cluster this is how the leader
//! notices a follower that is gone, and so detaches the sidecar sessions it piped and closes the
//! event streams it forwarded.
//!
//! The unix sockets are not served here and share none of this budget: the TCP cap is also held
//! under half the process's file-descriptor limit (see `server`), so a flood of any TCP listener
//! leaves the sockets the rest.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::tls::ServerTls;

/// The bounds of the TCP listener.
#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// What a connection past the cap is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 21\r\n\
\r\n\
too many connections\n";

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// What plain HTTP sent to the HTTPS port is told before it is closed.
const NOT_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
content-type: text/plain; charset=utf-8\r\n\
connection: close\r\n\
content-length: 42\r\n\
\r\n\
this port speaks HTTPS: use https:// URLs\n";

/// How many refused connections are answered at once with a lingering close (the `503` is
/// written, then what the client already sent is read away for a moment, so it sees the answer
/// rather than a reset); past that a refusal is one write and a close.
const REFUSALS: usize = 64;

/// The largest buffer hyper keeps for a connection, and so the largest head it accepts.
const MAX_BUF: usize = 64 * 1024;

/// How long a TCP peer that vanished without closing keeps its connection, at most: keepalive
/// probes start after `KEEPALIVE_IDLE` s of silence, one every `KEEPALIVE_INTERVAL` s, and
/// `KEEPALIVE_PROBES` unanswered close it; data left unacknowledged as long closes it too (on
/// Linux, `TCP_USER_TIMEOUT`). docs/cluster.md gives the figure.
pub const DEAD_PEER: Duration = Duration::from_secs(30);
const KEEPALIVE_IDLE: u32 = 10;
const KEEPALIVE_INTERVAL: u32 = 5;
const KEEPALIVE_PROBES: u32 = 4;

/// Sets TCP keepalive (and on Linux the user timeout) on `stream`, so that a peer whose host
/// vanished is noticed within [`DEAD_PEER`]; a socket that refuses is logged and served all the
/// same. Probes are only sent on a silent connection: a busy one costs nothing.
pub fn watch_peer(stream: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let set = || -> nix::Result<()> {
        setsockopt(stream, sockopt::KeepAlive, &true)?;
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
        setsockopt(stream, sockopt::TcpKeepIdle, &KEEPALIVE_IDLE)?;
        #[cfg(target_vendor = "apple")]
        setsockopt(stream, sockopt::TcpKeepAlive, &KEEPALIVE_IDLE)?;
        setsockopt(stream, sockopt::TcpKeepInterval, &KEEPALIVE_INTERVAL)?;
        setsockopt(stream, sockopt::TcpKeepCount, &KEEPALIVE_PROBES)?;
        #[cfg(target_os = "linux")]
        setsockopt(
            stream,
            sockopt::TcpUserTimeout,
            &u32::try_from(DEAD_PEER.as_millis()).unwrap_or(u32::MAX),
        )?;
        Ok(())
    };
    if let Err(e) = set() {
        debug!(error = %e, "cannot set TCP keepalive");
    }
}

/// The connection budget every TCP listener of one broker shares: its limits, the permits of
/// the connections served, and the slots of the refusals that linger.
#[derive(Clone)]
pub struct TcpBudget {
    limits: TcpLimits,
    permits: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
}

impl TcpBudget {
    pub fn new(limits: TcpLimits) -> TcpBudget {
        TcpBudget {
            limits,
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            refusals: Arc::new(Semaphore::new(REFUSALS)),
        }
    }
}

/// A TCP connection's place in `web.max_connections`, in every request's extensions: it is
/// given back when the connection and everything it was upgraded to have ended.
#[derive(Clone)]
pub struct ConnSlot(#[allow(dead_code, reason = "held, never read")] Arc<OwnedSemaphorePermit>);

/// The router's service for one connection, which puts the connection's slot in each request.
struct WithSlot {
    app: TowerToHyperService<Router>,
    slot: ConnSlot,
}

impl hyper::service::Service<hyper::Request<Incoming>> for WithSlot {
    type Response = <TowerToHyperService<Router> as hyper::service::Service<
        hyper::Request<Incoming>,
    >>::Response;
    type Error =
        <TowerToHyperService<Router> as hyper::service::Service<hyper::Request<Incoming>>>::Error;
    type Future =
        <TowerToHyperService<Router> as hyper::service::Service<hyper::Request<Incoming>>>::Future;

    fn call(&self, mut req: hyper::Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(self.slot.clone());
        self.app.call(req)
    }
}

/// Serves `app` on `listener` within `budget` until `shutdown` fires, then lets open
/// connections finish (the caller bounds how long). `door` names the listener in logs; with
/// `tls` every connection is HTTPS (see [`handshake`]).
pub async fn serve_tcp(
    door: &'static str,
    listener: TcpListener,
    app: Router,
    budget: TcpBudget,
    tls: Option<ServerTls>,
    shutdown: CancellationToken,
) {
    let (listener, mut connections) =
        accept_until(door, listener, app, budget, tls, shutdown).await;
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// The accept loop of [`serve_tcp`]: serves `app` on `listener` until `shutdown` fires, then
/// gives the listener back with the connections still open, for the caller to let finish
/// (`serve_tcp`) or to close at once (a follower's front that becomes the leader, which serves
/// on the same listener next; see `front`).
pub async fn accept_until(
    door: &'static str,
    listener: TcpListener,
    app: Router,
    budget: TcpBudget,
    tls: Option<ServerTls>,
    shutdown: CancellationToken,
) -> (TcpListener, JoinSet<()>) {
    let limits = budget.limits;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_BUF)
        .keep_alive(true);
    let mut connections = JoinSet::new();
    let mut refused = Refused::default();
    while let Some(stream) = crate::accept::next(&shutdown, door, || listener.accept()).await {
        while connections.try_join_next().is_some() {}
        let Ok(permit) = budget.permits.clone().try_acquire_owned() else {
            refused.count(door, limits.max_connections);
            match budget.refusals.clone().try_acquire_owned() {
                Ok(slot) => {
                    connections.spawn(async move {
                        answer_and_close(stream, BUSY).await;
                        drop(slot);
                    });
                }
                Err(_) => {
                    let _ = stream.try_write(BUSY);
                }
            }
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(error = %e, "cannot set TCP_NODELAY");
        }
        watch_peer(&stream);
        let activity = Arc::new(Activity::new());
        let io = Watched {
            inner: stream,
            activity: activity.clone(),
        };
        let service = WithSlot {
            app: TowerToHyperService::new(app.clone()),
            slot: ConnSlot(Arc::new(permit)),
        };
        let (http, stop, tls) = (http.clone(), shutdown.clone(), tls.clone());
        let idle = limits.idle_timeout;
        connections.spawn(async move {
            let served = async {
                match tls {
                    None => serve_connection(&http, io, service, stop, door).await,
                    Some(tls) => {
                        if let Some(io) = handshake(&tls, io, limits.header_timeout, door).await {
                            serve_connection(&http, io, service, stop, door).await;
                        }
                    }
                }
            };
            tokio::select! {
                () = served => {},
                () = activity.idle_for(idle) => debug!(door, "idle TCP connection closed"),
            }
        });
    }
    (listener, connections)
}

/// One HTTP/1 connection over `io` (the socket, or TLS over it), which may be upgraded to the
/// sidecar IPC. When `stop` fires it finishes the request in hand and closes (hyper-util's
/// graceful watcher knows no upgradeable connection); an upgraded session is the broker's
/// shutdown to end.
async fn serve_connection<IO>(
    http: &hyper::server::conn::http1::Builder,
    io: IO,
    service: WithSlot,
    stop: CancellationToken,
    door: &'static str,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = http
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        debug!(error = %e, door, "TCP connection ended");
    }
}

/// The TLS handshake of a connection, within `within` of its accept, as a request's head must
/// be: a client that never finishes its handshake holds a connection permit no longer than one
/// that never finishes its head. A first byte that is not a TLS handshake record (`0x16`) is a
/// client speaking plain HTTP to the HTTPS port: it is answered a plain `400` that says so,
/// rather than left to time out on bytes it cannot read.
async fn handshake(
    tls: &ServerTls,
    io: Watched,
    within: Duration,
    door: &'static str,
) -> Option<tokio_rustls::server::TlsStream<Watched>> {
    let deadline = Instant::now() + within;
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, io.inner.peek(&mut first)).await {
        Ok(Ok(1..)) => {}
        Ok(_) => return None,
        Err(_) => {
            debug!(door, "no TLS handshake in time; connection closed");
            return None;
        }
    }
    if first[0] != TLS_HANDSHAKE {
        debug!(door, "plain HTTP on the HTTPS port; answered 400");
        answer_and_close(io.inner, NOT_TLS).await;
        return None;
    }
    match tokio::time::timeout_at(deadline, tls.acceptor().accept(io)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            debug!(error = %e, door, "TLS handshake failed");
            None
        }
        Err(_) => {
            debug!(
                door,
                "TLS handshake not finished in time; connection closed"
            );
            None
        }
    }
}

/// Writes `answer` and closes the connection cleanly: the answer, then a second of reading away
/// what the client sent, so the close is not a reset.
async fn answer_and_close(mut stream: TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.write_all(answer).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Counts connections refused past the cap, and says so at most once every ten seconds.
#[derive(Default)]
struct Refused {
    since: u64,
    last: Option<Instant>,
}

impl Refused {
    fn count(&mut self, door: &str, cap: usize) {
        self.since += 1;
        let now = Instant::now();
        if self
            .last
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10))
        {
            warn!(
                door,
                cap,
                refused = self.since,
                "TCP connection cap reached; refusing new connections with 503"
            );
            self.since = 0;
            self.last = Some(now);
        }
    }
}

/// When a connection last moved a byte, in milliseconds since it was accepted.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once nothing has moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let deadline = self.last() + limit;
            if deadline <= Instant::now() {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A socket that records when a byte last went through it.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canned_answers_say_their_length() {
        for answer in [BUSY, NOT_TLS] {
            let text = std::str::from_utf8(answer).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            let want = format!("content-length: {}", body.len());
            assert!(head.lines().any(|l| l == want), "{head}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_resolves_only_after_a_quiet_stretch() {
        let a = Activity::new();
        let limit = Duration::from_secs(60);
        tokio::time::advance(Duration::from_secs(50)).await;
        a.touch();
        let quiet = tokio::time::timeout(Duration::from_secs(59), a.idle_for(limit)).await;
        assert!(quiet.is_err(), "closed although a byte moved 59 s ago");
        let quiet = tokio::time::timeout(Duration::from_secs(2), a.idle_for(limit)).await;
        assert!(quiet.is_ok());
    }
}
