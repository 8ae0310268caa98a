//! Registrations: which connected client serves which group of tools, and the tool set agents
//! see.
//!
//! A group is a name shared across clients: two devices running the same app register the same
//! group, and the first to claim an agent's call owns that agent's group (see `ownership`). A
//! tool name belongs to exactly one group (case-insensitively); the definition agents see is the
//! most recent registration of the group that contains it. The `revision` moves only when what
//! agents see changes, so an app re-registering the same tools wakes nobody.
//!
//! The registry also remembers, per tool name, the definition agents were last offered (by
//! its digest), so a re-registration that changes a definition is reported, and with
//! `pin_definitions` held back: the previous definition, with its own argument checks, stays
//! offered until the operator approves the new one. A trusted tool cannot change behind an
//! agent's back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use leo_protocol::ErrorCode;
use leo_protocol::limits::{MAX_TOOLS_PER_BROKER, MAX_TOOLS_PER_GROUP};
use leo_protocol::requests::{ListedTool, ToolList};
use leo_protocol::tool::{ToolDef, is_valid_group_name};

use crate::refusal::Refusal;

/// A connected client's id, as given in its stream's `hello`.
pub use leo_protocol::names::ClientId;

/// A tool as registered, with its compiled argument validator.
pub struct ToolSpec {
    pub group: String,
    pub def: ToolDef,
    /// `None` for a handoff (`timeout_s: 0`).
    pub timeout_s: Option<u64>,
    pub validator: jsonschema::Validator,
    /// The compiled `output_schema`, if the tool has one: results must carry matching
    /// `structured_content`.
    pub output: Option<jsonschema::Validator>,
    /// The agents the group's registration names (`agents`); `None` means every agent.
    pub agents: Option<Arc<[String]>>,
    /// `sha256:` of the definition as registered.
    pub digest: String,
}

impl ToolSpec {
    /// True when the registration offers this tool to `agent` (by `leo_protocol::glob`).
    pub fn offered_to(&self, agent: &str) -> bool {
        self.agents
            .as_deref()
            .is_none_or(|list| leo_protocol::glob::any_matches(list, agent))
    }

    /// The same definition under another registration's group and scope (a pinned definition
    /// offered for a group that re-registered).
    fn rescoped(&self, like: &ToolSpec) -> Option<ToolSpec> {
        Some(ToolSpec {
            group: like.group.clone(),
            def: self.def.clone(),
            timeout_s: self.timeout_s,
            validator: jsonschema::validator_for(&self.def.input_schema).ok()?,
            output: match &self.def.output_schema {
                Some(schema) => Some(jsonschema::validator_for(schema).ok()?),
                None => None,
            },
            agents: like.agents.clone(),
            digest: self.digest.clone(),
        })
    }
}

/// `value` as JSON with every object's keys sorted, so equal definitions hash equally however
/// the app ordered its keys.
fn canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `sha256:` and the hex digest of a definition's JSON, keys sorted.
pub fn digest_of(def: &ToolDef) -> String {
    digest_of_value(&serde_json::to_value(def).unwrap_or_default())
}

/// `sha256:` of `value`'s canonical JSON (keys sorted, compact): the same for every spelling of
/// the same value.
pub fn digest_of_value(value: &serde_json::Value) -> String {
    use sha2::Digest;
    let mut text = String::new();
    canonical(value, &mut text);
    let hash = sha2::Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
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

/// The tool names of a client's registrations, by group.
pub type Served = BTreeMap<String, BTreeSet<String>>;

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
    /// Hold changed definitions until approved (`client_tools.pin_definitions`).
    pin: bool,
    /// Per name, the definition agents were last offered; kept after a withdrawal, so an app
    /// that comes back with another definition is noticed.
    seen: BTreeMap<String, Arc<ToolSpec>>,
    /// What changed since `take_journal`, for the store: `seen` (pinning outlives a restart
    /// and a takeover) and who registered what (a mirror for operators).
    journal: Vec<Journal>,
    /// Per name, a changed definition held back by pinning.
    held: BTreeMap<String, Arc<ToolSpec>>,
    /// Per name, when its offered definition last changed.
    changed_at: BTreeMap<String, String>,
    /// What the last change of the view changed: definitions replaced.
    last_changed: Vec<String>,
    /// Per group, the warnings of its last registration.
    warnings: BTreeMap<String, Vec<String>>,
}

