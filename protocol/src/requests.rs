//! Bodies and views of the request routes (`/api/v1/client-tools/requests…`).
//!
//! The claim body is read strictly; the views the broker answers with are read leniently by
//! clients (see `events`: a newer broker may add fields).

use crate::names::{ClientId, RequestId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// `POST /api/v1/client-tools/requests/{id}/claim`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    pub client_id: ClientId,
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestState {
    Parked,
    Claimed,
    /// Held for a person's approval (docs/approvals.md): shown to the operator only, never in
    /// an app's `?pending=1`.
    AwaitingApproval,
}

/// One call of a client tool: the body of `client_tool.request`, the heart of every
/// `?pending=1` entry (`PendingRequest`), and what an app's handler is given.
///
/// **Decision: the arguments travel as text.** The broker parses them once, to check them
/// against the tool's `input_schema`, and from then on keeps, stores, publishes and delivers
/// the compact JSON text it measured (`RawValue`), never a tree it clones and writes again.
/// A reader parses them when it needs them, straight into its own type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub id: RequestId,
    pub agent: String,
    pub session: String,
    pub group: String,
    pub tool: String,
    /// A JSON object, already checked against the tool's input_schema, as compact JSON.
    pub arguments: Box<RawValue>,
    /// `None` for a handoff (`timeout_s: 0`).
    pub timeout_s: Option<u64>,
    pub created_at: String,
    /// The client that owns this agent's group, if any: only it can claim.
    pub owner: Option<ClientId>,
    /// The W3C trace context of the broker's span for this call, when the broker exports
    /// traces (`telemetry.otlp_endpoint`): an app may continue the trace under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Two requests are equal when every field is, the arguments compared as text.
impl PartialEq for Request {
    fn eq(&self, other: &Request) -> bool {
        self.id == other.id
            && self.agent == other.agent
            && self.session == other.session
            && self.group == other.group
            && self.tool == other.tool
            && self.arguments.get() == other.arguments.get()
            && self.timeout_s == other.timeout_s
            && self.created_at == other.created_at
            && self.owner == other.owner
            && self.traceparent == other.traceparent
    }
}

/// One pending request, as `GET …/requests?pending=1` lists it: the request, where it stands
/// and who claimed it, in one JSON object.
///
/// It is written through `flatten`; it is read through `PendingFields`, the same members
/// spelled out, because serde cannot read a `RawValue` through `flatten` (it buffers the
/// members first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "PendingFields")]
pub struct PendingRequest {
    #[serde(flatten)]
    pub request: Request,
    pub state: RequestState,
    pub claimed_by: Option<ClientId>,
}

/// A pending entry reads as its request (`pending.tool`).
impl std::ops::Deref for PendingRequest {
    type Target = Request;

    fn deref(&self) -> &Request {
        &self.request
    }
}

/// `PendingRequest` as read from the wire.
#[derive(Deserialize)]
struct PendingFields {
    id: RequestId,
    agent: String,
    session: String,
    group: String,
    tool: String,
    arguments: Box<RawValue>,
    timeout_s: Option<u64>,
    created_at: String,
    owner: Option<ClientId>,
    #[serde(default)]
    traceparent: Option<String>,
    state: RequestState,
    claimed_by: Option<ClientId>,
}

impl From<PendingFields> for PendingRequest {
    fn from(f: PendingFields) -> PendingRequest {
        PendingRequest {
            request: Request {
                id: f.id,
                agent: f.agent,
                session: f.session,
                group: f.group,
                tool: f.tool,
                arguments: f.arguments,
                timeout_s: f.timeout_s,
                created_at: f.created_at,
                owner: f.owner,
                traceparent: f.traceparent,
            },
            state: f.state,
            claimed_by: f.claimed_by,
        }
    }
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
    pub clients: Vec<ClientId>,
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
    /// Every call of it waits for a person's approval (docs/approvals.md): its app registered
    /// it `approval: "required"`, or a rule of `approvals.require` holds it for every agent.
    /// Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_approval: bool,
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

/// Claim, result and cancel answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestAck {
    pub id: RequestId,
    pub state: AckState,
}

/// What the acknowledged operation made of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckState {
    /// Claimed (also the answer to a progress report: the call stays claimed).
    Claimed,
    /// Answered with the posted result or error.
    Settled,
    /// Ended by the operator.
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            id: "r_1".into(),
            agent: "rocket".into(),
            session: "rocket-s1".into(),
            group: "clipboard".into(),
            tool: "read_clipboard".into(),
            arguments: RawValue::from_string(r#"{"format":"text","n":[1,2]}"#.into()).unwrap(),
            timeout_s: Some(30),
            created_at: "2026-01-01T00:00:00Z".into(),
            owner: None,
            traceparent: None,
        }
    }

    #[test]
    fn a_request_carries_its_arguments_as_the_text_it_was_given() {
        let line = serde_json::to_string(&request()).unwrap();
        assert!(
            line.contains(r#""arguments":{"format":"text","n":[1,2]}"#),
            "{line}"
        );
        let back: Request = serde_json::from_str(&line).unwrap();
        assert_eq!(back, request());
        // Read leniently: a newer broker may add a member.
        let newer = line.replacen('{', r#"{"later":1,"#, 1);
        assert_eq!(serde_json::from_str::<Request>(&newer).unwrap(), request());
    }

    #[test]
    fn a_pending_entry_is_the_request_and_its_state_in_one_object() {
        let pending = PendingRequest {
            request: request(),
            state: RequestState::Claimed,
            claimed_by: Some("c_1".into()),
        };
        let line = serde_json::to_string(&pending).unwrap();
        let flat: Value = serde_json::from_str(&line).unwrap();
        let mut expected = serde_json::to_value(request()).unwrap();
        expected["state"] = "claimed".into();
        expected["claimed_by"] = "c_1".into();
        assert_eq!(flat, expected);
        assert_eq!(
            serde_json::from_str::<PendingRequest>(&line).unwrap(),
            pending
        );
        // The list as the route answers it, read in one pass.
        let list = format!("[{line},{line}]");
        assert_eq!(
            serde_json::from_str::<Vec<PendingRequest>>(&list).unwrap(),
            [pending.clone(), pending]
        );
    }
}
