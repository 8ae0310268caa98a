//! What runs now, combined from three public routes: `GET /api/v1/status` (apps, agents, seq),
//! `GET /api/v1/client-tools` (tools with their group, timeout and serving clients) and
//! `GET /api/v1/client-tools/requests` (pending calls).
//!
//! The result is the `--json` shape of `leo status` and `leo requests`, documented in the
//! README; its keys are stable for scripts (new keys may be added, none renamed or removed):
//!
//! ```text
//! {revision, seq,
//!  apps:    [{client_id, principal, provider, connected_at, groups, name}],
//!  agents:  [{agent, session, harness: {name, version} | null, mode, transport,
//!             connected_at}],
//!  groups:  [{group, clients, tools: [{name, description, timeout_s, label, clients,
//!                                      agents, awaiting_approval, needs_approval}]}],
//!  warnings: {group: [warning]},
//!  instances: [{id, host, url, role, last_seen}]   (only for a cluster on PostgreSQL; its
//!             apps and agents then carry `via`, the instance they come through)
//!  pending: [{id, agent, session, group, tool, arguments, state, claimed_by, owner,
//!             timeout_s, created_at, age_s, timeout_left_s, claimed_by_name}]}
//! ```
//!
//! `name` is what the app called itself when it opened its stream, and `claimed_by_name` the
//! name of the claimant; both are `null` for an app that gave none.
//!
//! ```text
//! ```
//!
//! The status answer is read field by field (not through a strict type), so a broker that
//! reports more than this CLI knows still shows what it does know.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use leo_protocol::ipc::Harness;
use leo_protocol::requests::{ListedTool, PendingRequest, ToolList};
use serde::Serialize;
use serde_json::Value;

use super::api::{Api, GetError};
use super::clock::age_s;

pub const STATUS_ROUTE: &str = "/api/v1/status";
pub const TOOLS_ROUTE: &str = "/api/v1/client-tools";
pub const REQUESTS_ROUTE: &str = "/api/v1/client-tools/requests?pending=1";

/// `leo status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The tool-set revision the groups below are at.
    pub revision: u64,
    /// The broker's last event sequence number.
    pub seq: u64,
    pub apps: Vec<App>,
    pub agents: Vec<Agent>,
    pub groups: Vec<Group>,
    /// Oldest first.
    pub pending: Vec<Pending>,
    /// Each group's registration warnings.
    pub warnings: BTreeMap<String, Vec<String>>,
    /// The instances sharing the broker's PostgreSQL database; absent for one broker.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<leo_protocol::status::InstanceStatus>,
}

/// An event stream: an app's provider stream, or a watcher's.
#[derive(Debug, Clone, Serialize)]
pub struct App {
    pub client_id: String,
    /// `operator`, `device:NAME`, `agent`.
    pub principal: String,
    pub provider: bool,
    pub connected_at: String,
    /// The groups this client serves now.
    pub groups: Vec<String>,
    /// The name the app gave itself, if any.
    pub name: Option<String>,
    /// A webhook provider's url and delivery health; absent for streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<leo_protocol::status::AppWebhook>,
    /// In a cluster, the instance its stream comes through; absent on the leader itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// A sidecar session.
#[derive(Debug, Clone, Serialize)]
pub struct Agent {
    pub agent: String,
    pub session: String,
    pub harness: Option<Harness>,
    /// `native` or `fallback`.
    pub mode: String,
    /// How the harness reaches the session: `stdio` (`leo-mcp`) or `http` (`/mcp`).
    pub transport: String,
    pub connected_at: String,
    /// In a cluster, the instance its session comes through; absent on the leader itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub group: String,
    /// The clients serving any of its tools.
    pub clients: Vec<String>,
    pub tools: Vec<Tool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// `null` for a handoff (no timeout).
    pub timeout_s: Option<u64>,
    pub label: Option<String>,
    pub clients: Vec<String>,
    /// The agents it is offered to; `null` means every agent.
    pub agents: Option<Vec<String>>,
    /// A changed definition waits for `leo tools approve`.
    pub awaiting_approval: bool,
    /// Every call of it waits for a person's approval (`leo approvals`).
    pub needs_approval: bool,
}

/// A pending call, as the requests route lists it, with its age and the time it has left.
#[derive(Debug, Clone, Serialize)]
pub struct Pending {
    #[serde(flatten)]
    pub request: PendingRequest,
    pub age_s: u64,
    /// `null` when the call never times out.
    pub timeout_left_s: Option<u64>,
    /// The name of the app that claimed the call, if it gave one.
    pub claimed_by_name: Option<String>,
}

impl Snapshot {
    /// Asks the broker now.
    pub fn fetch(api: &Api) -> Result<Snapshot, GetError> {
        let status: Value = api.get(STATUS_ROUTE)?;
        let tools: ToolList = api.get(TOOLS_ROUTE)?;
        let mut pending = fetch_pending(api, SystemTime::now())?;
        name_claimants(&mut pending, &app_names(&status));
        Ok(Snapshot::combine(&status, tools, pending))
    }

