//! The catalog of prompts, resources and resource templates apps offer (`leo_protocol::offers`).
//!
//! A pure state machine beside the tool registry, with the registry's rules where they apply:
//! registrations are per client and group, what agents see of a group is its most recent
//! registration, a prompt name (case-insensitively), a resource URI and a template belong to one
//! group, and a group's `agents` scope its offers as they scope its tools. It also says which
//! app answers a read: the client of the group's most recent registration.

use std::collections::BTreeMap;
use std::sync::Arc;

use leo_protocol::ErrorCode;
use leo_protocol::offers::{
    MAX_OFFERS_PER_GROUP, OfferKind, OfferList, PromptDef, ResourceDef, ResourceTemplateDef,
};
use leo_protocol::tool::RegisterBody;
use serde_json::Value;

use crate::refusal::Refusal;
use crate::registry::ClientId;

/// What one registration offers besides tools, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OfferSet {
    pub prompts: Vec<PromptDef>,
    pub resources: Vec<ResourceDef>,
    pub templates: Vec<ResourceTemplateDef>,
}

impl OfferSet {
    fn is_empty(&self) -> bool {
        self.prompts.is_empty() && self.resources.is_empty() && self.templates.is_empty()
    }

    /// The keys that belong to one group: `prompt:NAME` (lower case), `uri:URI`,
    /// `template:TEMPLATE`.
    fn keys(&self) -> impl Iterator<Item = String> + '_ {
        let prompts = self.prompts.iter();
        let prompts = prompts.map(|p| format!("prompt {:?}", p.name.to_ascii_lowercase()));
        let uris = self
            .resources
            .iter()
            .map(|r| format!("resource {:?}", r.uri));
        let templates = self.templates.iter();
        let templates = templates.map(|t| format!("template {:?}", t.uri_template));
        prompts.chain(uris).chain(templates)
    }

    /// Takes and checks a registration body's offers, naming the JSON path at fault.
    pub fn take(body: &mut RegisterBody) -> Result<OfferSet, Refusal> {
        let set = OfferSet {
            prompts: std::mem::take(&mut body.prompts),
            resources: std::mem::take(&mut body.resources),
            templates: std::mem::take(&mut body.resource_templates),
        };
        let invalid = |m: String| Refusal::new(ErrorCode::InvalidParameter, m);
        for (field, n) in [
            ("prompts", set.prompts.len()),
            ("resources", set.resources.len()),
            ("resource_templates", set.templates.len()),
        ] {
            if n > MAX_OFFERS_PER_GROUP {
                let m = format!("at $.{field}: {n} entries, at most {MAX_OFFERS_PER_GROUP}");
                return Err(Refusal::new(ErrorCode::TooManyTools, m));
            }
        }
        let checks = set
            .prompts
            .iter()
            .enumerate()
            .map(|(i, p)| p.check(&format!("$.prompts[{i}]")));
        let checks = checks.chain(
            set.resources
                .iter()
                .enumerate()
                .map(|(i, r)| r.check(&format!("$.resources[{i}]"))),
        );
        let checks = checks.chain(
            set.templates
                .iter()
                .enumerate()
                .map(|(i, t)| t.check(&format!("$.resource_templates[{i}]"))),
        );
        for check in checks {
            check.map_err(|e| invalid(e.message))?;
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(key) = set.keys().find(|k| !seen.insert(k.clone())) {
            return Err(invalid(format!("at $: {key} is given twice")));
        }
        Ok(set)
    }
}

#[derive(Debug, Clone)]
struct Entry {
    client: ClientId,
    order: u64,
    agents: Option<Arc<[String]>>,
    set: Arc<OfferSet>,
}

impl Entry {
    fn offered_to(&self, agent: &str) -> bool {
        self.agents
            .as_deref()
            .is_none_or(|list| leo_protocol::glob::any_matches(list, agent))
    }
}

/// What agents see of one group: its name, scope and offers.
type Shown = (String, Option<Arc<[String]>>, Arc<OfferSet>);

/// Every registration's offers, by group.
#[derive(Debug, Default)]
pub struct Catalog {
    groups: BTreeMap<String, Vec<Entry>>,
    order: u64,
}

