//! Registration: groups of tools in, the lints, the operator's approval, the tool list.

use leo_protocol::ErrorCode;
use leo_protocol::console::{ASK_HUMAN, CONSOLE_GROUP};
use leo_protocol::requests::{Approved, Registered, ToolList};
use leo_protocol::tool::{RegisterBody, ToolDef};
use tracing::{info, warn};

use super::Broker;
use crate::refusal::Refusal;
use crate::registry::Registry;

impl Broker {
    /// `POST /api/v1/client-tools`: [`Broker::register`], answered with `pin_definitions` only
    /// once what agents are offered is on disk (the reference a changed definition is held
    /// against), as accepted work is; without, it is written with the next commit.
    pub async fn register_answered(
        &self,
        caller: &str,
        body: RegisterBody,
    ) -> Result<Registered, Refusal> {
        if self.config.client_tools.pin_definitions {
            self.accepted(|| self.register(caller, body)).await
        } else {
            self.register(caller, body)
        }
    }

    /// Registers `body`'s group for `caller` (the token's principal, `history::who`).
    pub fn register(&self, caller: &str, mut body: RegisterBody) -> Result<Registered, Refusal> {
        if body.group == CONSOLE_GROUP {
            return Err(Refusal::new(
                ErrorCode::NameConflict,
                format!(
                    "at $.group: group {CONSOLE_GROUP:?} is reserved for the web console's {ASK_HUMAN}"
                ),
            ));
        }
        let offers = crate::offers::OfferSet::take(&mut body)?;
        let specs = Registry::prepare(
            &body.group,
            body.tools,
            body.agents.clone(),
            self.config.client_tools.default_timeout_s,
        )?;
        let mut core = self.lock();
        Self::require_provider(&core, &body.client_id, caller)?;
        core.offers.check(&body.group, &offers)?;
        let names: Vec<String> = specs.iter().map(|s| s.def.name.clone()).collect();
        let defs: Vec<ToolDef> = specs.iter().map(|s| s.def.clone()).collect();
        let change = core
            .registry
            .register(&body.client_id, &body.group, specs)?;
        if core
            .offers
            .register(&body.client_id, &body.group, body.agents, offers)
        {
            self.offers_changed(&core);
        }
        if names.is_empty() {
            core.owners.release_group(&body.client_id, &body.group);
        }
        let warnings = Self::lint(&core.registry, &body.group, &defs);
        for w in &warnings {
            warn!(group = %body.group, warning = %w, "registration warning");
        }
        core.registry.set_warnings(&body.group, warnings.clone());
        if let Err(e) = core.ever.remember(names.iter().map(String::as_str)) {
            // The registration stands; the file is retried on the next new name.
            warn!(error = %e, "cannot write client-tools.json");
        }
        // Calls that waited for this client to come back are decided by what it serves now
        // (by `after_change` itself when the agents' view changed).
        let waited = Self::registered(&mut core, &body.client_id, &body.group);
        let changed = change == crate::registry::Change::Changed;
        let ended = if waited && !changed {
            Self::end_unserved(&mut core)
        } else {
            Vec::new()
        };
        self.after_change(&mut core, change, ended);
        self.audit_definitions(&core, caller, &names, changed);
        self.touched();
        let revision = core.registry.revision();
        info!(client_id = %body.client_id, group = %body.group, tools = names.len(), revision, "group registered");
        Ok(Registered {
            group: body.group,
            revision,
            tools: names,
            warnings,
        })
    }

    /// Audits the definitions a registration changed (the `client_tools.changed` digests) or
    /// left waiting for approval, as `caller`, the registering token's principal.
    fn audit_definitions(&self, core: &super::Core, caller: &str, names: &[String], changed: bool) {
        let principal = caller.to_owned();
        let kind = crate::history::kind_of(&principal);
        let replaced = if changed {
            core.registry.last_changed()
        } else {
            &[]
        };
        for name in replaced {
            let digest = core.registry.visible(name).map(|v| v.spec.digest.clone());
            let who = (principal.clone(), kind);
            self.history
                .audit(who, "definition_changed", Some(name), digest);
        }
        for name in names {
            if let Some(held) = core.registry.held_digest(name) {
                let who = (principal.clone(), kind);
                let digest = Some(held.to_owned());
                self.history
                    .audit(who, "definition_held", Some(name), digest);
            }
        }
    }

    /// The registration lints of `group`'s `defs`, against the other groups' visible tools.
    fn lint(registry: &Registry, group: &str, defs: &[ToolDef]) -> Vec<String> {
        let refs: Vec<&ToolDef> = defs.iter().collect();
        let others = registry
            .view()
            .values()
            .filter(|v| v.spec.group != group)
            .map(|v| v.spec.def.name.as_str());
        crate::lints::warnings(&refs, others)
    }

    /// The operator approves `tool`'s changed definition (`pin_definitions`): agents are
    /// offered it from now on, and their calls are checked against it. Answered once the
    /// approval is on disk, so that it outlives a restart.
    pub async fn approve(&self, tool: &str) -> Result<Approved, Refusal> {
        self.accepted(|| self.approve_now(tool)).await
    }

    fn approve_now(&self, tool: &str) -> Result<Approved, Refusal> {
        let mut core = self.lock();
        let (change, digest) = core.registry.approve(tool)?;
        self.after_change(&mut core, change, Vec::new());
        self.touched();
        let revision = core.registry.revision();
        info!(
            tool,
            digest, revision, "changed tool definition approved by the operator"
        );
        Ok(Approved {
            tool: tool.to_owned(),
            digest,
            revision,
        })
    }

    /// `GET /api/v1/client-tools`.
    pub fn tools(&self) -> ToolList {
        let mut list = self.lock().registry.list();
        for t in &mut list.tools {
            t.needs_approval = self
                .config
                .approvals
                .needed_by_all(&t.name, t.needs_approval);
        }
        list
    }
}
