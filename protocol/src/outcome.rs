//! How a call ended: one type for the broker's live state and its store, the history, the
//! metrics' and the traces' `outcome` label, and the wire (`EndedRequest.outcome`).
//!
//! Every spelling is the serde name (`result`, `error`, `timeout`, `cancelled`, `no_client`),
//! and a text this type does not know is an error where it is read, never a guess. The one
//! exception is written down: the live-state store of earlier versions spelled an app's error
//! `app_error`, and `parse_stored` reads that spelling too, so their files still open.

use serde::{Deserialize, Serialize};

use crate::ErrorCode;
use crate::events::CancelReason;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The app posted content (or the console answered).
    Result,
    /// The app posted an error; `error_code` is its code.
    Error,
    /// The call outlived its tool's `timeout_s`.
    Timeout,
    /// The call was cancelled; `reason` says by whom or why.
    Cancelled,
    /// The app that claimed the call went away.
    NoClient,
}

/// A text that names no outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an outcome (result, error, timeout, cancelled, no_client)")]
pub struct UnknownOutcome(pub String);

impl CallOutcome {
    pub const ALL: [CallOutcome; 5] = [
        CallOutcome::Result,
        CallOutcome::Error,
        CallOutcome::Timeout,
        CallOutcome::Cancelled,
        CallOutcome::NoClient,
    ];

    /// The serde name.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Result => "result",
            CallOutcome::Error => "error",
            CallOutcome::Timeout => "timeout",
            CallOutcome::Cancelled => "cancelled",
            CallOutcome::NoClient => "no_client",
        }
    }

    /// Reads a serde name.
    pub fn parse(text: &str) -> Result<CallOutcome, UnknownOutcome> {
        CallOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == text)
            .ok_or_else(|| UnknownOutcome(text.to_owned()))
    }

    /// Reads what the live-state store holds: a serde name, or `app_error`, which earlier
    /// versions wrote for `error`.
    pub fn parse_stored(text: &str) -> Result<CallOutcome, UnknownOutcome> {
        match text {
            "app_error" => Ok(CallOutcome::Error),
            _ => CallOutcome::parse(text),
        }
    }

    /// How the broker's ending for `reason` counts.
    pub fn of_reason(reason: CancelReason) -> CallOutcome {
        match reason {
            CancelReason::Timeout | CancelReason::ApprovalTimeout => CallOutcome::Timeout,
            CancelReason::ClientGone => CallOutcome::NoClient,
            CancelReason::CancelledByAgent
            | CancelReason::AgentGone
            | CancelReason::ToolWithdrawn
            | CancelReason::Shutdown
            | CancelReason::CancelledByOperator
            | CancelReason::Denied => CallOutcome::Cancelled,
        }
    }

    /// The error code the caller is answered with when the broker ended the call; `None` for
    /// an app's result or error.
    pub fn failure_code(self) -> Option<ErrorCode> {
        match self {
            CallOutcome::Result | CallOutcome::Error => None,
            CallOutcome::Timeout => Some(ErrorCode::Timeout),
            CallOutcome::Cancelled => Some(ErrorCode::Cancelled),
            CallOutcome::NoClient => Some(ErrorCode::NoClient),
        }
    }

    /// For "request r_1 already ended …".
    pub fn describe(self) -> &'static str {
        match self {
            CallOutcome::Result => "with a result",
            CallOutcome::Error => "with an app error",
            CallOutcome::Timeout => "by timeout",
            CallOutcome::Cancelled => "by cancellation",
            CallOutcome::NoClient => "without a client",
        }
    }
}

impl CancelReason {
    /// The error code a call the broker ended for this reason is answered with: `denied` and
    /// `approval_timeout` for an approval's ending, else the code of its outcome (`timeout`,
    /// `no_client`, else `cancelled`).
    pub fn code(self) -> ErrorCode {
        match self {
            CancelReason::Denied => return ErrorCode::Denied,
            CancelReason::ApprovalTimeout => return ErrorCode::ApprovalTimeout,
            _ => {}
        }
        match CallOutcome::of_reason(self) {
            CallOutcome::Timeout => ErrorCode::Timeout,
            CallOutcome::NoClient => ErrorCode::NoClient,
            CallOutcome::Result | CallOutcome::Error | CallOutcome::Cancelled => {
                ErrorCode::Cancelled
            }
        }
    }
}

impl std::fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CallOutcome {
    type Err = UnknownOutcome;

    fn from_str(text: &str) -> Result<CallOutcome, UnknownOutcome> {
        CallOutcome::parse(text)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_outcome_reads_back_as_its_serde_name() {
        for o in CallOutcome::ALL {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(serde_json::from_str::<CallOutcome>(&json).unwrap(), o);
            assert_eq!(CallOutcome::parse(o.as_str()), Ok(o));
            assert_eq!(CallOutcome::parse_stored(o.as_str()), Ok(o));
        }
    }

    #[test]
    fn the_old_stored_spelling_reads_and_an_unknown_text_is_an_error() {
        assert_eq!(
            CallOutcome::parse_stored("app_error"),
            Ok(CallOutcome::Error)
        );
        // Only where stored state is read: the wire and the query never spelled it so.
        assert!(CallOutcome::parse("app_error").is_err());
        assert!(serde_json::from_str::<CallOutcome>(r#""app_error""#).is_err());
        for bad in ["", "internal", "Result", "errors"] {
            assert_eq!(
                CallOutcome::parse_stored(bad),
                Err(UnknownOutcome(bad.to_owned()))
            );
        }
    }

    #[test]
    fn the_broker_s_endings_answer_with_the_code_of_their_outcome() {
        assert_eq!(
            CallOutcome::of_reason(CancelReason::Timeout).failure_code(),
            Some(ErrorCode::Timeout)
        );
        assert_eq!(
            CallOutcome::of_reason(CancelReason::ClientGone).failure_code(),
            Some(ErrorCode::NoClient)
        );
        assert_eq!(
            CallOutcome::of_reason(CancelReason::Shutdown).failure_code(),
            Some(ErrorCode::Cancelled)
        );
        assert_eq!(CallOutcome::Error.failure_code(), None);
        for reason in [
            CancelReason::Timeout,
            CancelReason::CancelledByAgent,
            CancelReason::AgentGone,
            CancelReason::ToolWithdrawn,
            CancelReason::ClientGone,
            CancelReason::Shutdown,
            CancelReason::CancelledByOperator,
        ] {
            assert_eq!(
                Some(reason.code()),
                CallOutcome::of_reason(reason).failure_code(),
                "{reason:?}"
            );
        }
    }
}
