//! stdin and stdout for the MCP transport, on the IO reactor wherever the streams allow it.
//!
//! Tokio's `stdin()`/`stdout()` run every read and write on the blocking thread pool: each MCP
//! message costs a hand-off to another thread and back, which was the largest share of the
//! sidecar's CPU per call. Harnesses launch MCP servers with pipes (Rust and Python clients) or
//! with unix socket pairs (Node's libuv), and both can be driven by epoll directly:
//!
//! - a FIFO is reopened through `/proc/self/fd/N` with `O_NONBLOCK`, which gives it an open file
//!   description of its own, so the flag does not leak into fd 0/1 or anything sharing them
//!   (the same technique as rmcp's `stdio_pipes`);
//! - a socket cannot be reopened that way, so it is duplicated and set non-blocking. The flag is
//!   then shared with our own fd 0/1, which nothing else in this process reads or writes (stdout
//!   is the protocol, logs go to stderr), and with nothing outside it: the harness holds the
//!   other end of the pair, a different description;
//! - anything else (a terminal, a file, `/dev/null`) keeps Tokio's blocking handles.
//!
//! `Input` also says when stdin has closed (`Input::closed`). The harness closing stdin means
//! the agent is gone; rmcp then drains in-flight responses for five seconds before it returns,
//! and the sidecar must not keep the agent's calls parked at the apps all that time.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tracing::debug;

/// Standard input as the transport reads it.
pub struct Input {
    imp: InputImp,
    /// Set once a read hits the end of stdin or fails.
    closed: watch::Sender<bool>,
}

impl Input {
    /// A receiver that turns `true` when stdin has ended (or failed), the moment the transport
    /// reads that, before rmcp acts on it.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }
}

enum InputImp {
    Blocking(tokio::io::Stdin),
    Pipe(tokio::net::unix::pipe::Receiver),
    Socket(tokio::net::UnixStream),
}

/// Standard output as the transport writes it.
pub struct Output(OutputImp);

enum OutputImp {
    Blocking(tokio::io::Stdout),
    Pipe(tokio::net::unix::pipe::Sender),
    Socket(tokio::net::UnixStream),
}

/// What kind of stream a standard descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fifo,
    Socket,
    Other,
}

fn kind_of(fd: std::os::fd::BorrowedFd<'_>) -> Kind {
    let Ok(owned) = fd.try_clone_to_owned() else {
        return Kind::Other;
    };
    match File::from(owned).metadata().map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => Kind::Fifo,
        Ok(t) if t.is_socket() => Kind::Socket,
        _ => Kind::Other,
    }
}

/// Reopens `/proc/self/fd/N` non-blocking, on a new open file description.
fn reopen_fifo(fd: std::os::fd::BorrowedFd<'_>, write: bool) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let file = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    Ok(file.into())
}

fn socket(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd.try_clone_to_owned()?);
    stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(stream)
}

/// The sidecar's stdin and stdout. Must be called inside the Tokio runtime.
pub fn streams() -> (Input, Output) {
    let stdin = io::stdin();
    let input = match kind_of(stdin.as_fd()) {
        Kind::Fifo => reopen_fifo(stdin.as_fd(), false)
            .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd)
            .map(InputImp::Pipe),
        Kind::Socket => socket(stdin.as_fd()).map(InputImp::Socket),
        Kind::Other => Ok(InputImp::Blocking(tokio::io::stdin())),
    }
    .unwrap_or_else(|e| {
        debug!(error = %e, "stdin stays on the blocking pool");
        InputImp::Blocking(tokio::io::stdin())
    });
    let stdout = io::stdout();
    let output = match kind_of(stdout.as_fd()) {
        Kind::Fifo => reopen_fifo(stdout.as_fd(), true)
            .and_then(tokio::net::unix::pipe::Sender::from_owned_fd)
            .map(OutputImp::Pipe),
        Kind::Socket => socket(stdout.as_fd()).map(OutputImp::Socket),
        Kind::Other => Ok(OutputImp::Blocking(tokio::io::stdout())),
    }
    .unwrap_or_else(|e| {
        debug!(error = %e, "stdout stays on the blocking pool");
        OutputImp::Blocking(tokio::io::stdout())
    });
    debug!(
        stdin = input.name(),
        stdout = output.name(),
        "stdio transport"
    );
    let input = Input {
        imp: input,
        closed: watch::channel(false).0,
    };
    (input, Output(output))
}

impl InputImp {
    fn name(&self) -> &'static str {
        match self {
            InputImp::Blocking(_) => "blocking",
            InputImp::Pipe(_) => "pipe",
            InputImp::Socket(_) => "socket",
        }
    }
}

impl OutputImp {
    fn name(&self) -> &'static str {
        match self {
            OutputImp::Blocking(_) => "blocking",
            OutputImp::Pipe(_) => "pipe",
            OutputImp::Socket(_) => "socket",
        }
    }
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let poll = match &mut me.imp {
            InputImp::Blocking(r) => Pin::new(r).poll_read(cx, buf),
            InputImp::Pipe(r) => Pin::new(r).poll_read(cx, buf),
            InputImp::Socket(r) => Pin::new(r).poll_read(cx, buf),
        };
        // A read that had room and got nothing is the end of the stream.
        let ended = match &poll {
            Poll::Ready(Ok(())) => room && buf.filled().len() == before,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            me.closed.send_if_modified(|c| !std::mem::replace(c, true));
        }
        poll
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            OutputImp::Blocking(w) => Pin::new(w).poll_write(cx, buf),
            OutputImp::Pipe(w) => Pin::new(w).poll_write(cx, buf),
            OutputImp::Socket(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            OutputImp::Blocking(w) => Pin::new(w).poll_flush(cx),
            OutputImp::Pipe(w) => Pin::new(w).poll_flush(cx),
            OutputImp::Socket(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            OutputImp::Blocking(w) => Pin::new(w).poll_shutdown(cx),
            OutputImp::Pipe(w) => Pin::new(w).poll_shutdown(cx),
            OutputImp::Socket(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn the_end_of_stdin_is_reported_once_read() {
        use tokio::io::AsyncReadExt;
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let mut input = Input {
            imp: InputImp::Socket(a),
            closed: watch::channel(false).0,
        };
        let closed = input.closed();
        let mut b = b;
        tokio::io::AsyncWriteExt::write_all(&mut b, b"x")
            .await
            .unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(input.read(&mut buf).await.unwrap(), 1);
        assert!(!*closed.borrow(), "data is not the end");
        drop(b);
        assert_eq!(input.read(&mut buf).await.unwrap(), 0);
        assert!(*closed.borrow());
    }

    #[test]
    fn kinds_are_told_apart() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(kind_of(a.as_fd()), Kind::Socket);
        let (r, w) = std::io::pipe().unwrap();
        assert_eq!(kind_of(r.as_fd()), Kind::Fifo);
        assert_eq!(kind_of(w.as_fd()), Kind::Fifo);
        let file = tempfile::tempfile().unwrap();
        assert_eq!(kind_of(file.as_fd()), Kind::Other);
    }
}
