//! Event streams: a client opens one, and its leaving withdraws what it registered.
//!
//! A provider stream gets a resume key in its `hello`. When it drops, its tools are withdrawn
//! from the agents' lists at once (a new call to them is refused), but what it was doing waits
//! for `client_tools.resume_grace_s`: its claims, its ownership, and the calls parked for the
//! tools it served (`Core::left`), since a dropped connection (a laptop asleep, a network
//! blip, its broker instance killed in a cluster) must not cancel calls an agent waits on. An
//! app that reopens its stream with the key (after a dropped connection or a broker restart)
//! is the same client again: it registers its groups again, is offered the parked calls, and
//! posts its results as before. One that does not come back loses its claims, which are parked
//! and offered again, and its ownership; the calls nobody serves then end `tool_withdrawn`. An
//! app that withdraws a group (registers it with no tools) ends its calls at once, as does a
//! provider without a resume key (a webhook) that leaves.

use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::events::{FEATURES, Hello};
use tracing::info;

use super::{Broker, ClientGuard, ClientInfo, Core, Opened};
use crate::events::EventBus;
use crate::refusal::Refusal;
use crate::registry::ClientId;
use crate::requests::{RequestId, Stage};
use crate::store::{Op, StoredClient};
use crate::tokens::random_id;

impl Broker {
    /// In a cluster: stream `client_id` reached the leader through follower `via`.
    pub fn stream_via(&self, client_id: &ClientId, via: String) {
        if let Some(c) = self.lock().clients.get_mut(client_id) {
            c.via = Some(via);
        }
        self.touched();
    }

    /// Opens an event stream for `principal`, named `name` by the app; provider streams may
    /// register tools. `resume` is a provider's key from an earlier `hello`.
    pub fn open_stream(
        self: &Arc<Self>,
        provider: bool,
        principal: String,
        name: Option<String>,
        last_event_id: Option<u64>,
        resume: Option<String>,
    ) -> Result<Opened, Refusal> {
        let mut core = self.lock();
        let (client_id, key) = match (&resume, provider) {
            (Some(key), true) => (Self::resumed(&mut core, key, &principal)?, key.clone()),
            (Some(_), false) => {
                return Err(Refusal::new(
                    ErrorCode::InvalidParameter,
                    "query parameter \"resume\" is for provider streams (client_tools=1)",
                ));
            }
            (None, _) => (random_id("c_").into(), random_id("k_")),
        };
        core.next_conn += 1;
        let n = core.next_conn;
        core.clients.insert(
            client_id.clone(),
            ClientInfo {
                n,
                provider,
                principal: principal.clone(),
                owner: principal.clone(),
                name: name.clone(),
                connected_at: leo_protocol::time::now(),
                internal: false,
                webhook: None,
                via: None,
            },
        );
        if provider && resume.is_none() {
            core.resume_keys
                .insert(key.clone(), (client_id.clone(), principal.clone()));
            self.store.send(vec![Op::Client(StoredClient {
                client_id: client_id.clone(),
                resume_key: key.clone(),
                principal: principal.clone(),
                name: name.clone(),
            })]);
        }
        drop(core);
        self.touched();
        let subscription = self.bus.subscribe(last_event_id);
        info!(
            %client_id,
            provider,
            principal,
            name,
            resumed = resume.is_some(),
            "event stream opened"
        );
        Ok(Opened {
            hello: Hello {
                client_id: client_id.clone(),
                provider,
                features: FEATURES.iter().map(|f| (*f).to_owned()).collect(),
                seq: subscription.seq,
                replay_gap: subscription.gap,
                resume: provider.then_some(key),
            },
            subscription,
            guard: ClientGuard {
                broker: self.clone(),
                client_id,
            },
        })
    }

    /// The client a resume key names, if `principal` may use it and its stream is gone.
    fn resumed(core: &mut Core, key: &str, principal: &str) -> Result<ClientId, Refusal> {
        let unknown = || {
            Refusal::new(
                ErrorCode::InvalidParameter,
                "query parameter \"resume\": unknown or expired resume key; open the stream without it",
            )
        };
        let (client_id, owner) = core.resume_keys.get(key).ok_or_else(unknown)?;
        if owner != principal {
            return Err(unknown());
        }
        if core.clients.contains_key(client_id) {
            return Err(Refusal::new(
                ErrorCode::AlreadyClaimed,
                "query parameter \"resume\": that client's stream is still open",
            ));
        }
        let client_id = client_id.clone();
        core.away.remove(&client_id);
        if let Some(timer) = core.expiries.remove(&client_id) {
            timer.abort();
        }
        Ok(client_id)
    }

    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// A stream closed: withdraw what it registered; a provider's claims and ownership wait
    /// for it to resume.
    pub(super) fn client_gone(&self, client_id: &str) {
        let mut core = self.lock();
        let Some(info) = core.clients.remove(client_id) else {
            return;
        };
        if core.shutting_down {
            // At shutdown every call has already ended; the tool set is not announced again.
            return;
        }
        if info.provider && !info.internal {
            core.away.insert(client_id.into());
            let timer = self.expire_client_later(client_id);
            core.expiries.insert(client_id.into(), timer);
            let served = core.registry.served_by(client_id);
            if !served.is_empty() && core.resume_keys.values().any(|(c, _)| c == client_id) {
                core.left
                    .entry(client_id.into())
                    .or_default()
                    .extend(served);
            }
        } else {
            core.owners.release_client(client_id);
        }
        let (change, _) = core.registry.remove_client(client_id);
        if core.offers.remove_client(client_id) {
            self.offers_changed(&core);
        }
        self.reads_client_gone(client_id);
        Self::hold_for_left(&mut core, client_id);
        self.after_change(&mut core, change, Vec::new());
        drop(core);
        self.touched();
        info!(client_id, "client disconnected");
    }

