//! A follower's links to the leader: every sidecar session that reaches a follower (on its
//! own socket, or an IPC upgrade over its TCP listener) rides one of a few multiplexed
//! connections ([`LINKS`]), instead of an upgraded TCP connection of its own, so that agents on
//! followers cost the leader a few connections and descriptors per follower, not one each.
//! Instances then add capacity: the leader holds each session's state, its followers hold the
//! agents' sockets.
//!
//! A link is an HTTP upgrade to the leader's `GET /api/v1/ipc` with `Upgrade: leo-mux` and the
//! cluster's key, marked as the follower's pipe (`gate::PIPE`), carrying yamux: each session
//! is one stream, opened by the follower, whose first line is a [`Preface`] saying whose
//! session it is. On the leader each stream is handed to the one door of sidecar sessions
//! (`ipc::Door::admit_via`) as a session piped from that follower, exactly as a per-session
//! pipe was: counted in `web.max_sessions`, its hello's token checked there, its end told apart
//! by the in-band `ipc::SIDECAR_LEFT` line (`front::pipe`); an upgrade's session is checked
//! first as the leader checks its own upgrades (`http::ipc::carried`) and answered.
//! A link that breaks ends every stream on it without that line: the leader detaches those
//! sessions as lost, as it does when a follower is killed, so riding through needs no new rule.
//!
//! Why yamux (a maintained crate, libp2p's) rather than frames of our own or HTTP/2: it gives
//! each stream its own flow-control window (256 KiB, credit-based), so one session whose
//! sidecar stops reading stalls only itself, and it hands out streams that read and write like
//! the sockets they replace, so a session stays one type whatever carries it. hyper's HTTP/2
//! would multiplex too, but an upgrade over HTTP/2 is an extended CONNECT that neither the
//! leader's accept loop nor the front speaks.
//!
//! A leader that does not know `leo-mux` (an older version, during a rolling upgrade) answers
//! the upgrade `400`; the follower then pipes each session on its own connection, as before
//! (`front::carry`).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

pub use leo_protocol::link::{Answer, Preface, UPGRADE};

/// Links per follower. More than one so that a link's single task and single TCP connection
/// (head-of-line blocking on a lost segment) do not bound every session of a follower; few,
/// because each costs the leader one of `web.max_connections`.
pub const LINKS: usize = 4;
/// Streams a link may carry at once. The leader's door admits at most `web.max_sessions`
/// sessions in all, whatever carries them; this only keeps yamux's own cap (512 by default)
/// from refusing before the door does.
const MAX_STREAMS: usize = 1 << 16;

/// One session's stream on a link, read and written as a socket.
pub type Carried = Compat<yamux::Stream>;

fn config() -> yamux::Config {
    let mut config = yamux::Config::default();
    // The peer holds the cluster's key (it is one of our instances): the connection's total
    // window needs no cap beyond each stream's auto-tuned one, and a cap would have to be at
    // least 256 KiB times `MAX_STREAMS`.
    config.set_max_connection_receive_window(None);
    config.set_max_num_streams(MAX_STREAMS);
    config
}

/// The leader's end of a link from follower `via`: each stream the follower opens is handed
/// to `carried` (which reads its [`Preface`] and admits it), until the link ends or `stop`.
/// `hold` (the link's place in `web.max_connections`) is kept until then.
pub async fn serve(
    io: impl AsyncRead + AsyncWrite + Send + Unpin + 'static,
    mut carried: impl FnMut(Carried),
    via: &str,
    hold: impl Send + 'static,
    stop: CancellationToken,
) {
    let mut link = yamux::Connection::new(io.compat(), config(), yamux::Mode::Server);
    info!(via = %via, "a follower's link is open");
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => break,
            next = poll_fn(|cx| link.poll_next_inbound(cx)) => next,
        };
        match next {
            Some(Ok(stream)) => carried(stream.compat()),
            Some(Err(e)) => {
                info!(via = %via, error = %e, "a follower's link ended");
                break;
            }
            None => break,
        }
    }
    drop(hold);
}

/// The longest [`Preface`] or [`Answer`] line.
const MAX_LINE: usize = 8 * 1024;

/// Reads one line (without its newline) of at most [`MAX_LINE`] bytes, a byte at a time so
/// that nothing past it is taken from the stream (the session's own frames follow).
pub async fn read_line(stream: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut line = Vec::with_capacity(128);
    loop {
        match stream.read_u8().await? {
            b'\n' => return Ok(line),
            _ if line.len() == MAX_LINE => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a link's preface line is too long",
                ));
            }
            b => line.push(b),
        }
    }
}

/// Writes `value` as one JSON line.
pub async fn write_line(
    stream: &mut (impl AsyncWrite + Unpin),
    value: &impl Serialize,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    stream.write_all(&line).await?;
    stream.flush().await
}

/// Why a stream could not be had on a link.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the link to the leader ended")]
    Ended,
    #[error("the link to the leader refused a stream")]
    Refused(#[source] yamux::ConnectionError),
}

