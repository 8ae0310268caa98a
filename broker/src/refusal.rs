//! `Refusal`: a documented error code with a message for people, the one way the broker says no
//! to a request, a registration or a call. Over HTTP it is the response itself
//! (`http::reply` implements `IntoResponse`); over the IPC it becomes an `error` outcome.

use leo_protocol::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// A body the protocol's parser refused, with the JSON path in its message.
impl From<leo_protocol::envelope::BodyError> for Refusal {
    fn from(e: leo_protocol::envelope::BodyError) -> Refusal {
        Refusal::new(e.code, e.message)
    }
}
