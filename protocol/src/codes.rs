//! Every error code a Leo part can answer with, and the HTTP status each one maps to.
//!
//! Codes are the stable part of an error: apps and agents branch on them, while messages are for
//! people. Keeping the code and its status in one table means a route can never answer a code
//! with a status another route uses for something else.
//!
//! How an app reads a refusal is one table too (`APP_FATAL`, `LOST_RACE`, `REGISTER_AGAIN`,
//! `RESUME_REFUSED`): the Rust, Python and TypeScript SDKs each keep a copy in their own
//! language, and each SDK's tests compare that copy with `testdata/sdk/codes.json`, which
//! `protocol`'s tests check against this table. A copy that drifts fails its suite instead of
//! making one SDK give up where another retries.

use serde::{Deserialize, Serialize};

/// A documented error code. The serialized form is the snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body is not valid JSON, a field has the wrong type, or a required field is missing.
    InvalidParameter,
    /// The body has a field the route does not know.
    UnknownParameter,
    /// The body is larger than the configured limit.
    BodyTooLarge,
    /// No or an unknown bearer token.
    Unauthorized,
    /// The token is valid but may not use this route.
    Forbidden,
    /// No such route.
    NotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// A tool definition breaks a registration rule.
    InvalidTool,
    /// More than 64 tools in one group or in the whole broker.
    TooManyTools,
    /// A tool name is already used by another group.
    NameConflict,
    /// `client_id` does not name a connected provider stream.
    UnknownClient,
    /// The request id was never seen, or has been forgotten.
    UnknownRequest,
    /// Another client owns this agent's group.
    OwnedByOther,
    /// The request was already claimed.
    AlreadyClaimed,
    /// The request has already ended.
    AlreadySettled,
    /// Only the claimant may post the result.
    NotClaimant,
    /// The claiming client does not serve the tool's group.
    NotProvider,
    /// A result's content is larger than 1 MiB.
    ResultTooLarge,
    /// A result body is not a valid result (content blocks, error object).
    InvalidResult,
    /// A call's arguments do not match the tool's input_schema.
    InvalidArguments,
    /// No connected app serves the tool, or the claimant went away.
    NoClient,
    /// The call outlived its tool's `timeout_s`.
    Timeout,
    /// The call was cancelled (agent stopped, harness cancelled, tool withdrawn, shutdown).
    Cancelled,
    /// The tool is denied to this agent by `deny_tools`.
    Denied,
    /// The message target has never connected to this broker.
    UnknownAgent,
    /// A message text is longer than 16 KiB.
    TextTooLarge,
    /// The sidecar spoke a frame the broker cannot accept.
    InvalidFrame,
    /// Something failed inside the broker; the message does not leak details.
    Internal,
    /// The agent's harness cannot ask its user (it did not declare MCP elicitation).
    InputUnsupported,
    /// The broker's database (PostgreSQL) cannot be reached now, so it accepts no work it
    /// could not keep; it resumes by itself when the database is back.
    StoreUnavailable,
    /// A call that needed a person's approval got none within `approvals.expire_s`.
    ApprovalTimeout,
    /// An approval's digest is not the digest of the call it names.
    DigestMismatch,
    /// The call was approved or denied already (or is not awaiting approval).
    AlreadyDecided,
}

impl ErrorCode {
    /// The wire name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidParameter => "invalid_parameter",
            ErrorCode::UnknownParameter => "unknown_parameter",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::InvalidTool => "invalid_tool",
            ErrorCode::TooManyTools => "too_many_tools",
            ErrorCode::NameConflict => "name_conflict",
            ErrorCode::UnknownClient => "unknown_client",
            ErrorCode::UnknownRequest => "unknown_request",
            ErrorCode::OwnedByOther => "owned_by_other",
            ErrorCode::AlreadyClaimed => "already_claimed",
            ErrorCode::AlreadySettled => "already_settled",
            ErrorCode::NotClaimant => "not_claimant",
            ErrorCode::NotProvider => "not_provider",
            ErrorCode::ResultTooLarge => "result_too_large",
            ErrorCode::InvalidResult => "invalid_result",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::NoClient => "no_client",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Denied => "denied",
            ErrorCode::UnknownAgent => "unknown_agent",
            ErrorCode::TextTooLarge => "text_too_large",
            ErrorCode::InvalidFrame => "invalid_frame",
            ErrorCode::Internal => "internal",
            ErrorCode::InputUnsupported => "input_unsupported",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::ApprovalTimeout => "approval_timeout",
            ErrorCode::DigestMismatch => "digest_mismatch",
            ErrorCode::AlreadyDecided => "already_decided",
        }
    }

    /// The HTTP status this code is answered with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidParameter | ErrorCode::UnknownParameter | ErrorCode::InvalidFrame => {
                400
            }
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden | ErrorCode::Denied => 403,
            ErrorCode::NotFound
            | ErrorCode::UnknownClient
            | ErrorCode::UnknownRequest
            | ErrorCode::UnknownAgent => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::NameConflict
            | ErrorCode::OwnedByOther
            | ErrorCode::AlreadyClaimed
            | ErrorCode::AlreadySettled
            | ErrorCode::NotClaimant
            | ErrorCode::NotProvider
            | ErrorCode::InputUnsupported
            | ErrorCode::DigestMismatch
            | ErrorCode::AlreadyDecided => 409,
            ErrorCode::BodyTooLarge | ErrorCode::ResultTooLarge | ErrorCode::TextTooLarge => 413,
            ErrorCode::InvalidTool
            | ErrorCode::TooManyTools
            | ErrorCode::InvalidResult
            | ErrorCode::InvalidArguments => 422,
            ErrorCode::NoClient
            | ErrorCode::Timeout
            | ErrorCode::ApprovalTimeout
            | ErrorCode::Cancelled
            | ErrorCode::StoreUnavailable => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// How an app reads a refusal: the one table every SDK keeps (see the module's doc).
