//! `GET /api/v1/status` and the web console's live `status` event: one snapshot of what the
//! broker holds now.
//!
//! The snapshot grows additively: `leo status` and other readers rely on the first fields
//! (`seq`, `revision`, `apps`, `agents`, `groups`, `tools`, `pending`), so they are never renamed
//! or removed, and these types do not deny unknown fields, so an older reader keeps working
//! against a newer broker.

use crate::names::{ClientId, RequestId};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ipc::{Harness, Mode, Transport};
use crate::requests::RequestState;

/// Longest `arguments_preview`, in characters, before the ellipsis.
pub const PREVIEW_CHARS: usize = 200;

/// The whole snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The last event seq assigned.
    pub seq: u64,
    /// The revision of the tool set agents see.
    pub revision: u64,
    /// Connected event streams (and the console's built-in provider while `ask_human` is on).
    pub apps: Vec<AppStatus>,
    /// Connected `leo-mcp` sessions.
    pub agents: Vec<AgentStatus>,
    /// Each registered group and the clients that serve it.
    pub groups: BTreeMap<String, Vec<ClientId>>,
    /// The tool names agents see, sorted.
    pub tools: Vec<String>,
    /// How many calls are live (parked or claimed).
    pub pending: usize,
    /// The tools agents see, by group.
    #[serde(default)]
    pub tools_by_group: BTreeMap<String, Vec<GroupTool>>,
    /// The live calls, oldest first.
    #[serde(default)]
    pub requests: Vec<RequestStatus>,
    /// Whether the console's `ask_human` tool is offered to agents.
    #[serde(default)]
    pub ask_human: bool,
    /// Each group's registration warnings (its last registration's).
    #[serde(default)]
    pub warnings: BTreeMap<String, Vec<String>>,
    /// The instances sharing this broker's PostgreSQL database, in the order they started;
    /// absent for a broker on its own (SQLite).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
}

/// One instance of a cluster: brokers sharing one PostgreSQL database, of which one leads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub id: String,
    pub host: String,
    /// Where its peers reach it (`cluster.advertise_url`).
    pub url: Option<String>,
    /// `leader` (it decides every call), `follower` (it forwards to the leader), or `gone`
    /// (not seen for longer than the lease).
    pub role: String,
    /// When it last said it was alive.
    pub last_seen: String,
}

/// One connected client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStatus {
    pub client_id: ClientId,
    pub provider: bool,
    /// `operator`, `device:NAME`, `agent`, or `console` for the console's built-in provider.
    pub principal: String,
    /// The name the app gave itself when it opened its stream (`?name=…`), if any.
    #[serde(default)]
    pub name: Option<String>,
    pub connected_at: String,
    /// The groups this client has registered.
    #[serde(default)]
    pub groups: Vec<String>,
    /// For a webhook provider (principal `webhook`): where it is called and how its
    /// deliveries go. Absent for streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<AppWebhook>,
    /// In a cluster, the instance its stream reaches the leader through; absent when it is
    /// connected to the leader itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// A webhook provider's part of its `AppStatus`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppWebhook {
    pub url: String,
    pub health: crate::webhooks::WebhookHealth,
}

/// One connected agent session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub agent: String,
    pub session: String,
    pub harness: Option<Harness>,
    pub mode: Mode,
    /// How the harness reaches the session: `stdio` (`leo-mcp`) or `http` (`/mcp`).
    #[serde(default)]
    pub transport: Transport,
    pub connected_at: String,
    /// In a cluster, the instance the session reaches the leader through; absent when it is
    /// connected to the leader itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// One tool as agents see it, without its schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupTool {
    pub name: String,
    pub description: String,
    /// `None` for a handoff.
    pub timeout_s: Option<u64>,
    pub label: Option<String>,
    /// The connected clients that serve it.
    pub clients: Vec<ClientId>,
    /// The agents it is offered to; absent means every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// When its definition last changed while the broker ran, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_at: Option<String>,
    /// A changed definition waits for the operator's approval (`pin_definitions`).
    #[serde(default)]
    pub awaiting_approval: bool,
    /// Every call of it waits for a person's approval (docs/approvals.md): its app registered
    /// it with `approval: "required"`, or a rule of `approvals.require` holds it for every
    /// agent. Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_approval: bool,
}

/// One live call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestStatus {
    pub id: RequestId,
    pub agent: String,
    pub session: String,
    pub group: String,
    pub tool: String,
    pub state: RequestState,
    pub claimed_by: Option<ClientId>,
    pub created_at: String,
    /// Whole seconds since the call was parked.
    pub age_s: u64,
    /// `None` for a handoff.
    pub timeout_s: Option<u64>,
    /// The arguments as compact JSON, cut at `PREVIEW_CHARS` characters (then ending in `…`).
    pub arguments_preview: String,
    /// The full arguments, only for the console's own calls (`ask_human`), which the console
    /// needs to show the question and its choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// `arguments` (compact JSON text, as `Request` carries it), cut at `PREVIEW_CHARS`
/// characters.
pub fn preview(arguments: &serde_json::value::RawValue) -> String {
    let text = arguments.get();
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_cut_on_a_character_boundary() {
        let raw = |v: serde_json::Value| serde_json::value::to_raw_value(&v).unwrap_or_default();
        assert_eq!(preview(&raw(serde_json::json!({"a": 1}))), r#"{"a":1}"#);
        let long = raw(serde_json::json!({"q": "é".repeat(300)}));
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS + 1);
        assert!(p.ends_with('…'));
    }
}
