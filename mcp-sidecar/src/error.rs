//! The sidecar's own failures.
//!
//! Almost nothing is fatal to `leo-mcp`: a broker that is down or refuses the session is a state
//! the sidecar lives with and reports on each call. What is left are start-up mistakes (an
//! invalid agent name, no home directory) and the MCP transport failing, which ends the process.

use std::path::PathBuf;

/// Everything that can stop `leo-mcp`, or one IPC connection.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// `--agent` / `LEO_AGENT` is missing or malformed.
    #[error("invalid agent name {name:?}: must be 1 to 64 of [A-Za-z0-9_.-]")]
    InvalidAgent { name: String },

    /// A file under `$LEO_HOME` could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The IPC socket failed (connect, read or write).
    #[error("sidecar IPC: {context}")]
    Ipc {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// The broker sent a line that is not a frame this sidecar understands.
    #[error("sidecar IPC: bad frame from the broker: {message}")]
    BadFrame { message: String },

    /// The broker refused the session (`error` frame in answer to `hello`).
    #[error("the broker refused the session: {code}: {message}")]
    Refused { code: String, message: String },

    /// `--url`: the broker's listener was reached but the connection failed before the IPC
    /// began (a name that does not resolve, a refused certificate, an answer that is not HTTP).
    #[error("cannot reach the broker at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: std::io::Error,
    },

    /// `--url` is not a URL leo-mcp can dial.
    #[error("invalid --url {url:?}: {why}")]
    InvalidUrl { url: String, why: String },

    /// `--url` with no token to send.
    #[error(
        "with --url, give the agent's token in LEO_AGENT_TOKEN or --token-file (LEO_AGENT_TOKEN_FILE)"
    )]
    NoToken,

    /// `LEO_CA_FILE` cannot be used.
    #[error("cannot use the CA file")]
    Tls(#[source] leo_protocol::tls::TlsError),

    /// The broker's socket is absent or nobody listens on it.
    #[error("broker not running")]
    NotRunning,

    /// rmcp could not start the MCP service on stdio.
    #[error("MCP service failed to start")]
    Serve(#[source] Box<dyn std::error::Error + Send + Sync>),

    /// The MCP service ended with an error.
    #[error("MCP service failed")]
    Join(#[source] tokio::task::JoinError),
}

pub type Result<T, E = SidecarError> = std::result::Result<T, E>;
