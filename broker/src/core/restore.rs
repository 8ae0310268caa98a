//! After a restart: putting back what the store had, re-attaching sidecars to their calls,
//! and the grace period after which whoever did not come back loses its calls or claims.
//! The same wait serves a sidecar whose piped session was lost while the broker ran
//! (`session_detached`: its follower was killed or cut off): its calls become orphans of its
//! session, the outcomes it may have missed wait with them, and `resume` re-attaches them;
//! `orphans_gone` is the one ending of a session that did not come back, whichever wait it was.
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
use crate::requests::{Approval, Call, ConnId, EndedCall, Failure, Stage};
use crate::store::{Restored, StoredCall, now_ms};

/// A restored call's receiver, waiting for its sidecar.
#[derive(Debug)]
pub struct Orphan {
    pub local_id: u64,
    pub request: RequestId,
    pub rx: oneshot::Receiver<RawOutcome>,
}

/// What a piped session leaves for its sidecar when its connection is lost: the receivers of
/// its calls in flight, and the outcomes written towards it that it may not have received, as
/// `(local id, request, outcome JSON)`.
#[derive(Debug, Default)]
pub struct Left {
    pub calls: Vec<Orphan>,
    pub resend: Vec<(u64, RequestId, String)>,
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
        // Registrations live with their connections, which did not outlive the last run.
        self.store
            .send(vec![crate::store::Op::RegistrationsCleared]);
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
        let definitions = restored.definitions.into_iter().filter_map(|d| {
            serde_json::from_str(&d.definition)
                .inspect_err(|e| warn!(tool = %d.name, error = %e, "a stored tool definition is unreadable; forgotten"))
                .ok()
                .map(|def| (d.group, def))
        });
        let default_timeout_s = self.config.client_tools.default_timeout_s;
        core.registry.restore_seen(definitions, default_timeout_s);
        drop(core);
        self.mail.restore(restored.mail);
        if calls > 0 || clients > 0 {
            let grace = Duration::from_secs(self.config.client_tools.resume_grace_s);
            info!(
                calls,
                grace_s = grace.as_secs(),
                "calls restored; waiting for their agents and apps"
            );
            self.timer(super::deadline_in(grace), Broker::grace_over);
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
        let approval = s.approval.as_deref().and_then(Approval::parse);
        let edited = matches!(approval, Some(Approval::Approved { edited: true, .. }));
        let mut awaiting = None;
        let stage = match (s.claimed_by, approval) {
            (Some(by), _) => Stage::Claimed { by },
            (None, Some(Approval::Awaiting(a))) => {
                awaiting = Some((call.clone(), a.clone()));
                Stage::Awaiting(Box::new(a))
            }
            (None, _) => {
                core.unoffered.insert(id.clone());
                Stage::Parked
            }
        };
        let (reply, rx) = oneshot::channel();
        core.requests.restore(call, stage, reply, edited);
        if let Some((call, a)) = awaiting {
            self.await_approval(core, &call, &a);
        }
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

    /// Keeps what a lost piped session `key` left (see [`Left`]) until its sidecar resumes or
    /// `client_tools.resume_grace_s` passes, counted from now.
    pub(super) fn orphan(&self, core: &mut Core, key: SessionKey, left: Left) {
        for o in &left.calls {
            core.requests.detach(&o.request);
        }
        for (local_id, request, outcome) in left.resend {
            let call = LocalCall {
                session: key.clone(),
                local_id,
            };
            core.undelivered.insert(call, (request, outcome));
        }
        core.orphans
            .entry(key.clone())
            .or_default()
            .extend(left.calls);
        let grace = Duration::from_secs(self.config.client_tools.resume_grace_s);
        let k = key.clone();
        let timer = self.timer(super::deadline_in(grace), move |broker| {
            broker.return_over(&k);
        });
        if let Some(old) = core.returns.insert(key, timer.abort_handle()) {
            old.abort();
        }
    }

    /// The grace of lost session `key` is over: what it did not come back for ends.
    fn return_over(&self, key: &SessionKey) {
        let mut core = self.lock();
        core.returns.remove(key);
        let ended = self.orphans_gone(&mut core, key, "the agent did not come back in time");
        if !ended.is_empty() {
            warn!(agent = %key.agent, session = %key.session, agent_gone = ended.len(), "grace period over: the calls of a lost session that did not come back ended");
        }
        self.publish_ended(&ended);
        drop(core);
        self.touched();
    }

    /// Session `key` did not come back for its orphans: each still live ends `cancelled`
    /// (`agent_gone`, saying `why`), and the outcomes kept for it are dropped.
    fn orphans_gone(&self, core: &mut Core, key: &SessionKey, why: &str) -> Vec<EndedCall> {
        // The outcomes kept for it will not be asked for: the store forgets them too.
        let mut forgotten = Vec::new();
        core.undelivered.retain(|call, (request, _)| {
            let keep = call.session != *key;
            if !keep {
                forgotten.push(crate::store::Op::Delivered {
                    id: request.to_string(),
                });
            }
            keep
        });
        self.store.send(forgotten);
        let orphans = core.orphans.remove(key).unwrap_or_default();
        orphans
            .into_iter()
            .filter_map(|o| {
                let failure = Failure::new(CancelReason::AgentGone, why);
                core.requests.end(&o.request, failure)
            })
            .collect()
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
        // Sessions lost since the restart wait out a grace period of their own.
        let gone: std::collections::HashSet<SessionKey> = (core.orphans.keys())
            .chain(core.undelivered.keys().map(|c| &c.session))
            .filter(|key| !core.returns.contains_key(*key))
            .cloned()
            .collect();
        let mut ended = Vec::new();
        for key in gone {
            let why = "the agent did not come back after the broker restarted";
            ended.extend(self.orphans_gone(&mut core, &key, why));
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
