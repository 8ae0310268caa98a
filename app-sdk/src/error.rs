//! What can go wrong between an app and the broker, and which of it is worth retrying.
//!
//! The SDK retries by itself whatever a broker restart or a slow start explains (no socket yet,
//! no token file yet, a connection that broke); it gives up, and `App::run` returns, only on
//! what retrying cannot fix: a wrong setting, a token the broker does not accept, or a tool the
//! broker refuses to register. Which refusals those are is `ErrorCode::APP_FATAL`, the table
//! every SDK shares.

use std::path::PathBuf;
use std::time::Duration;

use leo_protocol::ErrorCode;

/// An error of the SDK.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting is wrong (a URL, a tool definition, a duplicate name).
    #[error("{0}")]
    Config(String),
    /// The token file could not be read.
    #[error("cannot read the token file {}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The broker's socket or port did not accept a connection.
    #[error("cannot reach the broker at {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP connection failed mid-way.
    #[error("the connection to the broker failed")]
    Http(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The broker answered a request with a documented error.
    #[error("the broker refused: {message} ({code})")]
    Refused { code: ErrorCode, message: String },
    /// The broker refused to register a group (`invalid_tool`, `name_conflict`…).
    #[error("cannot register group {group:?}: {message} ({code})")]
    Registration {
        group: String,
        code: ErrorCode,
        message: String,
    },
    /// The broker sent something this SDK cannot read.
    #[error("the broker sent a malformed {what}: {message}")]
    Protocol { what: &'static str, message: String },
    /// The broker did not answer in time.
    #[error("the broker did not answer within {0:?}")]
    Timeout(Duration),
    /// An answer was larger than the client's bound (`http::Client::with_max_body`).
    #[error("the broker's answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The event stream ended.
    #[error("the event stream ended")]
    StreamEnded,
    /// `409 digest_mismatch`: a decision named a digest that is not the call's (it was shown
    /// from an older list); list the approvals again.
    #[error("the digest is not the call's: {0}")]
    DigestMismatch(String),
    /// `409 already_decided`: another approver decided the call first, or it ended.
    #[error("the call is no longer awaiting approval: {0}")]
    AlreadyDecided(String),
}

impl Error {
    /// True when retrying cannot help: `App::run` returns it instead of reconnecting.
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::Config(_) | Error::Registration { .. } => true,
            Error::Token { source, .. } => source.kind() != std::io::ErrorKind::NotFound,
            Error::Refused { code, .. } => code.is_fatal_to_app(),
            _ => false,
        }
    }
}

/// The SDK's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: ErrorCode) -> Error {
        Error::Refused {
            code,
            message: String::new(),
        }
    }

    /// The SDK gives up on exactly the refusals of the shared table (`ErrorCode::APP_FATAL`,
    /// which testdata/sdk/codes.json copies for the other SDKs).
    #[test]
    fn the_fatal_refusals_are_the_shared_tables() {
        for code in ErrorCode::APP_FATAL {
            assert!(refused(code).is_fatal(), "{code}");
        }
        for code in ErrorCode::LOST_RACE {
            assert!(!refused(code).is_fatal(), "{code}");
        }
        for code in [
            ErrorCode::UnknownClient,
            ErrorCode::Internal,
            ErrorCode::AlreadyClaimed,
        ] {
            assert!(!refused(code).is_fatal(), "{code}");
        }
    }
}
