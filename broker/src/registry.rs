//! Registrations: which connected client serves which group of tools, and the tool set agents
//! see.
//!
//! A group is a name shared across clients: two devices running the same app register the same
//! group, and the first to claim an agent's call owns that agent's group (see `ownership`). A
//! tool name belongs to exactly one group (case-insensitively); the definition agents see is the
//! most recent registration of the group that contains it. The `revision` moves only when what
//! agents see changes, so an app re-registering the same tools wakes nobody.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use leo_protocol::ErrorCode;
use leo_protocol::limits::{MAX_TOOLS_PER_BROKER, MAX_TOOLS_PER_GROUP};
use leo_protocol::requests::{ListedTool, ToolList};
use leo_protocol::tool::{ToolDef, is_valid_group_name};

use crate::refusal::Refusal;

/// A connected client's id, as given in its stream's `hello`.
pub type ClientId = String;

/// A tool as registered, with its compiled argument validator.
pub struct ToolSpec {
    pub group: String,
    pub def: ToolDef,
    /// `None` for a handoff (`timeout_s: 0`).
    pub timeout_s: Option<u64>,
    pub validator: jsonschema::Validator,
}

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("group", &self.group)
            .field("name", &self.def.name)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Registration {
    client: ClientId,
    /// Larger is more recent.
    order: u64,
    tools: Vec<Arc<ToolSpec>>,
}

/// A tool agents can call now, and the clients that serve it.
#[derive(Debug, Clone)]
pub struct Visible {
    pub spec: Arc<ToolSpec>,
    pub clients: Vec<ClientId>,
}

/// Every registration, and the derived view.
#[derive(Debug, Default)]
pub struct Registry {
    groups: BTreeMap<String, Vec<Registration>>,
    order: u64,
    revision: u64,
    view: BTreeMap<String, Visible>,
}

/// What a change did to the agents' view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Changed,
}

impl Registry {
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The tool agents call by `name`.
    pub fn visible(&self, name: &str) -> Option<&Visible> {
        self.view.get(name)
    }

    /// Every visible tool, by name.
    pub fn view(&self) -> &BTreeMap<String, Visible> {
        &self.view
    }