impl ErrorCode {
    /// Refusals retrying cannot fix, met opening the event stream or registering a group: the
    /// token is not accepted or may not serve tools, or the app's own settings are wrong (its
    /// name, an agent pattern). The app stops serving and reports the error.
    pub const APP_FATAL: [ErrorCode; 4] = [
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::InvalidParameter,
        ErrorCode::UnknownParameter,
    ];

    /// Refusals of a claim, a result, a progress report or a question that say the call is
    /// another client's or is over: the normal outcome of instances racing for a call, or of a
    /// call ending while its handler ran. The app drops the call (or its report) quietly.
    pub const LOST_RACE: [ErrorCode; 6] = [
        ErrorCode::AlreadyClaimed,
        ErrorCode::OwnedByOther,
        ErrorCode::AlreadySettled,
        ErrorCode::UnknownRequest,
        ErrorCode::NotProvider,
        ErrorCode::NotClaimant,
    ];

    /// Refusals of a group's registration that a new stream may not meet: the stream closed
    /// between its `hello` and the registration, or the store is away (with `pin_definitions`
    /// a registration is answered once on disk). The app opens a new stream after its backoff
    /// and registers again; any other refusal of a registration is the app's own, and fatal.
    pub const REGISTER_AGAIN: [ErrorCode; 2] =
        [ErrorCode::UnknownClient, ErrorCode::StoreUnavailable];

    /// The refusal of an event stream opened with a resume key the broker no longer holds
    /// (expired, or forgotten). Only on an open that carried a key does it mean that: the app
    /// drops the key and opens the stream again at once without it, as a new client; the same
    /// refusal of an open without a key is the app's own setting, and fatal (`APP_FATAL`).
    pub const RESUME_REFUSED: ErrorCode = ErrorCode::InvalidParameter;

    /// Whether an app stops on this refusal (`APP_FATAL`).
    pub fn is_fatal_to_app(self) -> bool {
        Self::APP_FATAL.contains(&self)
    }

    /// Whether a registration refused with this code is tried again (`REGISTER_AGAIN`).
    pub fn registers_again(self) -> bool {
        Self::REGISTER_AGAIN.contains(&self)
    }

    /// Whether this refusal says the call is another client's or over (`LOST_RACE`).
    pub fn lost_the_race(self) -> bool {
        Self::LOST_RACE.contains(&self)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The start of the `no_client` message of a call to a tool no connected app serves (the rest
/// suggests a served name). The broker refuses such a call before it records or parks anything,
/// so making it again is safe; the callers that ride through a restart or a takeover
/// (`leo-mcp`, `leo call --wait`) do so while the broker they reconnected to may still be
/// collecting its apps. Other `no_client` endings (the claimant went away, a call the broker has
/// no record of) are not this refusal: the call may have run.
pub const UNSERVED: &str = "no connected app serves tool ";

/// Whether a call's error is the refusal of a tool no connected app serves (`UNSERVED`).
pub fn is_unserved(code: &str, message: &str) -> bool {
    code == ErrorCode::NoClient.as_str() && message.starts_with(UNSERVED)
}

#[cfg(test)]
mod unserved_tests {
    use super::*;

    #[test]
    fn only_the_refusal_of_an_unserved_tool_is_unserved() {
        assert!(is_unserved(
            "no_client",
            "no connected app serves tool \"x\"; no app serves any tool now"
        ));
        assert!(!is_unserved(
            "no_client",
            "the app that claimed the call of \"x\" disconnected"
        ));
        assert!(!is_unserved("denied", "no connected app serves tool \"x\""));
    }
}
