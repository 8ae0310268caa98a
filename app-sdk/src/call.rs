//! One call of a tool, as its handler sees it.
//!
//! A call carries its cancellation: when the broker ends it (the call timed out, the agent
//! cancelled or went away, the tool was withdrawn, the app lost its connection) or the app
//! shuts down, the token is cancelled at once. The handler may watch it (`cancelled().await`
//! in a `select!`) to stop early and clean up; see `App` for what happens to a handler that
//! does not.

use leo_protocol::content::AppError;
use leo_protocol::events::RequestEvent;
use leo_protocol::requests::PendingRequest;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A call to answer.
#[derive(Debug, Clone)]
pub struct Call {
    /// The request id (`r_…`).
    pub id: String,
    /// The agent that called.
    pub agent: String,
    /// The agent's session.
    pub session: String,
    /// The group the tool was registered in.
    pub group: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments, already checked by the broker against the tool's input_schema.
    pub arguments: Value,
    /// The call's timeout in seconds; `None` for a handoff (`timeout_s: 0`).
    pub timeout_s: Option<u64>,
    /// When the agent called (RFC 3339).
    pub created_at: String,
    pub(crate) cancel: CancellationToken,
}

impl Call {
    /// The arguments as `T`; on a mismatch, an `invalid_arguments` app error naming the JSON
    /// path, ready to return from a handler with `?`.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, AppError> {
        serde_path_to_error::deserialize(&self.arguments).map_err(|e| AppError {
            code: "invalid_arguments".into(),
            message: format!(
                "at {}: {}",
                leo_protocol::envelope::json_path(e.path()),
                e.inner()
            ),
        })
    }

    /// Resolves when the call is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// True once the call is cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The cancellation token itself, to hand to other tasks.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    pub(crate) fn new(request: RequestEvent, cancel: CancellationToken) -> Call {
        Call {
            id: request.id,
            agent: request.agent,
            session: request.session,
            group: request.group,
            tool: request.tool,
            arguments: request.arguments,
            timeout_s: request.timeout_s,
            created_at: request.created_at,
            cancel,
        }
    }
}

/// A pending request as `?pending=1` lists it, in the shape the stream announces it.
pub(crate) fn from_pending(p: PendingRequest) -> RequestEvent {
    RequestEvent {
        id: p.id,
        agent: p.agent,
        session: p.session,
        group: p.group,
        tool: p.tool,
        arguments: p.arguments,
        timeout_s: p.timeout_s,
        created_at: p.created_at,
        owner: p.owner,
    }
}
