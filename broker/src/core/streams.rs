//! Event streams: a client opens one, and its leaving withdraws what it registered.

use std::sync::Arc;

use leo_protocol::ErrorCode;
use leo_protocol::events::{CancelReason, FEATURES, Hello};
use tracing::info;

use super::{Broker, ClientGuard, ClientInfo, Core, Opened};
use crate::events::EventBus;
use crate::refusal::Refusal;
use crate::requests::{Failure, Stage};
use crate::tokens::random_id;

impl Broker {
    /// Opens an event stream for `principal`, named `name` by the app; provider streams may
    /// register tools.
    pub fn open_stream(
        self: &Arc<Self>,
        provider: bool,
        principal: String,
        name: Option<String>,
        last_event_id: Option<u64>,
    ) -> Opened {
        let client_id = random_id("c_");
        let mut core = self.lock();
        core.next_conn += 1;
        let n = core.next_conn;
        core.clients.insert(
            client_id.clone(),
            ClientInfo {
                n,
                provider,
                principal: principal.clone(),
                name: name.clone(),
                connected_at: leo_protocol::time::now(),
                internal: false,
                webhook: None,
            },
        );
        drop(core);
        self.touched();
        let subscription = self.bus.subscribe(last_event_id);
        info!(client_id, provider, principal, name, "event stream opened");
        Opened {
            hello: Hello {
                client_id: client_id.clone(),
                provider,
                features: FEATURES.iter().map(|f| (*f).to_owned()).collect(),
                seq: subscription.seq,
                replay_gap: subscription.gap,
            },
            subscription,
            guard: ClientGuard {
                broker: self.clone(),
                client_id,
            },
        }
    }

    pub fn bus(&self) -> &EventBus {
        &self.bus
    }

    /// A stream closed: withdraw what it registered, end the calls it had claimed.
    pub(super) fn client_gone(&self, client_id: &str) {
        let mut core = self.lock();
        if core.clients.remove(client_id).is_none() || core.shutting_down {
            // At shutdown every call has already ended; the tool set is not announced again.
            return;
        }
        core.owners.release_client(client_id);
        let (change, _) = core.registry.remove_client(client_id);
        let ended = core.requests.end_where(|call, stage| match stage {
            Stage::Claimed { by } if by == client_id => Some(Failure::new(
                ErrorCode::NoClient,
                CancelReason::ClientGone,
                format!(
                    "the app that claimed the call of {:?} disconnected",
                    call.tool
                ),
            )),
            _ => None,
        });
        self.after_change(&mut core, change, ended);
        self.touched();
        info!(client_id, "client disconnected");
    }

    pub(super) fn require_provider(core: &Core, client_id: &str) -> Result<(), Refusal> {
        match core.clients.get(client_id) {
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