type Opener = oneshot::Sender<Result<yamux::Stream, yamux::ConnectionError>>;

/// A follower's end of one link: asks its driver for new streams.
struct Link {
    opens: mpsc::UnboundedSender<Opener>,
}

impl Link {
    /// A link over `io` (the upgraded connection to the leader), driven until it ends, every
    /// [`Link`] of it is dropped, or `stop`.
    fn start(
        io: impl AsyncRead + AsyncWrite + Send + Unpin + 'static,
        stop: CancellationToken,
    ) -> Link {
        let link = yamux::Connection::new(io.compat(), config(), yamux::Mode::Client);
        let (opens, asked) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                ended = drive(link, asked) => {
                    if let Some(e) = ended {
                        info!(error = %e, "the link to the leader ended");
                    }
                }
            }
        });
        Link { opens }
    }

    async fn open(&self) -> Result<Carried, LinkError> {
        let (tx, rx) = oneshot::channel();
        self.opens.send(tx).map_err(|_| LinkError::Ended)?;
        match rx.await {
            Ok(Ok(stream)) => Ok(stream.compat()),
            Ok(Err(e)) => Err(LinkError::Refused(e)),
            Err(_) => Err(LinkError::Ended),
        }
    }
}

/// Drives a follower's link: it reads and writes every stream's frames, and opens the streams
/// asked for, in order. `None` when the leader closed it or every asker is gone.
async fn drive<T>(
    mut link: yamux::Connection<T>,
    mut asked: mpsc::UnboundedReceiver<Opener>,
) -> Option<yamux::ConnectionError>
where
    T: futures_util::AsyncRead + futures_util::AsyncWrite + Unpin,
{
    let mut waiting: VecDeque<Opener> = VecDeque::new();
    poll_fn(|cx| {
        loop {
            loop {
                match link.poll_next_inbound(cx) {
                    // The leader opens no stream; one it did is dropped, which closes it.
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(e)),
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => break,
                }
            }
            loop {
                match asked.poll_recv(cx) {
                    Poll::Ready(Some(opener)) => waiting.push_back(opener),
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => break,
                }
            }
            let mut opened = false;
            while !waiting.is_empty() {
                match link.poll_new_outbound(cx) {
                    Poll::Ready(Ok(stream)) => {
                        opened = true;
                        if let Some(opener) = waiting.pop_front() {
                            // An asker that gave up drops the stream, which closes it.
                            let _ = opener.send(Ok(stream));
                        }
                    }
                    Poll::Ready(Err(e)) => {
                        debug!(error = %e, "a stream could not be opened");
                        return Poll::Ready(Some(e));
                    }
                    Poll::Pending => break,
                }
            }
            // A stream just opened is read by the connection only once it is polled again:
            // until then nothing would wake this task when the stream is written to.
            if !opened {
                return Poll::Pending;
            }
        }
    })
    .await
}

/// A follower's links to the current leader, opened as sessions come (`front`), each session
/// on the next link in turn.
#[derive(Default)]
pub struct Links {
    slots: [tokio::sync::Mutex<Option<(usize, Link)>>; LINKS],
    next: AtomicUsize,
    /// Counts the leaders followed: a link opened for an earlier one is not used again.
    epoch: AtomicUsize,
    /// The leader answered the link's upgrade with a refusal: it predates links, and each
    /// session is piped on its own connection until the leader changes.
    legacy: AtomicBool,
    /// Sessions being carried to the leader now (`Carrying`), for `/metrics`.
    carried: std::sync::Arc<AtomicUsize>,
}

/// One session carried to the leader, counted while it lives.
pub struct Carrying(std::sync::Arc<AtomicUsize>);

impl Drop for Carrying {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Links {
    /// Which leader the links are for: read it *before* reading the leader to connect to, so
    /// that a link opened to a leader that changed meanwhile is tagged as the one before.
    pub fn epoch(&self) -> usize {
        self.epoch.load(Ordering::Relaxed)
    }

