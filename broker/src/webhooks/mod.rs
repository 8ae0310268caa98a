//! Webhook providers: apps that cannot hold an event stream (a CI job's endpoint, a serverless
//! function, a service restarted at will) are called by the broker instead.
//!
//! To the core a webhook is a provider like any stream: a `client_id` that registers one group
//! and claims and settles calls through the same operations (`Broker::register`,
//! `Broker::post_result` with `claim: true`), so every registration rule and the exactly-once
//! ending hold alike. What a stream's SSE connection does is done here by the broker itself:
//! `dispatch` follows the event bus like a provider stream would, and each call of a webhook's
//! group gets a delivery task that POSTs the signed `client_tool.request` (retrying with
//! backoff until it is answered, accepted, or the call ends), and takes an inline answer in one
//! step. `client_tool.cancelled` is delivered the same way.
//!
//! An approver that cannot hold a stream has a webhook of another kind (`approvals` in
//! `Stored`, created by `POST /api/v1/approvals/webhooks`): it joins no group and is sent, signed
//! the same way, each `client_tool.approval_requested` its owner may decide (`dispatch`), and
//! answers over the approval routes with its owner's token.
//!
//! Parts: `url` (where a webhook may be called), `sign` (Standard Webhooks signatures),
//! `deliver` (one HTTP attempt), `dispatch` (the bus follower and the delivery tasks), `store`
//! (`state/webhooks.json`).

