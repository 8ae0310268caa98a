//! The status snapshot: what `GET /api/v1/status` answers and what the web console's live view
//! shows, taken in one critical section so its parts agree with each other.

use std::collections::BTreeMap;
use std::time::Instant;

use leo_protocol::console::CONSOLE_GROUP;
use leo_protocol::names::ClientId;
use leo_protocol::requests::RequestState;
use leo_protocol::status::{AgentStatus, AppStatus, GroupTool, RequestStatus, Status, preview};

use super::{Broker, Core};
use crate::requests::Stage;

impl Broker {
    /// Apps, agents, tools by group and live calls, as they stand now.
    pub fn status(&self) -> Status {
        let core = self.lock();
        let groups: BTreeMap<String, Vec<ClientId>> = core
            .registry
            .groups()
            .into_iter()
            .map(|(g, clients)| (g, clients.into_iter().collect()))
            .collect();
        Status {
            seq: self.bus.seq(),
            revision: core.registry.revision(),
            apps: apps(&core, &groups),
            agents: agents(&core),
            tools: core.registry.names(),
            pending: core.requests.len(),
            tools_by_group: tools_by_group(&core, &self.config.approvals),
            requests: requests(&core),
            ask_human: core.clients.contains_key(super::CONSOLE_CLIENT),
            warnings: core.registry.warnings().clone(),
            groups,
            instances: self.store().instances(),
        }
    }
}

/// The connected apps in the order they joined, each with the groups it serves.
fn apps(core: &Core, groups: &BTreeMap<String, Vec<ClientId>>) -> Vec<AppStatus> {
    let mut apps: Vec<_> = core.clients.iter().collect();
    apps.sort_by_key(|(_, c)| c.n);
    apps.into_iter()
        .map(|(id, c)| AppStatus {
            client_id: id.clone(),
            provider: c.provider,
            principal: c.principal.clone(),
            name: c.name.clone(),
            connected_at: c.connected_at.clone(),
            groups: groups
                .iter()
                .filter(|(_, clients)| clients.contains(id))
                .map(|(g, _)| g.clone())
                .collect(),
            webhook: c.webhook.clone(),
            via: c.via.clone(),
        })
        .collect()
}

fn agents(core: &Core) -> Vec<AgentStatus> {
    core.sessions
        .values()
        .map(|s| AgentStatus {
            agent: s.agent.clone(),
            session: s.session.clone(),
            harness: s.harness.clone(),
            mode: s.mode,
            transport: s.transport,
            connected_at: s.connected_at.clone(),
            via: s.via.clone(),
        })
        .collect()
}

fn tools_by_group(
    core: &Core,
    approvals: &crate::config::ApprovalsConfig,
) -> BTreeMap<String, Vec<GroupTool>> {
    let mut tools_by_group: BTreeMap<String, Vec<GroupTool>> = BTreeMap::new();
    for v in core.registry.view().values() {
        tools_by_group
            .entry(v.spec.group.clone())
            .or_default()
            .push(GroupTool {
                name: v.spec.def.name.clone(),
                description: v.spec.def.description.clone(),
                timeout_s: v.spec.timeout_s,
                label: v.spec.def.label.clone(),
                clients: v.clients.clone(),
                agents: v.spec.agents.as_deref().map(<[String]>::to_vec),
                changed_at: core.registry.changed_at(&v.spec.def.name).cloned(),
                awaiting_approval: core.registry.held_digest(&v.spec.def.name).is_some(),
                needs_approval: approvals
                    .needed_by_all(&v.spec.def.name, v.spec.def.approval.is_some()),
            });
    }
    tools_by_group
}

/// The live calls; the arguments in full only for the console's own questions.
fn requests(core: &Core) -> Vec<RequestStatus> {
    let now = Instant::now();
    core.requests
        .live()
        .map(|(id, call, stage)| RequestStatus {
            id: id.clone(),
            agent: call.agent.clone(),
            session: call.session.clone(),
            group: call.group.clone(),
            tool: call.tool.clone(),
            state: match stage {
                Stage::Awaiting(_) => RequestState::AwaitingApproval,
                Stage::Parked => RequestState::Parked,
                Stage::Claimed { .. } => RequestState::Claimed,
            },
            claimed_by: match stage {
                Stage::Awaiting(_) | Stage::Parked => None,
                Stage::Claimed { by } => Some(by.clone()),
            },
            created_at: call.created_at.clone(),
            age_s: now.saturating_duration_since(call.parked_at).as_secs(),
            timeout_s: call.timeout_s,
            arguments_preview: preview(&call.arguments),
            // Parsed for the console's own calls only; every other call shows its preview.
            arguments: (call.group == CONSOLE_GROUP)
                .then(|| serde_json::from_str(call.arguments.get()).unwrap_or_default()),
        })
        .collect()
}
