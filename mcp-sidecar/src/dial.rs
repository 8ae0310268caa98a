//! How this sidecar reaches the broker: the one place that opens the byte stream the IPC runs
//! on. Today that is `run/sidecar.sock` on this host; other ways in (a broker on another host
//! over its TCP listener, an in-process pipe) are variants here, so that `reconnect` keeps one
//! connection loop, one hello and one resume whatever carries the frames.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Result, SidecarError};
use crate::frames::{self, Reader, Writer};

/// Where the broker is.
#[derive(Debug, Clone)]
pub enum Dial {
    /// The broker's sidecar socket on this host (`$LEO_HOME/run/sidecar.sock`).
    Socket(PathBuf),
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
    /// Opens a new stream to the broker. A broker that is not there (no socket, nobody
    /// listening) is `NotRunning`, which `reconnect` waits out quietly.
    pub async fn open(&self) -> Result<(Reader, Writer)> {
        match self {
            Dial::InProcess(pipe) => Ok(frames::split((pipe.0)())),
            Dial::Socket(path) => match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => Ok(frames::split(stream)),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    Err(SidecarError::NotRunning)
                }
                Err(source) => Err(SidecarError::Ipc {
                    context: "connect",
                    source,
                }),
            },
        }
    }
}
