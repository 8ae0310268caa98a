//! Bodies and views of the request routes (`/api/v1/client-tools/requests…`).
//!
//! The claim body is read strictly; the views the broker answers with are read leniently by
//! clients (see `events`: a newer broker may add fields).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /api/v1/client-tools/requests/{id}/claim`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    pub client_id: String,
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestState {
    Parked,
    Claimed,
}

/// One pending request, as `GET …/requests?pending=1` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRequest {
    pub id: String,
    pub agent: String,
    pub session: String,
    pub group: String,
    pub tool: String,
    pub arguments: Value,
    pub state: RequestState,
    pub claimed_by: Option<String>,
    pub owner: Option<String>,
    pub timeout_s: Option<u64>,
    pub created_at: String,
}

/// One tool as `GET /api/v1/client-tools` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedTool {
    pub group: String,
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// `None` for a handoff.
    pub timeout_s: Option<u64>,
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<crate::tool::ToolAnnotations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<crate::tool::Execution>,
    /// The connected clients that serve it.
    pub clients: Vec<String>,
    /// The agents it is offered to (`agents` of its registration); absent means every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// `sha256:` of the definition agents are offered (name, description, input_schema,
    /// timeout_s, label).
    #[serde(default)]
    pub digest: String,
    /// With `pin_definitions`, the digest of a changed definition that waits for the
    /// operator's approval; until then the one above stays offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_approval: Option<String>,
}

/// `GET /api/v1/client-tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolList {
    pub revision: u64,
    pub tools: Vec<ListedTool>,
}

/// `POST /api/v1/client-tools` answers with what the broker now shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registered {
    pub group: String,
    pub revision: u64,
    pub tools: Vec<String>,
    /// What harnesses are known to mishandle in this registration; it was accepted anyway.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// `POST /api/v1/client-tools/definitions/{name}/approve`: the held definition is now offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approved {
    pub tool: String,
    pub digest: String,
    pub revision: u64,
}

/// Claim and result answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestAck {
    pub id: String,
    pub state: String,
}