/// How many remembered definitions are kept beyond the visible ones.
const MAX_SEEN: usize = 4 * MAX_TOOLS_PER_BROKER;

/// A change the store keeps, as `Registry::take_journal` reports it.
#[derive(Debug)]
pub enum Journal {
    /// Agents were offered this definition under its name.
    Offered(Arc<ToolSpec>),
    /// The definition offered under this name is no longer remembered.
    Forgotten(String),
    /// `client` serves `group` with these tools (none: it withdrew the group).
    Registered {
        client: ClientId,
        group: String,
        tools: Vec<String>,
    },
    /// `client` serves nothing any more.
    Left(ClientId),
}

/// What a change did to the agents' view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Changed,
}

impl Registry {
    pub fn new(pin: bool) -> Registry {
        Registry {
            pin,
            ..Registry::default()
        }
    }

    /// What changed since the last call, oldest first.
    pub fn take_journal(&mut self) -> Vec<Journal> {
        std::mem::take(&mut self.journal)
    }

    /// Puts back the definitions agents were offered before a restart or a takeover, so that
    /// pinning holds a changed one back as if the broker had not stopped. Each is checked and
    /// compiled as a registration is; one that no longer passes is left out, with a warning.
    pub fn restore_seen(
        &mut self,
        defs: impl IntoIterator<Item = (String, ToolDef)>,
        default_timeout_s: u64,
    ) {
        for (group, def) in defs {
            let name = def.name.clone();
            match Registry::prepare(&group, vec![def], None, default_timeout_s) {
                Ok(mut specs) => {
                    if let Some(spec) = specs.pop() {
                        self.seen.insert(name, spec);
                    }
                }
                Err(e) => {
                    tracing::warn!(tool = %name, error = %e.message, "a stored tool definition no longer checks; forgotten")
                }
            }
        }
    }

    /// Names whose changed definition waits for approval, sorted.
    pub fn awaiting_approval(&self) -> Vec<String> {
        self.held.keys().cloned().collect()
    }

    /// The digest of `name`'s held definition, if one waits.
    pub fn held_digest(&self, name: &str) -> Option<&str> {
        self.held.get(name).map(|s| s.digest.as_str())
    }

    /// Tools whose offered definition the last change replaced.
    pub fn last_changed(&self) -> &[String] {
        &self.last_changed
    }

    /// When `name`'s offered definition last changed, if it did.
    pub fn changed_at(&self, name: &str) -> Option<&String> {
        self.changed_at.get(name)
    }

    /// Each group's last registration warnings.
    pub fn warnings(&self) -> &BTreeMap<String, Vec<String>> {
        &self.warnings
    }

    /// Records `group`'s registration warnings (none clears them).
    pub fn set_warnings(&mut self, group: &str, warnings: Vec<String>) {
        if warnings.is_empty() {
            self.warnings.remove(group);
        } else {
            self.warnings.insert(group.to_owned(), warnings);
        }
    }

    /// True when some visible tool is offered to chosen agents only.
    pub fn scoped(&self) -> bool {
        self.view.values().any(|v| v.spec.agents.is_some())
    }

    /// The operator approves `name`'s held definition: it is offered from now on.
    pub fn approve(&mut self, name: &str) -> Result<(Change, String), Refusal> {
        let Some(spec) = self.held.remove(name) else {
            return Err(Refusal::new(
                ErrorCode::NotFound,
                format!("no changed definition of tool {name:?} awaits approval"),
            ));
        };
        let view = self.derive_accepting(&self.groups.clone(), Some(name));
        Ok((self.install(view), spec.digest.clone()))
    }

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

    /// What `client` serves: the tool names of its registrations, by group.
    pub fn served_by(&self, client: &str) -> Served {
        let mut served = Served::new();
        for (group, regs) in &self.groups {
            for r in regs.iter().filter(|r| r.client == client) {
                let names = r.tools.iter().map(|t| t.def.name.clone());
                served.entry(group.clone()).or_default().extend(names);
            }
        }
        served.retain(|_, names| !names.is_empty());
        served
    }