    fn expire_client_later(&self, client_id: &str) -> tokio::task::AbortHandle {
        let id = client_id.to_owned();
        let grace = Duration::from_secs(self.config.client_tools.resume_grace_s);
        let timer = self.timer(super::deadline_in(grace), move |broker| {
            let mut core = broker.lock();
            broker.client_expired(&mut core, &id);
            drop(core);
            broker.touched();
        });
        timer.abort_handle()
    }

    /// The parked calls that wait for `client_id`, which just left, and whose tool nobody
    /// serves now: they are offered again once it is served again (`offer_restored`).
    fn hold_for_left(core: &mut Core, client_id: &str) {
        let Some(served) = core.left.get(client_id) else {
            return;
        };
        let held: Vec<RequestId> = core
            .requests
            .live()
            .filter(|(_, call, stage)| {
                **stage == Stage::Parked
                    && core.registry.visible(&call.tool).is_none()
                    && super::left_serves(served, call)
            })
            .map(|(id, _, _)| id.clone())
            .collect();
        core.unoffered.extend(held);
    }

    /// `client_id` registered `group` again: from now on what it serves there decides for the
    /// group's calls. True when calls of `group` waited for it until now.
    pub(super) fn registered(core: &mut Core, client_id: &str, group: &str) -> bool {
        let Some(served) = core.left.get_mut(client_id) else {
            return false;
        };
        let waited = served.remove(group).is_some();
        if served.is_empty() {
            core.left.remove(client_id);
        }
        waited
    }

    /// A provider that left did not come back in time: its claims are parked and offered
    /// again, its ownership released, its resume key forgotten, and the calls parked for its
    /// tools end unless another app serves them now.
    pub(super) fn client_expired(&self, core: &mut Core, client_id: &str) {
        core.expiries.remove(client_id);
        if !core.away.remove(client_id) {
            return;
        }
        core.left.remove(client_id);
        core.owners.release_client(client_id);
        core.resume_keys.retain(|_, (c, _)| c != client_id);
        self.store.send(vec![Op::ClientGone {
            client_id: client_id.to_owned(),
        }]);
        let claims: Vec<RequestId> = core
            .requests
            .live()
            .filter(|(_, _, stage)| matches!(stage, Stage::Claimed { by } if by == client_id))
            .map(|(id, _, _)| id.clone())
            .collect();
        for id in &claims {
            if core.requests.unclaim(id).is_some() {
                core.unoffered.insert(id.clone());
            }
        }
        let ended = Self::end_unserved(core);
        self.publish_ended(&ended);
        self.offer_restored(core);
        info!(
            client_id,
            returned = claims.len(),
            "client did not resume; its claims are parked again"
        );
    }

    /// The one check of a `client_id` a caller names in a body (register, claim, result,
    /// progress, input): it must be a connected provider whose `owner` is `caller`, the
    /// principal of the caller's token (`history::who`). Like a resume key, a client id belongs
    /// to the principal whose stream it names: another principal's client is refused exactly as
    /// an unknown one, so its existence does not leak. The operator does not act for other
    /// principals' clients; it owns the console's provider only to be told to use the console.
    pub(super) fn require_provider(
        core: &Core,
        client_id: &str,
        caller: &str,
    ) -> Result<(), Refusal> {
        match core.clients.get(client_id).filter(|c| c.owner == caller) {
            Some(c) if c.internal => Err(Refusal::new(
                ErrorCode::UnknownClient,
                format!(
                    "client_id {client_id:?} is the web console's own provider; answer its calls from the console"
                ),
            )),
            Some(c) if c.provider => Ok(()),
            _ => Err(Refusal::new(
                ErrorCode::UnknownClient,
                format!("client_id {client_id:?} is not a connected provider stream"),
            )),
        }
    }
}
