//! The core's side of webhook providers: a webhook is a provider client like any stream, with a
//! `client_id` kept across restarts, that leaves only when it is removed. Its registration,
//! claims and results go through the same operations as a stream's (`register`,
//! `post_result` with `claim: true`), so every rule and the exactly-once ending hold alike;
//! only joining, leaving and the health shown in `status` are its own.

use leo_protocol::ErrorCode;
use leo_protocol::status::AppWebhook;
use leo_protocol::webhooks::WebhookHealth;
use tracing::info;

use super::{Broker, ClientInfo};
use crate::refusal::Refusal;

impl Broker {
    /// Adds webhook provider `name` as client `client_id`, which may then register its group;
    /// `owner`, the principal that created it, is the one whose token may use its client id.
    pub fn join_webhook(
        &self,
        client_id: &str,
        name: &str,
        url: &str,
        owner: &str,
    ) -> Result<(), Refusal> {
        let mut core = self.lock();
        if core.shutting_down {
            return Err(Broker::stopping(&core));
        }
        if core.clients.contains_key(client_id) {
            return Err(Refusal::new(
                ErrorCode::NameConflict,
                format!("client_id {client_id:?} is already connected"),
            ));
        }
        core.next_conn += 1;
        let n = core.next_conn;
        core.clients.insert(
            client_id.to_owned().into(),
            ClientInfo {
                n,
                provider: true,
                principal: format!("webhook:{name}"),
                owner: owner.to_owned(),
                name: Some(name.to_owned()),
                connected_at: leo_protocol::time::now(),
                internal: false,
                webhook: Some(AppWebhook {
                    url: url.to_owned(),
                    health: WebhookHealth {
                        healthy: true,
                        ..WebhookHealth::default()
                    },
                }),
                via: None,
            },
        );
        drop(core);
        self.touched();
        info!(client_id, name, "webhook provider joined");
        Ok(())
    }

    /// The webhook provider leaves: what a closed stream does (tools withdrawn, its claimed
    /// calls end `no_client`).
    pub fn leave_webhook(&self, client_id: &str) {
        self.client_gone(client_id);
    }

    /// Records how the webhook's deliveries go, for `status` and the console.
    pub fn set_webhook_health(&self, client_id: &str, health: WebhookHealth) {
        let mut core = self.lock();
        let Some(w) = core
            .clients
            .get_mut(client_id)
            .and_then(|c| c.webhook.as_mut())
        else {
            return;
        };
        if w.health == health {
            return;
        }
        w.health = health;
        drop(core);
        self.touched();
    }

    /// True while request `id` is live and not claimed by anyone.
    pub fn is_parked(&self, id: &str) -> bool {
        matches!(
            self.lock().requests.get(id),
            Some((_, crate::requests::Stage::Parked))
        )
    }

    /// True while request `id` is live (parked or claimed).
    pub fn is_live(&self, id: &str) -> bool {
        self.lock().requests.get(id).is_some()
    }
}