    /// Checks and compiles every tool of a registration body, without changing anything.
    pub fn prepare(
        group: &str,
        defs: Vec<ToolDef>,
        agents: Option<Vec<String>>,
        default_timeout_s: u64,
    ) -> Result<Vec<Arc<ToolSpec>>, Refusal> {
        if let Some(list) = &agents {
            leo_protocol::tool::check_agent_patterns(list)
                .map_err(|e| Refusal::new(ErrorCode::InvalidParameter, e.message))?;
        }
        let agents: Option<Arc<[String]>> = agents.map(Into::into);
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
        for (i, mut def) in defs.into_iter().enumerate() {
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
            let output = match &def.output_schema {
                Some(schema) => Some(jsonschema::validator_for(schema).map_err(|e| {
                    Refusal::new(
                        ErrorCode::InvalidTool,
                        format!("at {at}.output_schema: {e}"),
                    )
                })?),
                None => None,
            };
            specs.push(Arc::new(ToolSpec {
                group: group.to_owned(),
                timeout_s: def.effective_timeout_s(default_timeout_s),
                digest: digest_of(&def),
                def,
                validator,
                output,
                agents: agents.clone(),
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
        let specs_names: Vec<String> = specs.iter().map(|s| s.def.name.clone()).collect();
        // Registrations share their compiled tools, so this copy is cheap.
        let mut next = self.groups.clone();
        let regs = next.entry(group.to_owned()).or_default();
        regs.retain(|r| r.client != client);
        if !specs.is_empty() {
            self.order += 1;
            regs.push(Registration {
                client: client.into(),
                order: self.order,
                tools: specs,
            });
        }
        if regs.is_empty() {
            next.remove(group);
        }
        let view = self.derive(&next);
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
        self.journal.push(Journal::Registered {
            client: client.into(),
            group: group.to_owned(),
            tools: specs_names,
        });
        Ok(self.install(view))
    }

    /// Removes every registration of `client`; returns the groups it served.
    pub fn remove_client(&mut self, client: &str) -> (Change, Vec<String>) {
        self.journal.push(Journal::Left(client.into()));
        let mut left = Vec::new();
        self.groups.retain(|group, regs| {
            let before = regs.len();
            regs.retain(|r| r.client != client);
            if regs.len() != before {
                left.push(group.clone());
            }
            !regs.is_empty()
        });
        let view = self.derive(&self.groups.clone());
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

    /// The view of `groups` as agents are offered it: the latest definitions, except that with
    /// pinning a changed definition is held and the one agents saw stays. Held definitions are
    /// recorded in `self.held`.
    fn derive(
        &mut self,
        groups: &BTreeMap<String, Vec<Registration>>,
    ) -> BTreeMap<String, Visible> {
        self.derive_accepting(groups, None)
    }

    /// `derive`, offering `accept`'s latest definition whatever agents saw before (approval).
    fn derive_accepting(
        &mut self,
        groups: &BTreeMap<String, Vec<Registration>>,
        accept: Option<&str>,
    ) -> BTreeMap<String, Visible> {
        let mut view = derive_view(groups);
        self.held.retain(|name, _| view.contains_key(name));
        if !self.pin {
            return view;
        }
        for (name, v) in view.iter_mut() {
            let Some(seen) = self.seen.get(name) else {
                continue;
            };
            if accept == Some(name.as_str()) {
                continue;
            }
            if seen.digest == v.spec.digest {
                self.held.remove(name);
                continue;
            }
            if let Some(pinned) = seen.rescoped(&v.spec) {
                let latest = std::mem::replace(&mut v.spec, Arc::new(pinned));
                if self
                    .held
                    .get(name)
                    .is_none_or(|h| h.digest != latest.digest)
                {
                    tracing::warn!(tool = %name, offered = %seen.digest, held = %latest.digest, "changed tool definition held until the operator approves it");
                }
                self.held.insert(name.clone(), latest);
            }
        }
        view
    }

    fn install(&mut self, view: BTreeMap<String, Visible>) -> Change {
        let same = view.len() == self.view.len()
            && view.iter().zip(self.view.iter()).all(|((a, va), (b, vb))| {
                a == b
                    && va.spec.group == vb.spec.group
                    && va.spec.digest == vb.spec.digest
                    && va.spec.agents == vb.spec.agents
            });
        let mut changed = Vec::new();
        for (name, v) in &view {
            let before = self.seen.insert(name.clone(), v.spec.clone());
            if before.as_ref().is_none_or(|b| b.digest != v.spec.digest) {
                self.journal.push(Journal::Offered(v.spec.clone()));
            }
            if before.is_some_and(|b| b.digest != v.spec.digest) {
                changed.push(name.clone());
                self.changed_at
                    .insert(name.clone(), leo_protocol::time::now());
            }
        }
        if !changed.is_empty() {
            tracing::warn!(tools = ?changed, "tool definitions changed; agents are offered the new ones");
        }
        if self.seen.len() > MAX_SEEN {
            let log = &mut self.journal;
            self.seen.retain(|name, _| {
                let keep = view.contains_key(name);
                if !keep {
                    log.push(Journal::Forgotten(name.clone()));
                }
                keep
            });
            self.changed_at.retain(|name, _| view.contains_key(name));
        }
        let groups = &self.groups;
        self.warnings.retain(|g, _| groups.contains_key(g));
        self.view = view;
        if !same {
            self.last_changed = changed;
        }
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
                    title: v.spec.def.title.clone(),
                    annotations: v.spec.def.annotations,
                    output_schema: v.spec.def.output_schema.clone(),
                    execution: v.spec.def.execution,
                    clients: v.clients.clone(),
                    agents: v.spec.agents.as_deref().map(<[String]>::to_vec),
                    digest: v.spec.digest.clone(),
                    awaiting_approval: self.held_digest(&v.spec.def.name).map(str::to_owned),
                    // The app's requirement; the operator's rules are added by the core.
                    needs_approval: v.spec.def.approval.is_some(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(description: &str) -> Vec<Arc<ToolSpec>> {
        let def: ToolDef = serde_json::from_value(serde_json::json!({
            "name": "echo", "description": description, "input_schema": {"type": "object"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Registry::prepare("g", vec![def], None, 60).unwrap_or_else(|e| panic!("{}", e.message))
    }

    #[test]
    fn a_pinned_change_waits_for_approval_then_is_reported() {
        let mut r = Registry::new(true);
        assert_eq!(r.register("c", "g", echo("v1")).ok(), Some(Change::Changed));
        assert!(
            r.last_changed().is_empty(),
            "a first definition is no change"
        );
        assert_eq!(
            r.register("c", "g", echo("v2")).ok(),
            Some(Change::Unchanged)
        );
        assert_eq!(r.awaiting_approval(), ["echo"]);
        assert_eq!(r.view()["echo"].spec.def.description, "v1");
        let approved = r.approve("echo").map(|(c, _)| c).ok();
        assert_eq!(approved, Some(Change::Changed));
        assert_eq!(r.view()["echo"].spec.def.description, "v2");
        assert_eq!(r.last_changed(), ["echo"]);
        assert!(r.awaiting_approval().is_empty());
    }

    #[test]
    fn served_by_names_a_clients_own_tools_by_group() {
        let mut r = Registry::new(false);
        r.register("phone", "g", echo("v1"))
            .unwrap_or_else(|e| panic!("{}", e.message));
        r.register("mac", "g", echo("v1"))
            .unwrap_or_else(|e| panic!("{}", e.message));
        r.register("phone", "h", Vec::new())
            .unwrap_or_else(|e| panic!("{}", e.message));
        let served = r.served_by("phone");
        assert_eq!(served.len(), 1, "{served:?}");
        assert!(served["g"].contains("echo"));
        r.register("phone", "g", Vec::new())
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(r.served_by("phone").is_empty());
        assert!(r.served_by("mac")["g"].contains("echo"));
    }

    #[test]
    fn digests_ignore_key_order_but_not_content() {
        let a: ToolDef = serde_json::from_str(
            r#"{"name":"t","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let b: ToolDef = serde_json::from_str(
            r#"{"input_schema":{"properties":{"a":{"type":"string"}},"type":"object"},"description":"d","name":"t"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(digest_of(&a), digest_of(&b));
        let mut c = a.clone();
        c.label = Some("L".into());
        assert_ne!(digest_of(&a), digest_of(&c));
        assert!(digest_of(&a).starts_with("sha256:"));
    }
}
