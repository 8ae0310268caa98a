//! The payloads of SSE events, one struct per event type; `client_tool.request` carries a
//! `crate::requests::Request`, the one type of a call everywhere.
//!
//! Provider streams see requests in full; every other stream sees the same events redacted to
//! ids, so that the global `seq` stays contiguous for everyone while arguments never leave the
//! streams that may act on them.
//!
//! **Decision: what the broker sends is read leniently.** These payloads are only ever parsed
//! by clients (the app SDK, tests), so they do not reject unknown fields: a newer broker may add
//! a field without breaking apps built against an older `leo-protocol`. What the broker
//! *receives* (request bodies, sidecar frames) stays strict.

use crate::names::{ClientId, RequestId};
use serde::{Deserialize, Serialize};

/// Event type names, as they appear on the `event:` line.
pub mod kind {
    pub const HELLO: &str = "hello";
    /// Its body, on provider streams, is a `crate::requests::Request`.
    pub const REQUEST: &str = "client_tool.request";
    pub const CANCELLED: &str = "client_tool.cancelled";
    /// A call awaits a person's approval; sent to approvers' plain streams only.
    pub const APPROVAL_REQUESTED: &str = "client_tool.approval_requested";
    pub const CHANGED: &str = "client_tools.changed";
    /// The web console's stream (`/console/events`): a whole status snapshot.
    pub const STATUS: &str = "status";
}

/// The query parameter by which an app names itself on its event stream.
pub const NAME_PARAM: &str = "name";

/// Checks the name an app gives itself: 1 to 64 characters, none of them a control or an
/// invisible formatting character (which could hide or reorder what a person reads in
/// `leo status` or the console), and no space at either end.
pub fn check_app_name(name: &str) -> Result<(), String> {
    let max = crate::limits::MAX_APP_NAME;
    let count = name.chars().count();
    if count == 0 || count > max {
        return Err(format!("must be 1 to {max} characters, not {count}"));
    }
    if let Some(c) = name.chars().find(|c| !is_printable(*c)) {
        return Err(format!(
            "must be printable characters; U+{:04X} is not",
            u32::from(c)
        ));
    }
    if name.starts_with(char::is_whitespace) || name.ends_with(char::is_whitespace) {
        return Err("must not begin or end with a space".into());
    }
    Ok(())
}

/// Not a control character (C0, DEL, C1), nor one of the invisible characters that change how
/// text around them is shown (zero-width, bidirectional controls, the byte-order mark).
fn is_printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}')
}

/// Features the broker announces in `hello`.
pub const FEATURES: &[&str] = &["client_tools"];

/// The first frame of every stream. It is not part of the global sequence: it carries no
/// `id:` line, so it never moves a client's `Last-Event-ID`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub client_id: ClientId,
    pub provider: bool,
    pub features: Vec<String>,
    /// The last seq assigned when the stream opened.
    pub seq: u64,
    /// True when `Last-Event-ID` was given but the broker no longer holds every event after it.
    #[serde(default)]
    pub replay_gap: bool,
    /// Provider streams only: the key that reopens this stream as the same client
    /// (`GET /api/v1/events?client_tools=1&resume=KEY`), with its claims and ownership, after a
    /// dropped stream or a broker restart, within the grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// `client_tool.cancelled`, as provider streams see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelledEvent {
    pub id: RequestId,
    pub agent: String,
    pub tool: String,
    pub reason: CancelReason,
}

/// Request and cancel events on a non-provider stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Redacted {
    pub id: RequestId,
}

/// `client_tools.changed`, to every stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangedEvent {
    pub revision: u64,
    pub tools: Vec<String>,
    /// Tools now offered with a definition different from the one agents saw before; absent
    /// when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Tools whose changed definition waits for the operator's approval (`pin_definitions`);
    /// agents are still offered the previous one. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting_approval: Vec<String>,
}

/// Why a call ended without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// The call outlived its tool's `timeout_s`.
    Timeout,
    /// The harness sent `notifications/cancelled`.
    CancelledByAgent,
    /// The agent's sidecar went away.
    AgentGone,
    /// No connected app serves the tool any more.
    ToolWithdrawn,
    /// The app that claimed the call disconnected.
    ClientGone,
    /// The broker is shutting down.
    Shutdown,
    /// The operator cancelled the call (web console or `POST …/requests/{id}/cancel`).
    CancelledByOperator,
    /// An approver denied the call before it reached any app (`approvals`).
    Denied,
    /// Nobody approved the call within `approvals.expire_s`.
    ApprovalTimeout,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Timeout => "timeout",
            CancelReason::CancelledByAgent => "cancelled_by_agent",
            CancelReason::AgentGone => "agent_gone",
            CancelReason::ToolWithdrawn => "tool_withdrawn",
            CancelReason::ClientGone => "client_gone",
            CancelReason::Shutdown => "shutdown",
            CancelReason::CancelledByOperator => "cancelled_by_operator",
            CancelReason::Denied => "denied",
            CancelReason::ApprovalTimeout => "approval_timeout",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_are_short_printable_text() {
        for good in [
            "leo_app.py",
            "Photo booth",
            "serve-tool word_count",
            "café ☕",
            "x",
        ] {
            assert_eq!(check_app_name(good), Ok(()), "{good:?}");
        }
        let long = "a".repeat(65);
        for (bad, says) in [
            ("", "must be 1 to 64 characters, not 0"),
            (long.as_str(), "must be 1 to 64 characters, not 65"),
            ("a\nb", "U+000A is not"),
            ("a\u{1b}[31m", "U+001B is not"),
            ("evil\u{202E}txt", "U+202E is not"),
            ("zero\u{200B}width", "U+200B is not"),
            (" padded", "must not begin or end with a space"),
        ] {
            match check_app_name(bad) {
                Ok(()) => panic!("{bad:?} accepted"),
                Err(e) => assert!(e.contains(says), "{bad:?}: {e}"),
            }
        }
    }
}
