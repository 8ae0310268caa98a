//! stdin and stdout for the MCP transport, on the IO reactor wherever the streams allow it.
//!
//! Tokio's `stdin()`/`stdout()` run every read and write on the blocking thread pool: each MCP
//! message costs a hand-off to another thread and back, which was the largest share of the
//! sidecar's CPU per call. Harnesses launch MCP servers with pipes (Rust and Python clients) or
//! with unix socket pairs (Node's libuv), and both can be driven by epoll directly:
//!
//! - pipes are rmcp's `transport::stdio_pipes()`: each FIFO is reopened through
//!   `/proc/self/fd/N` with `O_NONBLOCK` on an open file description of its own, and anything
//!   that is not a pair of FIFOs (a terminal, a file, `/dev/null`) keeps Tokio's blocking
//!   handles;
//! - a socket cannot be reopened that way, so it is ours: duplicated and set non-blocking. The
//!   flag is then shared with our own fd 0/1, which nothing else in this process reads or
//!   writes (stdout is the protocol, logs go to stderr), and with nothing outside it: the
//!   harness holds the other end of the pair, a different description.
//!
//! `Input` also says when stdin has closed (`Input::closed`). The harness closing stdin means
//! the agent is gone; rmcp then drains in-flight responses for five seconds before it returns,
//! and the sidecar must not keep the agent's calls parked at the apps all that time.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::transport::io::{StdioReader, StdioWriter, stdio_pipes};
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
    Stdio(StdioReader),
    Socket(tokio::net::UnixStream),
}

/// Standard output as the transport writes it.
pub struct Output(OutputImp);

enum OutputImp {
    Stdio(StdioWriter),
    Socket(tokio::net::UnixStream),
}

fn is_socket(fd: BorrowedFd<'_>) -> bool {
    fd.try_clone_to_owned()
        .map(File::from)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.file_type().is_socket())
}

/// `fd` as a non-blocking socket, when it is one.
fn socket(fd: BorrowedFd<'_>, name: &str) -> Option<tokio::net::UnixStream> {
    if !is_socket(fd) {
        return None;
    }
    let stream = fd
        .try_clone_to_owned()
        .map(std::os::unix::net::UnixStream::from)
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
        .and_then(tokio::net::UnixStream::from_std);
    match stream {
        Ok(stream) => Some(stream),
        Err(e) => {
            debug!(error = %e, "{name} is a socket but stays with rmcp's stdio");
            None
        }
    }
}

/// The sidecar's stdin and stdout. Must be called inside the Tokio runtime.
pub fn streams() -> (Input, Output) {
    let stdin = socket(io::stdin().as_fd(), "stdin");
    let stdout = socket(io::stdout().as_fd(), "stdout");
    let (input, output) = match (stdin, stdout) {
        (Some(r), Some(w)) => (InputImp::Socket(r), OutputImp::Socket(w)),
        (r, w) => {
            let (reader, writer) = stdio_pipes();
            (
                r.map_or(InputImp::Stdio(reader), InputImp::Socket),
                w.map_or(OutputImp::Stdio(writer), OutputImp::Socket),
            )
        }
    };
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
            InputImp::Stdio(_) => "stdio",
            InputImp::Socket(_) => "socket",
        }
    }
}

impl OutputImp {
    fn name(&self) -> &'static str {
        match self {
            OutputImp::Stdio(_) => "stdio",
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
            InputImp::Stdio(r) => Pin::new(r).poll_read(cx, buf),
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
            OutputImp::Stdio(w) => Pin::new(w).poll_write(cx, buf),
            OutputImp::Socket(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            OutputImp::Stdio(w) => Pin::new(w).poll_flush(cx),
            OutputImp::Socket(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            OutputImp::Stdio(w) => Pin::new(w).poll_shutdown(cx),
            OutputImp::Socket(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
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
    fn sockets_are_told_from_pipes_and_files() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(is_socket(a.as_fd()));
        let (r, w) = std::io::pipe().unwrap();
        assert!(!is_socket(r.as_fd()));
        assert!(!is_socket(w.as_fd()));
        let file = tempfile::tempfile().unwrap();
        assert!(!is_socket(file.as_fd()));
    }
}
