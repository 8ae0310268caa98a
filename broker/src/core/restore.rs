//! After a restart: putting back what the store had, re-attaching sidecars to their calls,
//! and the grace period after which whoever did not come back loses its calls or claims.
//!
//! A restored call keeps its id, arguments and deadline (time spent down counts: a call past
//! it ends `timeout` at once). Until its sidecar says hello again with the call's local id in
//! `resume`, its receiver waits here (`Orphan`); the outcome, if one comes first, waits in
//! the receiver. An outcome that was stored but not yet sent to the sidecar before the
//! restart is sent when the sidecar resumes. When `client_tools.resume_grace_s` has passed
//! since start, orphans end `cancelled` (`agent_gone`), claims whose app did not come back
//! return to parked (and are offered again), and calls whose tool nobody serves end
//! `tool_withdrawn`, as they would have without the restart.

use std::time::{Duration, Instant, SystemTime};

use leo_protocol::ErrorCode;
use leo_protocol::events::{CancelReason, Redacted, kind};
use leo_protocol::ipc::RawOutcome;
use leo_protocol::names::{ClientId, RequestId};
use leo_protocol::requests::Request;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::{Broker, Core, LocalCall, SessionKey, json};
use crate::requests::{Call, ConnId, Failure, Stage};
use crate::store::{Restored, StoredCall, now_ms};

/// A restored call's receiver, waiting for its sidecar.
#[derive(Debug)]
pub struct Orphan {
    pub local_id: u64,
    pub request: RequestId,
    pub rx: oneshot::Receiver<RawOutcome>,
}

/// What a resuming sidecar gets for one of its calls.
pub enum Resumed {
    /// The call is live again on this session; its outcome comes on `rx`.
    Waiting {
        local_id: u64,
        request: RequestId,
        rx: oneshot::Receiver<RawOutcome>,
    },
    /// It ended already; the outcome to send now.
    Ended {
        local_id: u64,
        request: Option<RequestId>,
        outcome: RawOutcome,
    },
}

impl Broker {
    /// Puts back what the store had. Called once, at start, before any listener serves.
    pub fn restore(&self, restored: Restored) {
        let now = now_ms();
        let mut core = self.lock();
        for e in restored.ended {
            if let Some(outcome) = e.outcome {
                let key = LocalCall::new(&e.agent, &e.session, e.local_id);
                core.undelivered.insert(key, (e.id.clone(), outcome));
            }
            core.requests.remember_ended(e.id, e.how);
        }
        let calls = restored.live.len();
        for stored in restored.live {
            self.restore_call(&mut core, stored, now);
        }
        // Every app is away until it resumes with its key.
        let clients = restored.clients.len();
        for c in restored.clients {
            core.away.insert(c.client_id.clone());
            core.resume_keys
                .insert(c.resume_key, (c.client_id, c.principal));
        }
        for (agent, group, client) in restored.owners {
            core.owners.restore(agent, group, client);
        }
        drop(core);
        self.mail.restore(restored.mail);
        if calls > 0 || clients > 0 {
            let grace = Duration::from_secs(self.config.client_tools.resume_grace_s);
            info!(
                calls,
                grace_s = grace.as_secs(),
                "calls restored; waiting for their agents and apps"
            );
            let me = self.me.clone();
            let over = super::deadline_in(grace);
            self.tasks.spawn(async move {
                tokio::time::sleep_until(over).await;
                if let Some(broker) = me.upgrade() {
                    broker.grace_over();
                }
            });
        }
    }

    fn restore_call(&self, core: &mut Core, s: StoredCall, now: i64) {
        let r = &s.request;
        let age = leo_protocol::time::parse_rfc3339(&r.created_at)
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or_default();
        let (id, agent, session, timeout_s) = (
            r.id.clone(),
            r.agent.clone(),
            r.session.clone(),
            r.timeout_s,
        );
        let call = Call {
            request: s.request,
            conn: 0,
            local_id: s.local_id,
            parked_at: Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
        };
        let stage = match s.claimed_by {
            Some(by) => Stage::Claimed { by },
            None => {
                core.unoffered.insert(id.clone());
                Stage::Parked
            }
        };
        let (reply, rx) = oneshot::channel();
        core.requests.restore(call, stage, reply);
        let key = LocalCall::new(&agent, &session, s.local_id);
        core.orphans
            .entry(key.session.clone())
            .or_default()
            .push(Orphan {
                local_id: s.local_id,
                request: id.clone(),
                rx,
            });
        core.restored.insert(key);
        if let (Some(secs), Some(deadline)) = (timeout_s, s.deadline_ms) {
            let left = Duration::from_millis(u64::try_from(deadline - now).unwrap_or(0));
            self.arm_timer(core, &id, secs, left);
        }
    }