mod deliver;
mod dispatch;
pub mod sign;
pub mod store;
pub mod url;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use leo_protocol::ErrorCode;
use leo_protocol::approvals::{
    ApprovalWebhookBody, ApprovalWebhookCreated, ApprovalWebhookInfo, ApprovalWebhookList,
};
use leo_protocol::names::RequestId;
use leo_protocol::tool::RegisterBody;
use leo_protocol::webhooks::{
    UNHEALTHY_AFTER, WebhookBody, WebhookCreated, WebhookHealth, WebhookInfo, WebhookList,
    WebhookRemoved,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::core::Broker;
use crate::refusal::Refusal;
use store::{Change, Store, Stored};
use url::Target;

/// One webhook provider while the broker runs.
struct Hook {
    stored: Stored,
    /// The checked url; an error when the config no longer allows it (kept, so removing it
    /// still works, and shown as its health).
    target: Result<Target, url::UrlRefused>,
    key: Arc<[u8]>,
    health: WebhookHealth,
}

/// A call delivered (or being delivered) to a webhook, until it ends.
struct Delivery {
    hook: String,
    /// Stops the delivery's retries.
    stop: CancellationToken,
}

#[derive(Default)]
struct State {
    hooks: BTreeMap<String, Hook>,
    calls: HashMap<RequestId, Delivery>,
}

/// Every webhook provider, and the calls delivered to them.
pub struct Webhooks {
    broker: Arc<Broker>,
    store: Store,
    allowed_hosts: Vec<String>,
    /// The largest inline answer read (`web.max_body_bytes`, as for a posted result).
    max_answer: usize,
    state: Mutex<State>,
    /// Held across a change's write, so that changes are kept in the order they are made
    /// (the state's lock is never held across an await).
    changes: tokio::sync::Mutex<()>,
}

/// Every webhook as stored, in name order.
fn all_of(state: &State) -> Vec<Stored> {
    state.hooks.values().map(|h| h.stored.clone()).collect()
}

fn internal(what: &str, e: impl std::fmt::Display) -> Refusal {
    warn!(error = %e, "{what}");
    Refusal::new(ErrorCode::Internal, what.to_owned())
}

impl Webhooks {
    /// Brings back the stored webhooks (each joins and registers its group again, under its
    /// own `client_id`) and starts following the bus.
    pub fn start(broker: Arc<Broker>, store: Store, stored: Vec<Stored>) -> Arc<Webhooks> {
        let config = broker.config();
        let hooks = Arc::new(Webhooks {
            allowed_hosts: config.webhooks.allowed_hosts.clone(),
            max_answer: config.web.max_body_bytes,
            broker: broker.clone(),
            store,
            state: Mutex::new(State::default()),
            changes: tokio::sync::Mutex::new(()),
        });
        for w in stored {
            if w.approvals {
                // An approver's webhook serves no group: it only receives.
            } else if let Err(e) = hooks.join(&w) {
                warn!(webhook = %w.name, error = %e, "a stored webhook could not register its group");
            }
            let hook = hooks.hook(w);
            hooks.lock().hooks.insert(hook.stored.name.clone(), hook);
        }
        broker.tasks().spawn(dispatch::run(hooks.clone()));
        hooks
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before anything that can panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hook(&self, stored: Stored) -> Hook {
        let target = Target::parse(&stored.url, &self.allowed_hosts);
        let key: Arc<[u8]> = sign::key_of(&stored.secret).unwrap_or_default().into();
        let health = match &target {
            Ok(_) => WebhookHealth {
                healthy: true,
                ..WebhookHealth::default()
            },
            Err(e) => WebhookHealth {
                healthy: false,
                last_error: Some(e.to_string()),
                ..WebhookHealth::default()
            },
        };
        Hook {
            stored,
            target,
            key,
            health,
        }
    }

    /// The webhook joins the core as a provider and registers its group, as its owner.
    fn join(&self, w: &Stored) -> Result<leo_protocol::requests::Registered, Refusal> {
        self.broker
            .join_webhook(&w.client_id, &w.name, &w.url, &w.owner)?;
        let registered = self.broker.register(
            &w.owner,
            RegisterBody {
                client_id: w.client_id.clone().into(),
                group: w.group.clone(),
                tools: w.tools.clone(),
                agents: w.agents.clone(),
                prompts: Vec::new(),
                resources: Vec::new(),
                resource_templates: Vec::new(),
            },
        );
        if registered.is_err() {
            self.broker.leave_webhook(&w.client_id);
        }
        registered
    }

    /// `POST /api/v1/client-tools/webhooks`, by `caller` (the token's principal), who owns it.
    /// Kept (`store::Store::save`) before it answers; a change waits for the one before it.
    pub async fn create(&self, caller: &str, body: WebhookBody) -> Result<WebhookCreated, Refusal> {
        self.check_new(&body.name, &body.url)?;
        let _one_change = self.changes.lock().await;
        let stored = self.new_stored(caller, body.name, body.url, false)?;
        let stored = Stored {
            group: body.group,
            tools: body.tools,
            agents: body.agents,
            client_id: crate::tokens::random_id("c_"),
            ..stored
        };
        let registered = self.join(&stored)?;
        self.keep(&stored).await?;
        info!(webhook = %stored.name, client_id = %stored.client_id, group = %stored.group, "webhook provider created");
        Ok(WebhookCreated {
            name: stored.name,
            client_id: stored.client_id.into(),
            url: stored.url,
            group: registered.group,
            secret: stored.secret,
            revision: registered.revision,
            tools: registered.tools,
            warnings: registered.warnings,
        })
    }

    /// `POST /api/v1/approvals/webhooks`, by `caller`, who must be an approver
    /// (`approvals.approvers`): its webhook is sent the approval requests `caller` may decide.
    pub async fn create_approvals(
        &self,
        caller: &str,
        body: ApprovalWebhookBody,
    ) -> Result<ApprovalWebhookCreated, Refusal> {
        if !self.broker.config().approvals.may_approve(caller) {
            return Err(Refusal::new(
                ErrorCode::Forbidden,
                format!("{caller} is not an approver (approvals.approvers)"),
            ));
        }
        self.check_new(&body.name, &body.url)?;
        let _one_change = self.changes.lock().await;
        let stored = self.new_stored(caller, body.name, body.url, true)?;
        self.keep(&stored).await?;
        info!(webhook = %stored.name, owner = %stored.owner, "approval webhook created");
        Ok(ApprovalWebhookCreated {
            name: stored.name,
            url: stored.url,
            secret: stored.secret,
        })
    }

    /// A new webhook's name and url, checked before the change lock is taken.
    fn check_new(&self, name: &str, url: &str) -> Result<(), Refusal> {
        if !leo_protocol::names::is_name(name) {
            return Err(Refusal::new(
                ErrorCode::InvalidParameter,
                format!("at $.name: {name:?} is not 1 to 64 of A-Z a-z 0-9 _ . -"),
            ));
        }
        Target::parse(url, &self.allowed_hosts)
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, format!("at $.url: {m}")))?;
        Ok(())
    }

    /// A new webhook named `name` (free, under the change lock) with a new secret.
    fn new_stored(
        &self,
        caller: &str,
        name: String,
        url: String,
        approvals: bool,
    ) -> Result<Stored, Refusal> {
        if self.lock().hooks.contains_key(&name) {
            return Err(Refusal::new(
                ErrorCode::NameConflict,
                format!(
                    "at $.name: a webhook named {name:?} exists; remove it first (leo webhook rm {name})"
                ),
            ));
        }
        let secret = sign::new_secret().map_err(|e| internal("no randomness for a secret", e))?;
        Ok(Stored {
            name,
            url,
            group: String::new(),
            tools: Vec::new(),
            agents: None,
            client_id: String::new(),
            secret,
            created_at: leo_protocol::time::now(),
            owner: caller.to_owned(),
            approvals,
        })
    }

    /// Puts a new webhook in the state, then keeps it; undone (and a provider's group left)
    /// when it cannot be kept.
    async fn keep(&self, stored: &Stored) -> Result<(), Refusal> {
        // In the state before it is kept: a call of its group parked meanwhile is delivered.
        let all = {
            let mut state = self.lock();
            let hook = self.hook(stored.clone());
            state.hooks.insert(hook.stored.name.clone(), hook);
            all_of(&state)
        };
        if let Err(e) = self.store.save(Change::Added(stored), &all).await {
            self.lock().hooks.remove(&stored.name);
            if !stored.approvals {
                self.broker.leave_webhook(&stored.client_id);
            }
            return Err(internal(
                "cannot keep the webhooks (state/webhooks.json, or the database)",
                e,
            ));
        }
        Ok(())
    }

    /// `GET /api/v1/approvals/webhooks`: the approvers' webhooks, without secrets.
    pub fn list_approvals(&self) -> ApprovalWebhookList {
        let state = self.lock();
        ApprovalWebhookList {
            webhooks: state
                .hooks
                .values()
                .filter(|h| h.stored.approvals)
                .map(|h| ApprovalWebhookInfo {
                    name: h.stored.name.clone(),
                    url: h.stored.url.clone(),
                    owner: h.stored.owner.clone(),
                    created_at: h.stored.created_at.clone(),
                    health: h.health.clone(),
                })
                .collect(),
        }
    }

    /// `GET /api/v1/client-tools/webhooks`: every webhook, without secrets.
    pub fn list(&self) -> WebhookList {
        let state = self.lock();
        WebhookList {
            webhooks: state
                .hooks
                .values()
                .filter(|h| !h.stored.approvals)
                .map(|h| WebhookInfo {
                    name: h.stored.name.clone(),
                    client_id: h.stored.client_id.clone().into(),
                    url: h.stored.url.clone(),
                    group: h.stored.group.clone(),
                    tools: h.stored.tools.iter().map(|t| t.name.clone()).collect(),
                    created_at: h.stored.created_at.clone(),
                    health: h.health.clone(),
                })
                .collect(),
        }
    }

    /// `DELETE /api/v1/client-tools/webhooks/{name}`: the webhook leaves like a closed stream
    /// (its tools withdrawn, its calls ended), and is forgotten once that is kept. Its owner or
    /// the operator (`caller`) may remove it; to anyone else it is not found, as an unknown
    /// name. Answers with the removed webhook's `client_id`, for the audit. With `approvals`
    /// it is an approver's webhook (`DELETE /api/v1/approvals/webhooks/{name}`) that goes; a
    /// webhook of the other kind is not found.
    pub async fn remove_of(
        &self,
        caller: &str,
        name: &str,
        approvals: bool,
    ) -> Result<(WebhookRemoved, String), Refusal> {
        let _one_change = self.changes.lock().await;
        let rest = {
            let state = self.lock();
            let may = state
                .hooks
                .get(name)
                .filter(|h| h.stored.approvals == approvals)
                .is_some_and(|h| h.stored.owner == caller || caller == "operator");
            // Another principal's webhook is left in place, answered as an unknown name.
            may.then(|| {
                let mut rest = all_of(&state);
                rest.retain(|h| h.name != name);
                rest
            })
        };
        let Some(rest) = rest else {
            return Err(Refusal::new(
                ErrorCode::NotFound,
                format!("no webhook named {name:?}"),
            ));
        };
        if let Err(e) = self.store.save(Change::Removed(name), &rest).await {
            return Err(internal(
                "cannot keep the webhooks (state/webhooks.json, or the database)",
                e,
            ));
        }
        let mut state = self.lock();
        let hook = state.hooks.remove(name);
        state.calls.retain(|_, d| {
            let mine = d.hook == name;
            if mine {
                d.stop.cancel();
            }
            !mine
        });
        drop(state);
        let client_id = hook.map(|h| h.stored.client_id).unwrap_or_default();
        if !approvals {
            self.broker.leave_webhook(&client_id);
        }
        info!(webhook = name, "webhook provider removed");
        let removed = WebhookRemoved {
            name: name.to_owned(),
            removed: true,
        };
        Ok((removed, client_id))
    }

    /// Counts a delivery that worked (`None`) or failed, and shows the webhook's health.
    fn record(&self, name: &str, failure: Option<String>) {
        let mut state = self.lock();
        let Some(hook) = state.hooks.get_mut(name) else {
            return;
        };
        let h = &mut hook.health;
        match failure {
            None => {
                h.failures = 0;
                h.healthy = true;
                h.last_ok_at = Some(leo_protocol::time::now());
            }
            Some(why) => {
                h.failures = h.failures.saturating_add(1);
                if h.failures >= UNHEALTHY_AFTER && h.healthy {
                    warn!(webhook = name, failures = h.failures, error = %why, "webhook marked unhealthy");
                }
                h.healthy = h.failures < UNHEALTHY_AFTER;
                h.last_error = Some(why);
            }
        }
        let (client_id, health) = (hook.stored.client_id.clone(), h.clone());
        drop(state);
        self.broker.set_webhook_health(&client_id, health);
    }
}