impl Catalog {
    /// Refuses `set` if another group offers one of its prompt names, URIs or templates.
    pub fn check(&self, group: &str, set: &OfferSet) -> Result<(), Refusal> {
        for (other, entries) in self.groups.iter().filter(|(g, _)| *g != group) {
            for entry in entries {
                let theirs: Vec<String> = entry.set.keys().collect();
                if let Some(key) = set.keys().find(|k| theirs.contains(k)) {
                    return Err(Refusal::new(
                        ErrorCode::NameConflict,
                        format!("{key} is offered by group {other:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Replaces `client`'s offers in `group` (an empty set withdraws them); true when what
    /// agents see changed. `check` first.
    pub fn register(
        &mut self,
        client: &str,
        group: &str,
        agents: Option<Vec<String>>,
        set: OfferSet,
    ) -> bool {
        let before = self.fingerprint();
        let entries = self.groups.entry(group.to_owned()).or_default();
        entries.retain(|e| e.client != client);
        if !set.is_empty() {
            self.order += 1;
            entries.push(Entry {
                client: client.into(),
                order: self.order,
                agents: agents.map(Into::into),
                set: Arc::new(set),
            });
        }
        if entries.is_empty() {
            self.groups.remove(group);
        }
        before != self.fingerprint()
    }

    /// Removes every offer of `client`; true when what agents see changed.
    pub fn remove_client(&mut self, client: &str) -> bool {
        let before = self.fingerprint();
        for entries in self.groups.values_mut() {
            entries.retain(|e| e.client != client);
        }
        self.groups.retain(|_, entries| !entries.is_empty());
        before != self.fingerprint()
    }

    /// Each group's most recent registration.
    fn visible(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.groups.iter().filter_map(|(g, entries)| {
            let latest = entries.iter().max_by_key(|e| e.order)?;
            Some((g, latest))
        })
    }

    fn fingerprint(&self) -> Vec<Shown> {
        let visible = self.visible();
        visible
            .map(|(g, e)| (g.clone(), e.agents.clone(), e.set.clone()))
            .collect()
    }

    /// What `agent` is offered.
    pub fn list_for(&self, agent: &str) -> OfferList {
        let mut list = OfferList::default();
        for (_, e) in self.visible().filter(|(_, e)| e.offered_to(agent)) {
            list.prompts.extend(e.set.prompts.iter().cloned());
            list.resources.extend(e.set.resources.iter().cloned());
            list.resource_templates
                .extend(e.set.templates.iter().cloned());
        }
        list
    }

    /// Which group and client answer `agent`'s read of `kind` with `params`.
    pub fn answerer(
        &self,
        agent: &str,
        kind: OfferKind,
        params: &Value,
    ) -> Result<(String, ClientId), Refusal> {
        let text = |at: &str, v: Option<&Value>| {
            v.and_then(Value::as_str).map(str::to_owned).ok_or_else(|| {
                Refusal::new(
                    ErrorCode::InvalidParameter,
                    format!("at $.params.{at}: a string is required"),
                )
            })
        };
        let found = match kind {
            OfferKind::Prompt => {
                let name = text("name", params.get("name"))?;
                self.find(agent, |s| s.prompts.iter().any(|p| p.name == name))
                    .ok_or_else(|| format!("no prompt {name:?}"))
            }
            OfferKind::Resource => {
                let uri = text("uri", params.get("uri"))?;
                self.find(agent, |s| s.resources.iter().any(|r| r.uri == uri))
                    .or_else(|| self.find(agent, |s| s.templates.iter().any(|t| t.matches(&uri))))
                    .ok_or_else(|| format!("no resource {uri:?}"))
            }
            OfferKind::Complete => self.route_completion(agent, params)?,
        };
        found.map_err(|m| Refusal::new(ErrorCode::NotFound, m))
    }

    /// `completion/complete`'s `ref`: a prompt by name, or a template (or resource) by URI.
    fn route_completion(
        &self,
        agent: &str,
        params: &Value,
    ) -> Result<Result<(String, ClientId), String>, Refusal> {
        let r = params.get("ref");
        let field = |k: &str| r.and_then(|r| r.get(k)).and_then(Value::as_str);
        Ok(match (field("type"), field("name"), field("uri")) {
            (Some("ref/prompt"), Some(name), _) => self
                .find(agent, |s| s.prompts.iter().any(|p| p.name == name))
                .ok_or_else(|| format!("no prompt {name:?}")),
            (Some("ref/resource"), _, Some(uri)) => self
                .find(agent, |s| {
                    s.templates
                        .iter()
                        .any(|t| t.uri_template == uri || t.matches(uri))
                        || s.resources.iter().any(|x| x.uri == uri)
                })
                .ok_or_else(|| format!("no resource template {uri:?}")),
            _ => {
                return Err(Refusal::new(
                    ErrorCode::InvalidParameter,
                    "at $.params.ref: {\"type\":\"ref/prompt\",\"name\"} or {\"type\":\"ref/resource\",\"uri\"} is required",
                ));
            }
        })
    }

    /// True when `client`'s offers, as agents see them, hold `uri` (a resource, or a
    /// template's match).
    pub fn offers_uri(&self, client: &str, uri: &str) -> bool {
        self.visible().any(|(_, e)| {
            e.client == client
                && (e.set.resources.iter().any(|r| r.uri == uri)
                    || e.set.templates.iter().any(|t| t.matches(uri)))
        })
    }

    fn find(&self, agent: &str, has: impl Fn(&OfferSet) -> bool) -> Option<(String, ClientId)> {
        self.visible()
            .find(|(_, e)| e.offered_to(agent) && has(&e.set))
            .map(|(g, e)| (g.clone(), e.client.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(prompt: &str, uri: &str) -> OfferSet {
        OfferSet {
            prompts: vec![PromptDef {
                name: prompt.into(),
                title: None,
                description: None,
                arguments: vec![],
            }],
            resources: vec![ResourceDef {
                uri: uri.into(),
                name: "r".into(),
                title: None,
                description: None,
                mime_type: None,
            }],
            templates: vec![],
        }
    }

    #[test]
    fn the_latest_registration_of_a_group_answers_and_scopes() {
        let mut c = Catalog::default();
        assert!(c.register("c1", "g", None, set("p", "test://a")));
        assert!(!c.register("c1", "g", None, set("p", "test://a")));
        assert!(c.register("c2", "g", Some(vec!["bob".into()]), set("p", "test://b")));
        let route = c
            .answerer("bob", OfferKind::Prompt, &json!({"name": "p"}))
            .unwrap();
        assert_eq!(route, ("g".to_owned(), ClientId::from("c2")));
        // The group's latest registration names bob only.
        assert!(c.list_for("alice").prompts.is_empty());
        let e = c
            .answerer("alice", OfferKind::Prompt, &json!({"name": "p"}))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        assert!(c.remove_client("c2"));
        assert_eq!(c.list_for("alice").resources[0].uri, "test://a");
    }

    #[test]
    fn names_and_uris_belong_to_one_group() {
        let mut c = Catalog::default();
        c.register("c1", "g", None, set("Ask", "test://a"));
        let e = c.check("h", &set("ask", "test://z")).unwrap_err();
        assert_eq!(e.code, ErrorCode::NameConflict);
        let e = c.check("h", &set("other", "test://a")).unwrap_err();
        assert!(e.message.contains("resource \"test://a\""), "{}", e.message);
        assert!(c.check("g", &set("ask", "test://a")).is_ok());
    }

    #[test]
    fn completion_refs_route_to_prompts_and_templates() {
        let mut c = Catalog::default();
        let mut s = set("p", "test://a");
        s.templates.push(ResourceTemplateDef {
            uri_template: "test://t/{id}".into(),
            name: "t".into(),
            title: None,
            description: None,
            mime_type: None,
        });
        c.register("c1", "g", None, s);
        for r in [
            json!({"type": "ref/prompt", "name": "p"}),
            json!({"type": "ref/resource", "uri": "test://t/{id}"}),
        ] {
            assert!(
                c.answerer("a", OfferKind::Complete, &json!({"ref": r}))
                    .is_ok(),
                "{r}"
            );
        }
        let read = c.answerer("a", OfferKind::Resource, &json!({"uri": "test://t/7"}));
        assert!(read.is_ok());
        let bad = c
            .answerer("a", OfferKind::Complete, &json!({"ref": {}}))
            .unwrap_err();
        assert_eq!(bad.code, ErrorCode::InvalidParameter);
    }
}