    /// A sidecar said hello with the local ids of its calls in flight: each is re-attached to
    /// connection `conn`, or answered with how it ended.
    pub fn resume(&self, conn: ConnId, agent: &str, session: &str, ids: &[u64]) -> Vec<Resumed> {
        if ids.is_empty() {
            return Vec::new();
        }
        let mut core = self.lock();
        let key = SessionKey::new(agent, session);
        let mut orphans = core.orphans.remove(&key).unwrap_or_default();
        let mut out = Vec::with_capacity(ids.len());
        for &local_id in ids {
            if let Some(i) = orphans.iter().position(|o| o.local_id == local_id) {
                let o = orphans.swap_remove(i);
                core.requests.reattach(&o.request, conn);
                out.push(Resumed::Waiting {
                    local_id,
                    request: o.request,
                    rx: o.rx,
                });
                continue;
            }
            let stored = core.undelivered.remove(&LocalCall {
                session: key.clone(),
                local_id,
            });
            let (request, outcome) =
                match stored.and_then(|(id, text)| parse_outcome(&text).map(|o| (id, o))) {
                    Some((id, o)) => (Some(id), o),
                    None => (None, lost()),
                };
            out.push(Resumed::Ended {
                local_id,
                request,
                outcome,
            });
        }
        if !orphans.is_empty() {
            // Calls of this session it did not ask for (the harness gave up on them).
            core.orphans.insert(key, orphans);
        }
        drop(core);
        self.touched();
        out
    }

    /// The outcome of `request` was written to its sidecar.
    pub fn delivered(&self, request: &str) {
        self.store.send(vec![crate::store::Op::Delivered {
            id: request.to_owned(),
        }]);
    }

    /// The grace period after a restart is over.
    fn grace_over(&self) {
        let mut core = self.lock();
        let orphans = std::mem::take(&mut core.orphans);
        let mut ended = Vec::new();
        for o in orphans.into_values().flatten() {
            ended.extend(core.requests.end(
                &o.request,
                Failure::new(
                    CancelReason::AgentGone,
                    "the agent did not come back after the broker restarted",
                ),
            ));
        }
        let claims: Vec<(RequestId, ClientId)> = core
            .requests
            .live()
            .filter_map(|(id, _, stage)| match stage {
                Stage::Claimed { by } if !core.clients.contains_key(by) => {
                    Some((id.clone(), by.clone()))
                }
                _ => None,
            })
            .collect();
        for (id, by) in &claims {
            if core.away.contains(by) {
                continue;
            }
            core.owners.release_client(by);
            if core.requests.unclaim(id).is_some() {
                core.unoffered.insert(id.clone());
            }
        }
        // An app that resumed since the restart and left again has a grace period of its own.
        let away: Vec<ClientId> = core
            .away
            .iter()
            .filter(|c| !core.expiries.contains_key(*c))
            .cloned()
            .collect();
        for client in away {
            self.client_expired(&mut core, &client);
        }
        core.restored.clear();
        core.undelivered.clear();
        if !ended.is_empty() || !claims.is_empty() {
            warn!(
                agent_gone = ended.len(),
                unclaimed = claims.len(),
                "grace period over: calls of agents that did not come back ended, claims of apps that did not come back returned"
            );
        }
        // What nobody serves any more ends as it would have without the restart.
        ended.extend(Self::end_unserved(&mut core));
        self.publish_ended(&ended);
        self.offer_restored(&mut core);
        drop(core);
        self.touched();
    }

    /// Offers restored parked calls on the streams once their tool is served again.
    pub(super) fn offer_restored(&self, core: &mut Core) {
        if core.unoffered.is_empty() {
            return;
        }
        let ready: Vec<RequestId> = core
            .unoffered
            .iter()
            .filter(|id| {
                core.requests.get(id).is_some_and(|(call, stage)| {
                    *stage == Stage::Parked
                        && core
                            .registry
                            .visible(&call.tool)
                            .is_some_and(|v| v.spec.group == call.group)
                })
            })
            .cloned()
            .collect();
        for id in ready {
            core.unoffered.remove(&id);
            if let Some((call, _)) = core.requests.get(&id) {
                let owner = core
                    .owners
                    .owner(&call.agent, &call.group)
                    .filter(|o| !core.away.contains(*o))
                    .cloned();
                let event = Request {
                    owner,
                    ..call.request.clone()
                };
                self.bus.publish(
                    kind::REQUEST,
                    json(&event),
                    Some(json(&Redacted { id: id.clone() })),
                );
            }
        }
        core.unoffered.retain(|id| core.requests.get(id).is_some());
    }
}

/// A stored outcome, read back as the bytes the app sent.
fn parse_outcome(text: &str) -> Option<RawOutcome> {
    serde_json::from_str(text).ok()
}

/// What a sidecar gets for a call the broker has no record of (it ended before the
/// restart and its outcome was already sent, or it never reached the disk).
fn lost() -> RawOutcome {
    RawOutcome::failed(
        ErrorCode::NoClient.as_str(),
        "broker connection lost; the broker has no record of this call",
    )
}
