//! Bodies and views of the approval routes (`/api/v1/approvals…`) and of the event
//! `client_tool.approval_requested` (docs/approvals.md).
//!
//! A call that needs a person's approval waits, before any app sees it, until an approver
//! approves it (perhaps with edited arguments), denies it, or its approval expires. A decision
//! names the call's id and its digest, so it holds for that exact call and no other. The bodies
//! are read strictly; the views are read leniently by clients (a newer broker may add fields).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::names::RequestId;

/// The longest reason a denial may give, in characters.
pub const MAX_REASON_CHARS: usize = 1024;

/// Why a call needs approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequiredBy {
    /// The app registered the tool with `approval: "required"`.
    Tool,
    /// A rule of the operator's `approvals.require`.
    Config,
}

/// A call awaiting approval: the body of `client_tool.approval_requested` and an entry of
/// `GET /api/v1/approvals`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AwaitingApproval {
    pub id: RequestId,
    pub agent: String,
    pub session: String,
    pub group: String,
    pub tool: String,
    /// The arguments the agent sent, as compact JSON (checked against the tool's schema).
    pub arguments: Box<RawValue>,
    /// `sha256:` of the agent, the tool, the group, the canonical arguments and the digest of
    /// the tool's definition: a decision must name it.
    pub digest: String,
    /// Whether an approver may change the arguments.
    pub editable: bool,
    pub required_by: RequiredBy,
    pub requested_at: String,
    /// When the approval expires and the call ends with `approval_timeout`.
    pub expires_at: String,
}

/// `GET /api/v1/approvals`: the calls awaiting approval, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalList {
    pub approvals: Vec<AwaitingApproval>,
}

/// `POST /api/v1/approvals/{id}/approve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    pub digest: String,
    /// Arguments that replace the agent's (only where the policy allows edits); checked against
    /// the tool's schema again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// `POST /api/v1/approvals/{id}/deny`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyBody {
    pub digest: String,
    /// Shown to the agent as `denied: <reason>`; at most [`MAX_REASON_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an approver decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approved,
    Denied,
}

/// The answer to a decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decided {
    pub id: RequestId,
    pub decision: Decision,
    /// True when the approver changed the arguments.
    pub edited: bool,
}

/// A call's approval as the broker's store keeps it with the call (JSON): awaiting, or approved
/// (whether the arguments were edited, which the agent's result says).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Approval {
    Awaiting(Awaiting),
    Approved { edited: bool, by: String },
}

/// What an awaiting call's decision must match, and until when it may come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Awaiting {
    pub digest: String,
    pub editable: bool,
    pub required_by: RequiredBy,
    pub requested_at: String,
    /// When the approval expires, in milliseconds since 1970; time spent down counts.
    pub expires_ms: i64,
}

impl Approval {
    /// Reads what `Approval::text` wrote; `None` for anything else.
    pub fn parse(text: &str) -> Option<Approval> {
        serde_json::from_str(text).ok()
    }

    /// The JSON a live call's row keeps (`StoredCall::approval` of `leo-store`).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `POST /api/v1/approvals/webhooks`: an approver that cannot hold a stream is sent each
/// `client_tool.approval_requested` body, signed like a webhook provider's deliveries, and
/// answers over `POST /api/v1/approvals/{id}/approve|deny` with the token that created it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalWebhookBody {
    /// 1 to 64 of `A-Z a-z 0-9 _ . -`, unique among every webhook.
    pub name: String,
    /// Where the approval requests are `POST`ed (`webhooks.allowed_hosts` applies).
    pub url: String,
}

/// The answer to `POST /api/v1/approvals/webhooks`: the signing secret, shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalWebhookCreated {
    pub name: String,
    pub url: String,
    /// `whsec_…`: the key of the `webhook-signature` header.
    pub secret: String,
}

/// `GET /api/v1/approvals/webhooks`: the approval webhooks, without secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalWebhookList {
    pub webhooks: Vec<ApprovalWebhookInfo>,
}

/// One approval webhook.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalWebhookInfo {
    pub name: String,
    pub url: String,
    /// The principal that created it, whose decisions its receiver makes.
    pub owner: String,
    pub created_at: String,
    pub health: crate::webhooks::WebhookHealth,
}