    /// A stream for one session, on the next link; that link is opened first (with `connect`,
    /// the upgraded connection to the leader `epoch` names, see [`Links::epoch`]) if it is not
    /// open, has ended or was opened for another leader. A link found ended is opened again
    /// once.
    pub async fn open<F, Fut, Io, E>(
        &self,
        epoch: usize,
        stop: &CancellationToken,
        connect: F,
    ) -> Result<Carried, Opened<E>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Io, E>>,
        Io: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % LINKS];
        let mut slot = slot.lock().await;
        let current = self.epoch();
        for _ in 0..2 {
            let link = match slot.as_ref() {
                Some((e, link)) if *e == current && !link.opens.is_closed() => link,
                _ => {
                    let io = connect().await.map_err(Opened::Connect)?;
                    &slot.insert((epoch, Link::start(io, stop.clone()))).1
                }
            };
            match link.open().await {
                Ok(stream) => return Ok(stream),
                Err(LinkError::Ended) => *slot = None,
                Err(e) => return Err(Opened::Link(e)),
            }
        }
        Err(Opened::Link(LinkError::Ended))
    }

    /// Counts one session carried to the leader until the guard is dropped.
    pub fn carrying(&self) -> Carrying {
        self.carried.fetch_add(1, Ordering::Relaxed);
        Carrying(self.carried.clone())
    }

    /// Links open to the current leader, and sessions carried to it, for `/metrics`.
    pub fn counts(&self) -> (usize, usize) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let open = self
            .slots
            .iter()
            .filter(|slot| {
                slot.try_lock().is_ok_and(|slot| {
                    slot.as_ref()
                        .is_some_and(|(e, link)| *e == epoch && !link.opens.is_closed())
                })
            })
            .count();
        (open, self.carried.load(Ordering::Relaxed))
    }

    /// Whether the leader predates links (see the module's doc).
    pub fn legacy(&self) -> bool {
        self.legacy.load(Ordering::Relaxed)
    }

    pub fn set_legacy(&self) {
        if !self.legacy.swap(true, Ordering::Relaxed) {
            info!(
                "the leader does not take links: each sidecar session is piped on its own connection"
            );
        }
    }

    /// Drops every link (the leader changed): the sessions on them end as lost. A link being
    /// opened meanwhile is dropped by the next session that would use it.
    pub fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
        for slot in &self.slots {
            if let Ok(mut slot) = slot.try_lock() {
                *slot = None;
            }
        }
        self.legacy.store(false, Ordering::Relaxed);
    }
}

/// Why [`Links::open`] gave no stream: the link could not be opened, or gave no stream.
#[derive(Debug, thiserror::Error)]
pub enum Opened<E> {
    #[error("opening a link to the leader")]
    Connect(#[source] E),
    #[error(transparent)]
    Link(LinkError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A leader's end for the test: a stream that starts with `f` is flooded with 4 MiB (more
    /// than a stream's window), one that starts with `e` is echoed.
    fn far_end(io: tokio::io::DuplexStream) {
        let mut link = yamux::Connection::new(io.compat(), config(), yamux::Mode::Server);
        tokio::spawn(async move {
            while let Some(Ok(stream)) = poll_fn(|cx| link.poll_next_inbound(cx)).await {
                tokio::spawn(async move {
                    let (mut r, mut w) = tokio::io::split(stream.compat());
                    let mut kind = [0u8; 1];
                    r.read_exact(&mut kind).await.unwrap();
                    if kind[0] == b'f' {
                        let _ = w.write_all(&vec![b'x'; 4 << 20]).await;
                    } else {
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    }
                });
            }
        });
    }

    #[tokio::test]
    async fn a_session_that_stops_reading_stalls_only_itself() {
        let (near, far) = tokio::io::duplex(64 * 1024);
        far_end(far);
        let link = Link::start(near, CancellationToken::new());
        let mut stalled = link.open().await.unwrap();
        stalled.write_all(b"f").await.unwrap();
        stalled.flush().await.unwrap();
        // Its window fills; the link goes on carrying the others, opened before and after.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        for n in 0..3 {
            let mut live = link.open().await.unwrap();
            let sent = format!("ehello {n}");
            live.write_all(sent.as_bytes()).await.unwrap();
            live.flush().await.unwrap();
            let mut got = vec![0u8; sent.len() - 1];
            tokio::time::timeout(std::time::Duration::from_secs(2), live.read_exact(&mut got))
                .await
                .expect("a live stream stalled behind one not read")
                .unwrap();
            assert_eq!(got, &sent.as_bytes()[1..]);
        }
        // The stalled one still gets its bytes once it reads.
        let mut some = vec![0u8; 1 << 20];
        stalled.read_exact(&mut some).await.unwrap();
    }

    #[tokio::test]
    async fn links_open_lazily_and_a_new_leader_gets_new_ones() {
        let links = Links::default();
        let stop = CancellationToken::new();
        let opened = std::sync::Arc::new(AtomicUsize::new(0));
        let connect = || {
            let opened = opened.clone();
            async move {
                opened.fetch_add(1, Ordering::Relaxed);
                let (near, far) = tokio::io::duplex(64 * 1024);
                far_end(far);
                Ok::<_, std::io::Error>(near)
            }
        };
        for _ in 0..(3 * LINKS) {
            links.open(links.epoch(), &stop, connect).await.unwrap();
        }
        assert_eq!(opened.load(Ordering::Relaxed), LINKS);
        let before = links.epoch();
        links.clear();
        let count = || opened.load(Ordering::Relaxed);
        links.open(links.epoch(), &stop, connect).await.unwrap();
        assert_eq!(
            count(),
            LINKS + 1,
            "one link for the new leader, the others at their use"
        );
        // Sessions that read the leader before the change open links tagged as the old leader's
        // (three: the fourth slot already has the new leader's)...
        for _ in 0..LINKS {
            links.open(before, &stop, connect).await.unwrap();
        }
        assert_eq!(count(), LINKS + 4);
        // ...which the next sessions replace.
        for _ in 0..LINKS {
            links.open(links.epoch(), &stop, connect).await.unwrap();
        }
        assert_eq!(count(), LINKS + 7);
    }
}