    pub fn combine(status: &Value, tools: ToolList, pending: Vec<Pending>) -> Snapshot {
        let groups = groups(tools.tools);
        let mut served: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for g in &groups {
            for c in &g.clients {
                served.entry(c.as_str()).or_default().push(g.group.clone());
            }
        }
        let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
        let apps = list(status, "apps")
            .map(|a| App {
                client_id: text(a, "client_id"),
                principal: text(a, "principal"),
                provider: a["provider"].as_bool().unwrap_or(false),
                connected_at: text(a, "connected_at"),
                name: a["name"].as_str().map(str::to_owned),
                webhook: serde_json::from_value(a["webhook"].clone()).ok(),
                via: a["via"].as_str().map(str::to_owned),
                groups: served
                    .get(a["client_id"].as_str().unwrap_or_default())
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        let mut agents: Vec<Agent> = list(status, "agents")
            .map(|a| Agent {
                agent: text(a, "agent"),
                session: text(a, "session"),
                harness: serde_json::from_value(a["harness"].clone()).ok(),
                mode: text(a, "mode"),
                // A broker older than the field served stdio only.
                transport: a["transport"].as_str().unwrap_or("stdio").to_owned(),
                connected_at: text(a, "connected_at"),
                via: a["via"].as_str().map(str::to_owned),
            })
            .collect();
        agents.sort_by(|a, b| (&a.agent, &a.connected_at).cmp(&(&b.agent, &b.connected_at)));
        Snapshot {
            revision: tools.revision,
            seq: status["seq"].as_u64().unwrap_or(0),
            apps,
            agents,
            groups,
            pending,
            warnings: serde_json::from_value(status["warnings"].clone()).unwrap_or_default(),
            instances: serde_json::from_value(status["instances"].clone()).unwrap_or_default(),
        }
    }
}

/// The pending calls, oldest first, aged at `now`.
pub fn fetch_pending(api: &Api, now: SystemTime) -> Result<Vec<Pending>, GetError> {
    let requests: Vec<PendingRequest> = api.get(REQUESTS_ROUTE)?;
    Ok(aged(requests, now))
}

/// The broker lists calls in the order they were parked, which is oldest first.
pub fn aged(requests: Vec<PendingRequest>, now: SystemTime) -> Vec<Pending> {
    requests
        .into_iter()
        .map(|request| {
            let age_s = age_s(&request.created_at, now);
            let timeout_left_s = request
                .timeout_s
                .filter(|t| *t > 0)
                .map(|t| t.saturating_sub(age_s));
            Pending {
                request,
                age_s,
                timeout_left_s,
                claimed_by_name: None,
            }
        })
        .collect()
}

/// Client id → the name that app gave itself, from a status answer.
pub fn app_names(status: &Value) -> BTreeMap<String, String> {
    list(status, "apps")
        .filter_map(|a| {
            Some((
                a["client_id"].as_str()?.to_owned(),
                a["name"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Fills in `claimed_by_name` from `names`.
pub fn name_claimants(pending: &mut [Pending], names: &BTreeMap<String, String>) {
    for p in pending {
        p.claimed_by_name = p
            .request
            .claimed_by
            .as_ref()
            .and_then(|c| names.get(c.as_str()))
            .cloned();
    }
}

fn list<'a>(status: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    status[key].as_array().into_iter().flatten()
}

/// Tools by group, groups and tools by name.
fn groups(tools: Vec<ListedTool>) -> Vec<Group> {
    let mut by_group: BTreeMap<String, Vec<ListedTool>> = BTreeMap::new();
    for t in tools {
        by_group.entry(t.group.clone()).or_default().push(t);
    }
    by_group
        .into_iter()
        .map(|(group, mut tools)| {
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            let clients: BTreeSet<String> = tools
                .iter()
                .flat_map(|t| t.clients.iter().map(ToString::to_string))
                .collect();
            Group {
                group,
                clients: clients.into_iter().collect(),
                tools: tools
                    .into_iter()
                    .map(|t| Tool {
                        name: t.name,
                        description: t.description,
                        timeout_s: t.timeout_s,
                        label: t.label,
                        clients: t.clients.into_iter().map(String::from).collect(),
                        agents: t.agents,
                        awaiting_approval: t.awaiting_approval.is_some(),
                        needs_approval: t.needs_approval,
                    })
                    .collect(),
            }
        })
        .collect()
}
