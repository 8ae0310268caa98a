//! Prompts, resources and templates (`crate::offers`): their lists, their reads relayed to the
//! app that serves them, and the app's word that a resource changed.
//!
//! A read is not a call (see `leo_protocol::offers`): it waits here, in memory only, for the
//! app's answer, at most `OFFER_TIMEOUT_S`, and ends `no_client` when the app's stream goes.
//! Nothing here awaits under the core lock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::content::AppError;
use leo_protocol::events::Redacted;
use leo_protocol::ipc::BrokerFrame;
use leo_protocol::lines::encode_frame;
use leo_protocol::offers::{
    OFFER_EVENT, OFFER_TIMEOUT_S, OfferAck, OfferAnswerBody, OfferKind, OfferList, OfferOutcome,
    OfferRequest, ResourceUpdatedBody, UpdatedAck,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tracing::debug;

use super::{Broker, Core};
use crate::refusal::Refusal;
use crate::registry::ClientId;
use crate::requests::ConnId;

/// Reads waiting for their app's answer, by id.
#[derive(Debug, Default)]
pub struct Reads {
    state: Mutex<ReadsState>,
}

#[derive(Debug, Default)]
struct ReadsState {
    waiting: HashMap<String, (ClientId, oneshot::Sender<OfferOutcome>)>,
    next: u64,
}

impl Reads {
    fn lock(&self) -> std::sync::MutexGuard<'_, ReadsState> {
        // Each section is one insert or remove; a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Removes a read's waiter however the read ends.
struct Forget<'a> {
    reads: &'a Reads,
    id: String,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.reads.lock().waiting.remove(&self.id);
    }
}

fn failed(code: ErrorCode, message: impl Into<String>) -> OfferOutcome {
    OfferOutcome::Error {
        error: AppError {
            code: code.as_str().to_owned(),
            message: message.into(),
        },
    }
}

impl Broker {
    /// What `agent` is offered besides tools.
    pub fn offers_for(&self, agent: &str) -> OfferList {
        self.lock().offers.list_for(agent)
    }

    /// `agent`'s read: asks the app that serves it and waits for its answer.
    pub async fn read_offer(&self, agent: &str, kind: OfferKind, params: Value) -> OfferOutcome {
        let routed = self.lock().offers.answerer(agent, kind, &params);
        let (group, client_id) = match routed {
            Ok(r) => r,
            Err(r) => return failed(r.code, r.message),
        };
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut reads = self.reads.lock();
            reads.next += 1;
            let id = format!("o_{}", reads.next);
            reads.waiting.insert(id.clone(), (client_id.clone(), tx));
            id
        };
        let _forget = Forget {
            reads: &self.reads,
            id: id.clone(),
        };
        let request = OfferRequest {
            id: id.clone(),
            client_id,
            group,
            agent: agent.to_owned(),
            kind,
            params,
        };
        let redacted = Redacted {
            id: id.clone().into(),
        };
        self.bus.publish(
            OFFER_EVENT,
            super::json(&request),
            Some(super::json(&redacted)),
        );
        debug!(read = %id, method = kind.method(), "read sent to the app");
        let wait = Duration::from_secs(OFFER_TIMEOUT_S);
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => failed(ErrorCode::NoClient, "the app that offers it left"),
            Err(_) => failed(
                ErrorCode::Timeout,
                format!("the app did not answer within {OFFER_TIMEOUT_S} s"),
            ),
        }
    }

    /// Session `conn`'s `offer` frame `id`: the read runs in a task of its own and its
    /// `offer_result` is queued for the session when it ends (or dropped at shutdown).
    pub fn start_read(&self, conn: ConnId, agent: &str, id: u64, kind: OfferKind, params: Value) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let agent = agent.to_owned();
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let read = me.read_offer(&agent, kind, params);
            let outcome = tokio::select! {
                outcome = read => outcome,
                () = shutdown.cancelled() => return,
            };
            let line = encode_frame(&BrokerFrame::OfferResult { id, outcome });
            if !me.send_to(conn, line).await {
                debug!(read = id, "the session left before its read ended");
            }
        });
    }

    /// `POST …/client-offers/requests/{id}/answer`: the app answers read `id`.
    pub fn answer_offer(
        &self,
        id: &str,
        body: OfferAnswerBody,
        caller: &str,
    ) -> Result<OfferAck, Refusal> {
        Self::require_provider(&self.lock(), &body.client_id, caller)?;
        let client = body.client_id.clone();
        let outcome = body
            .into_outcome()
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, m))?;
        let waiter = {
            let mut reads = self.reads.lock();
            match reads.waiting.get(id) {
                Some((c, _)) if *c == client => reads.waiting.remove(id),
                Some((c, _)) => {
                    return Err(Refusal::new(
                        ErrorCode::NotClaimant,
                        format!("read {id} was asked of client {c}, not {client}"),
                    ));
                }
                None => None,
            }
        };
        let Some((_, tx)) = waiter else {
            return Err(Refusal::new(
                ErrorCode::NotFound,
                format!("no read {id} waits for an answer (it timed out, or was answered)"),
            ));
        };
        // The agent may have gone meanwhile; the answer is then dropped.
        let _ = tx.send(outcome);
        Ok(OfferAck { id: id.to_owned() })
    }

    /// The reads asked of `client`, whose stream closed, end `no_client`.
    pub(super) fn reads_client_gone(&self, client: &str) {
        self.reads.lock().waiting.retain(|_, (c, _)| c != client);
    }

    /// `POST /api/v1/client-offers/updated`: tells the sessions of agents offered `uri` by
    /// this client; a sidecar passes it on where its harness subscribed.
    pub fn resource_updated(
        &self,
        body: ResourceUpdatedBody,
        caller: &str,
    ) -> Result<UpdatedAck, Refusal> {
        let conns: Vec<ConnId> = {
            let core = self.lock();
            Self::require_provider(&core, &body.client_id, caller)?;
            if !core.offers.offers_uri(&body.client_id, &body.uri) {
                return Err(Refusal::new(
                    ErrorCode::NotFound,
                    format!(
                        "at $.uri: client {} offers no resource {:?}",
                        body.client_id, body.uri
                    ),
                ));
            }
            let params = serde_json::json!({ "uri": body.uri });
            let serves = |agent: &str| {
                core.offers
                    .answerer(agent, OfferKind::Resource, &params)
                    .is_ok_and(|(_, c)| c == body.client_id)
            };
            Self::conns_where(&core, serves)
        };
        let line = encode_frame(&BrokerFrame::ResourceUpdated {
            uri: body.uri.clone(),
        });
        self.push_to(&conns, &line);
        Ok(UpdatedAck {
            uri: body.uri,
            sessions: conns.len(),
        })
    }

    /// What agents are offered besides tools changed: every session lists again.
    pub(super) fn offers_changed(&self, core: &Core) {
        let conns = Self::conns_where(core, |_| true);
        self.push_to(&conns, &encode_frame(&BrokerFrame::OffersChanged));
    }

    fn conns_where(core: &Core, keep: impl Fn(&str) -> bool) -> Vec<ConnId> {
        let sessions = core.sessions.iter();
        sessions
            .filter(|(_, s)| keep(&s.agent))
            .map(|(c, _)| *c)
            .collect()
    }
}
