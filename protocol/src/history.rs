//! The history of ended calls (`GET /api/v1/client-tools/requests?state=ended`) and the audit
//! trail (`GET /api/v1/audit`).
//!
//! Both are views the broker answers with; clients read them leniently (a newer broker may add
//! fields). Times are RFC 3339 UTC from the broker's clock; durations are measured by the
//! broker's monotonic clock, so they never go negative when the wall clock is set.

use crate::names::{ClientId, RequestId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::outcome::CallOutcome;

/// The app that claimed (or answered) a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallApp {
    pub client_id: ClientId,
    /// The name it gave itself (`?name=…`), if any.
    pub name: Option<String>,
}

/// One ended call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedRequest {
    /// Its place in the history: newer calls have larger numbers; `before` takes it.
    pub seq: u64,
    pub id: RequestId,
    pub tool: String,
    pub group: String,
    pub agent: String,
    pub session: String,
    /// `None` when no app claimed it.
    pub app: Option<CallApp>,
    pub outcome: CallOutcome,
    /// With `error`: the code the app gave.
    pub error_code: Option<String>,
    /// With `timeout`, `cancelled` and `no_client`: the reason of `client_tool.cancelled`.
    pub reason: Option<String>,
    pub created_at: String,
    pub claimed_at: Option<String>,
    pub ended_at: String,
    /// From parked to claimed.
    pub wait_ms: Option<u64>,
    /// From claimed to ended.
    pub work_ms: Option<u64>,
    /// From parked to ended.
    pub duration_ms: u64,
    /// The arguments as JSON, in bytes.
    pub arguments_bytes: u64,
    /// The posted result (content or error) as JSON, in bytes; `None` without a result.
    pub result_bytes: Option<u64>,
    /// With `history.store_content`, to the operator only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// With `history.store_content`, to the operator only: the posted body's `content` and
    /// `structured_content`, or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// With a PostgreSQL store: the instance that ended it (`i_…`, `state/instance-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// `GET /api/v1/client-tools/requests?state=ended`, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedList {
    pub calls: Vec<EndedRequest>,
    /// Pass as `before` for the next (older) page; `None` on the last page.
    pub next_before: Option<u64>,
}

/// One authenticated change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its place in the trail: newer entries have larger numbers; `before` takes it.
    pub seq: u64,
    pub at: String,
    /// Who: `operator`, `device:NAME`, `client:NAME`, `agent:NAME`, `console`, `cli`.
    pub principal: String,
    /// How they proved it: `operator`, `device`, `api_client`, `agent`, `session`, `local`.
    pub token_kind: String,
    /// What they did, such as `register` or `claim`.
    pub action: String,
    /// What it was done to: a request id, a group, a tool, an agent, a name.
    pub target: Option<String>,
    /// A short, content-free detail (an outcome, a digest, a client id).
    pub detail: Option<String>,
    /// With a PostgreSQL store: the instance that wrote it (`i_…`, `state/instance-id`), whose
    /// broker or `leo` command made the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// `GET /api/v1/audit`, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; `None` on the last page.
    pub next_before: Option<u64>,
}

/// The largest `limit` of the history and audit routes.
pub const MAX_PAGE: u32 = 500;
/// `limit` when none is given.
pub const DEFAULT_PAGE: u32 = 50;