    /// The visible names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.view.keys().cloned().collect()
    }

    /// True when `client` has a registration of `group`.
    pub fn serves(&self, client: &str, group: &str) -> bool {
        self.groups.get(group).is_some_and(|regs| {
            regs.iter()
                .any(|r| r.client == client && !r.tools.is_empty())
        })
    }

    /// Checks and compiles every tool of a registration body, without changing anything.
    pub fn prepare(
        group: &str,
        defs: Vec<ToolDef>,
        default_timeout_s: u64,
    ) -> Result<Vec<Arc<ToolSpec>>, Refusal> {
        if !is_valid_group_name(group) {
            return Err(Refusal::new(
                ErrorCode::InvalidTool,
                format!("at $.group: group name {group:?} must be 1 to 64 of [A-Za-z0-9_.-]"),
            ));
        }
        if defs.len() > MAX_TOOLS_PER_GROUP {
            return Err(Refusal::new(
                ErrorCode::TooManyTools,
                format!(
                    "at $.tools: {} tools, at most {MAX_TOOLS_PER_GROUP} per group",
                    defs.len()
                ),
            ));
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut specs = Vec::with_capacity(defs.len());
        for (i, def) in defs.into_iter().enumerate() {
            let at = format!("$.tools[{i}]");
            def.check(&at)
                .map_err(|e| Refusal::new(ErrorCode::InvalidTool, e.message))?;
            if let Some(first) = seen.insert(def.name.to_ascii_lowercase(), i) {
                return Err(Refusal::new(
                    ErrorCode::InvalidTool,
                    format!(
                        "at {at}.name: {:?} repeats $.tools[{first}].name (names are case-insensitive)",
                        def.name
                    ),
                ));
            }
            let validator = jsonschema::validator_for(&def.input_schema).map_err(|e| {
                Refusal::new(ErrorCode::InvalidTool, format!("at {at}.input_schema: {e}"))
            })?;
            specs.push(Arc::new(ToolSpec {
                group: group.to_owned(),
                timeout_s: def.effective_timeout_s(default_timeout_s),
                def,
                validator,
            }));
        }
        Ok(specs)
    }

    /// Replaces `client`'s registration of `group` (an empty list withdraws it).
    pub fn register(
        &mut self,
        client: &str,
        group: &str,
        specs: Vec<Arc<ToolSpec>>,
    ) -> Result<Change, Refusal> {
        for spec in &specs {
            if let Some((other_group, other_name)) = self.conflict(client, group, &spec.def.name) {
                return Err(Refusal::new(
                    ErrorCode::NameConflict,
                    format!(
                        "tool {:?} collides with {other_name:?} of group {other_group:?}",
                        spec.def.name
                    ),
                ));
            }
        }
        // Registrations share their compiled tools, so this copy is cheap.
        let mut next = self.groups.clone();
        let regs = next.entry(group.to_owned()).or_default();
        regs.retain(|r| r.client != client);
        if !specs.is_empty() {
            self.order += 1;
            regs.push(Registration {
                client: client.to_owned(),
                order: self.order,
                tools: specs,
            });
        }
        if regs.is_empty() {
            next.remove(group);
        }
        let view = derive_view(&next);
        if view.len() > MAX_TOOLS_PER_BROKER {
            return Err(Refusal::new(
                ErrorCode::TooManyTools,
                format!(
                    "at $.tools: the broker would serve {} tools, at most {MAX_TOOLS_PER_BROKER}",
                    view.len()
                ),
            ));
        }
        self.groups = next;
        Ok(self.install(view))
    }

    /// Removes every registration of `client`; returns the groups it served.
    pub fn remove_client(&mut self, client: &str) -> (Change, Vec<String>) {
        let mut left = Vec::new();
        self.groups.retain(|group, regs| {
            let before = regs.len();
            regs.retain(|r| r.client != client);
            if regs.len() != before {
                left.push(group.clone());
            }
            !regs.is_empty()
        });
        let view = derive_view(&self.groups);
        (self.install(view), left)
    }

    /// A registration by another client or of another group that uses `name` differently.
    fn conflict(&self, client: &str, group: &str, name: &str) -> Option<(String, String)> {
        for (g, regs) in &self.groups {
            for r in regs {
                if r.client == client && g == group {
                    continue;
                }
                for t in &r.tools {
                    let other = &t.def.name;
                    if other.eq_ignore_ascii_case(name) && (g != group || other != name) {
                        return Some((g.clone(), other.clone()));
                    }
                }
            }
        }
        None
    }

    fn install(&mut self, view: BTreeMap<String, Visible>) -> Change {
        let same = view.len() == self.view.len()
            && view.iter().zip(self.view.iter()).all(|((a, va), (b, vb))| {
                a == b && va.spec.group == vb.spec.group && va.spec.def == vb.spec.def
            });
        self.view = view;
        if same {
            Change::Unchanged
        } else {
            self.revision += 1;
            Change::Changed
        }
    }

    /// `GET /api/v1/client-tools`.
    pub fn list(&self) -> ToolList {
        ToolList {
            revision: self.revision,
            tools: self
                .view
                .values()
                .map(|v| ListedTool {
                    group: v.spec.group.clone(),
                    name: v.spec.def.name.clone(),
                    description: v.spec.def.description.clone(),
                    input_schema: v.spec.def.input_schema.clone(),
                    timeout_s: v.spec.timeout_s,
                    label: v.spec.def.label.clone(),
                    clients: v.clients.clone(),
                })
                .collect(),
        }
    }

    /// Groups with at least one registration, and who serves them.
    pub fn groups(&self) -> BTreeMap<String, BTreeSet<ClientId>> {
        self.groups
            .iter()
            .map(|(g, regs)| (g.clone(), regs.iter().map(|r| r.client.clone()).collect()))
            .collect()
    }
}

/// The view: per group, the most recent registration's definition of each name wins.
fn derive_view(groups: &BTreeMap<String, Vec<Registration>>) -> BTreeMap<String, Visible> {
    let mut view: BTreeMap<String, Visible> = BTreeMap::new();
    for regs in groups.values() {
        let mut by_recency: Vec<&Registration> = regs.iter().collect();
        by_recency.sort_by_key(|r| std::cmp::Reverse(r.order));
        for r in by_recency {
            for t in &r.tools {
                view.entry(t.def.name.clone())
                    .and_modify(|v| v.clients.push(r.client.clone()))
                    .or_insert_with(|| Visible {
                        spec: t.clone(),
                        clients: vec![r.client.clone()],
                    });
            }
        }
    }
    view
}
