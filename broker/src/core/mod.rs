//! The broker's state and every operation on it, behind one mutex.
//!
//! Registrations, requests, ownership, connected clients and sidecar sessions change together
//! (a client leaving withdraws its tools, which cancels calls, which publishes events), so they
//! live in one `Core` under one lock, and each operation is a short critical section that
//! changes state and publishes its events before it lets go. Nothing here awaits while holding
//! the lock.
//!
//! The operations are `impl Broker` blocks, one file per concern: `streams` (event streams and
//! clients leaving), `registration` (groups, lints, approval), `calls` (an agent's call: every
//! policy check, parking, timers), `results` (claims, results, the operator's cancel),
//! `sessions` (sidecar sessions, what each agent is offered, its mailbox), `shutdown`,
//! `ask_human` and `snapshot`. Mail has its own lock (`mail::PostOffice`), outside `Core`.
//!
//! **Architecture Invariant:** only this module mutates `Registry`, `Requests` and `Owners`;
//! HTTP and IPC handlers call `Broker` methods and never touch the state directly.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use leo_protocol::ErrorCode;
use leo_protocol::events::{CancelReason, CancelledEvent, ChangedEvent, Hello, Redacted, kind};
use leo_protocol::ipc::{Harness, Mode};
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::Config;
use crate::events::{EventBus, Subscription};
use crate::history::History;
use crate::ownership::Owners;
use crate::refusal::Refusal;
use crate::registry::{Change, ClientId, Registry, Served};
use crate::requests::{Call, ConnId, EndedCall, Failure, RequestId, Requests, Stage};
use crate::state_file::EverRegistered;
use crate::store::Store;

mod approvals;
mod ask_human;
mod calls;
mod mail;
mod offers;
mod registration;
mod relay;
mod restore;
mod results;
mod sampling;
mod sessions;
mod shutdown;
mod snapshot;
mod streams;
mod webhooks;

#[cfg(test)]
mod tests;

pub use ask_human::CONSOLE_CLIENT;
pub use restore::{Left, Orphan, Resumed};

use mail::PostOffice;

/// A connected event stream.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// Connection order, for stable listings.
    pub n: u64,
    pub provider: bool,
    /// Who opened it: `operator`, `device:NAME`, `agent`; `console` for the console's provider.
    pub principal: String,
    /// The principal whose token may name this client in a body (`client_id` of register,
    /// claim, result, progress, input): the stream's own principal, a webhook's creator, the
    /// operator for the console's provider (`require_provider` holds the rule).
    pub owner: String,
    /// The name the app gave itself (`?name=…`), checked by `check_app_name`.
    pub name: Option<String>,
    pub connected_at: String,
    /// The web console's built-in provider (`ask_human`): not a stream, and not usable as a
    /// `client_id` over HTTP.
    pub internal: bool,
    /// A webhook provider (`webhooks`): its url and delivery health. Its "stream" is the
    /// broker's own delivery task; it leaves only when the webhook is removed.
    pub webhook: Option<leo_protocol::status::AppWebhook>,
    /// In a cluster, the follower the stream came through.
    pub via: Option<String>,
}

/// A connected sidecar.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub agent: String,
    pub session: String,
    pub harness: Option<Harness>,
    pub mode: Mode,
    pub transport: leo_protocol::ipc::Transport,
    pub connected_at: String,
    /// In a cluster, the follower the session came through.
    pub via: Option<String>,
}

/// A sidecar session: the agent's name and the session's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SessionKey {
    agent: String,
    session: String,
}

impl SessionKey {
    fn new(agent: &str, session: &str) -> SessionKey {
        SessionKey {
            agent: agent.to_owned(),
            session: session.to_owned(),
        }
    }
}

/// One call of a sidecar session, by the sidecar's own id of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LocalCall {
    session: SessionKey,
    local_id: u64,
}

impl LocalCall {
    fn new(agent: &str, session: &str, local_id: u64) -> LocalCall {
        LocalCall {
            session: SessionKey::new(agent, session),
            local_id,
        }
    }

    /// The sidecar's key of `call`.
    fn of(call: &crate::requests::Call) -> LocalCall {
        LocalCall::new(&call.agent, &call.session, call.local_id)
    }
}

struct Core {
    clients: HashMap<ClientId, ClientInfo>,
    registry: Registry,
    /// Prompts, resources and templates, beside the tools (`crate::offers`).
    offers: crate::offers::Catalog,
    requests: Requests,
    owners: Owners,
    ever: EverRegistered,
    sessions: BTreeMap<ConnId, SessionInfo>,
    next_conn: ConnId,
    shutting_down: bool,
    /// A cluster's leader stopping cleanly: its calls stay for the next leader
    /// (`begin_handover`).
    handing_over: bool,
    /// Calls waiting for their sidecar to come back, by `(agent, session)`: after a restart,
    /// or after a piped session's connection was lost (`session_detached`).
    orphans: HashMap<SessionKey, Vec<restore::Orphan>>,
    /// Outcomes that may not have reached their sidecar, by `(agent, session, local id)`: the
    /// request id and the outcome's JSON. Stored before a restart and not sent yet, or written
    /// into a piped session just before its connection was lost.
    undelivered: HashMap<LocalCall, (RequestId, String)>,
    /// The timers that end the wait for sidecars whose piped session was lost while this
    /// broker ran (sessions orphaned by a restart have none: the restart's grace is theirs).
    /// A session lost again gets a whole grace period again.
    returns: HashMap<SessionKey, tokio::task::AbortHandle>,
    /// Restored calls by `(agent, session, local id)`, spared from withdrawal until the grace
    /// period ends (their apps and sidecars are still coming back).
    restored: HashSet<LocalCall>,
    /// Parked calls not offered on the streams since a restart, or since the app that served
    /// their tool left (`offer_restored` offers them once their tool is served again).
    unoffered: HashSet<RequestId>,
    /// Provider streams' resume keys: the client id and the principal that may use each.
    resume_keys: HashMap<String, (ClientId, String)>,
    /// Provider clients whose stream is gone but who may still resume (their claims and
    /// ownership wait for them until the grace period ends).
    away: HashSet<ClientId>,
    /// What each provider with a resume key served when its stream last closed, by group,
    /// until it registers that group again (once back) or its grace ends away (`streams`):
    /// the calls parked for those tools, and its claims in those groups, wait for it
    /// (`end_unserved`). An app back from a drop registers its groups one by one, and the
    /// first registration must not end the calls of the others.
    left: HashMap<ClientId, Served>,
    /// The timers that end the grace of clients that left while this broker ran (a client
    /// away since a restart has none: the restart's grace is its own). Resuming stops the
    /// timer, so a client that leaves again gets a whole grace period again.
    expiries: HashMap<ClientId, tokio::task::AbortHandle>,
}

impl Core {
    /// The changes to hand to the store.
    fn take_journal(&mut self) -> Vec<crate::store::Op> {
        let mut ops = self.requests.take_journal();
        ops.extend(self.owners.take_journal());
        ops
    }
}

/// The core's lock. Dropping it first hands the journal to the store, still under the lock,
/// so the store sees changes in the order they were made.
struct CoreGuard<'a> {
    guard: MutexGuard<'a, Core>,
    store: &'a Store,
}

impl Deref for CoreGuard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.guard
    }
}

impl DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.guard
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        let ops = self.guard.take_journal();
        self.store.send(ops);
    }
}

/// The broker: shared by every HTTP handler, IPC session and timer.
pub struct Broker {
    core: Mutex<Core>,
    /// The `tools` frame every agent without `deny_tools` gets, by revision.
    tools_cache: Mutex<Option<(u64, Bytes)>>,
    /// Messages to agents; their own lock, since they never touch tools or requests.
    mail: PostOffice,
    bus: EventBus,
    revision: watch::Sender<u64>,
    /// Bumped by every operation that changes what `status` shows; the console's live view
    /// waits on it.
    changes: watch::Sender<u64>,
    config: Arc<Config>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    me: Weak<Broker>,
    /// Sessions' outboxes and open questions (`relay`).
    relay: relay::Relay,
    /// Reads of prompts and resources waiting for their app (`offers`).
    reads: offers::Reads,
    /// Ended calls and authenticated changes, written off the lock.
    history: History,
    /// Where the live state is recorded (`state/leo.db`).
    store: Store,
}

/// A stream's start: its hello, what to replay, and the live receiver. Dropping `guard`
/// disconnects the client.
pub struct Opened {
    pub hello: Hello,
    pub subscription: Subscription,
    pub guard: ClientGuard,
}

/// Disconnects its client when dropped, which withdraws everything the client registered.
pub struct ClientGuard {
    broker: Arc<Broker>,
    pub client_id: ClientId,
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.broker.client_gone(&self.client_id);
    }
}

/// The instant `after` from now: a timer's deadline is fixed when it is armed, not when its
/// task first runs. A span too long for the clock is thirty years, as tokio's `sleep` takes it
/// (`resume_grace_s` has no upper bound).
fn deadline_in(after: std::time::Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(after)
        .unwrap_or_else(|| now + std::time::Duration::from_secs(30 * 365 * 86_400))
}

/// The refusal of work while the store's database cannot be reached.
fn unavailable() -> Refusal {
    Refusal::new(
        ErrorCode::StoreUnavailable,
        "the broker's database is unreachable, so it takes no new work now; try again shortly",
    )
}

fn json<T: Serialize>(value: &T) -> String {
    // Our own event types always serialize; a failure would be a bug, not bad input.
    serde_json::to_string(value).unwrap_or_else(|e| {
        warn!(error = %e, "event failed to serialize");
        "{}".to_owned()
    })
}

impl Broker {
    pub fn new(
        config: Arc<Config>,
        ever: EverRegistered,
        store: Store,
        history: History,
    ) -> Arc<Broker> {
        let (revision, _) = watch::channel(0);
        let (changes, _) = watch::channel(0);
        let broker = Arc::new_cyclic(|me| Broker {
            tools_cache: Mutex::new(None),
            mail: PostOffice::new(config.agents.keys().cloned()),
            store,
            core: Mutex::new(Core {
                clients: HashMap::new(),
                registry: Registry::new(config.client_tools.pin_definitions),
                offers: crate::offers::Catalog::default(),
                requests: Requests::new(config.client_tools.remember_settled),
                owners: Owners::default(),
                ever,
                sessions: BTreeMap::new(),
                next_conn: 1,
                shutting_down: false,
                handing_over: false,
                orphans: HashMap::new(),
                undelivered: HashMap::new(),
                returns: HashMap::new(),
                restored: HashSet::new(),
                unoffered: HashSet::new(),
                resume_keys: HashMap::new(),
                away: HashSet::new(),
                left: HashMap::new(),
                expiries: HashMap::new(),
            }),
            bus: EventBus::new(config.client_tools.replay_events),
            revision,
            changes,
            config,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            me: me.clone(),
            relay: relay::Relay::default(),
            reads: offers::Reads::default(),
            history,
        });
        // The history records an ending only once the store has committed it.
        let me = Arc::downgrade(&broker);
        let deposed = broker.store.deposition();
        broker.history.after_commits(move || {
            if let Some(broker) = me.upgrade() {
                broker.committed_blocking();
            }
            !deposed.is_cancelled()
        });
        broker
    }

    /// [`Broker::committed_after_lock`], waited for on a thread that is not the runtime's.
    fn committed_blocking(&self) {
        drop(self.lock());
        self.store.committed_blocking();
    }

    fn lock(&self) -> CoreGuard<'_> {
        // Every critical section leaves Core consistent before anything that can panic, so a
        // poisoned lock is still usable; refusing service forever would be worse.
        CoreGuard {
            guard: self.core.lock().unwrap_or_else(|p| p.into_inner()),
            store: &self.store,
        }
    }

    /// Resolves once every change made before this call is on disk, including one whose
    /// effect (a call's outcome on its receiver) was seen before its maker let go of the lock:
    /// taking the lock first waits for that maker to hand its journal to the store.
    pub fn committed_after_lock(&self) -> impl Future<Output = Result<(), Refusal>> + use<> {
        drop(self.lock());
        self.committed()
    }

    /// What an operation that accepts work answers, once every change it made is on disk: each
    /// such operation (claim, result, cancel, message, the console's answer) is an async fn
    /// that ends here, so no route can acknowledge work the store has not committed. `done` is
    /// the operation's synchronous part, run under the lock and let go of before this awaits;
    /// it is not run at all while the store cannot reach its database, so a refused operation
    /// changes nothing.
    async fn accepted<T>(&self, done: impl FnOnce() -> Result<T, Refusal>) -> Result<T, Refusal> {
        self.store_available()?;
        let value = done()?;
        self.committed().await?;
        Ok(value)
    }

    /// `Err(store_unavailable)` while the store cannot reach its database (PostgreSQL only):
    /// checked before an operation that accepts work changes anything.
    fn store_available(&self) -> Result<(), Refusal> {
        if self.store.available() {
            Ok(())
        } else {
            Err(unavailable())
        }
    }

    /// Resolves once every change made so far is on disk (never awaited while holding the
    /// lock); `accepted` is how operations wait for it.
    fn committed(&self) -> impl Future<Output = Result<(), Refusal>> + use<> {
        let commit = self.store.committed();
        async move {
            commit.await.map_err(|e| {
                let unreachable = matches!(e, crate::store::Error::Unavailable(_));
                let e = leo_protocol::chain::error_chain(&e);
                tracing::error!(error = %e, "a change could not be recorded");
                if unreachable {
                    unavailable()
                } else {
                    Refusal::new(
                        ErrorCode::Internal,
                        "the broker could not record this change; see its log",
                    )
                }
            })
        }
    }

    /// The store, for the mailboxes and shutdown.
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The history of ended calls and the audit trail.
    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Runs `due` on the broker at `deadline` (`deadline_in`), unless the broker shuts down or
    /// is gone first. Every timer of the core is one of these: a timer that outlived the
    /// shutdown token kept the stop waiting for it (a restart's resume grace is a minute).
    fn timer(
        &self,
        deadline: tokio::time::Instant,
        due: impl FnOnce(&Broker) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let (me, shutdown) = (self.me.clone(), self.shutdown.clone());
        self.tasks.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if let Some(broker) = me.upgrade() {
                        due(&broker);
                    }
                }
                () = shutdown.cancelled() => {}
            }
        })
    }

    /// A receiver that wakes when the agent-visible tool set changes.
    pub fn watch_revision(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// A receiver that wakes whenever something `status` shows has changed: clients, sessions,
    /// harnesses, registrations, requests, the `ask_human` switch.
    pub fn watch_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Tells `watch_changes` receivers that the state changed.
    fn touched(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Publishes what a registration change did: cancels calls whose tool nobody serves any
    /// more, announces the new revision.
    fn after_change(&self, core: &mut Core, change: Change, mut ended: Vec<EndedCall>) {
        self.store_registry(core);
        if change == Change::Changed {
            ended.extend(Self::end_unserved(core));
        }
        self.publish_ended(&ended);
        if change == Change::Changed {
            let revision = core.registry.revision();
            self.bus.publish(
                kind::CHANGED,
                json(&ChangedEvent {
                    revision,
                    tools: core.registry.names(),
                    changed: core.registry.last_changed().to_vec(),
                    awaiting_approval: core.registry.awaiting_approval(),
                }),
                None,
            );
            self.revision.send_replace(revision);
            self.offer_restored(core);
        }
    }

    /// Writes what the registry's journal holds to the store: what agents were offered
    /// (pinning's reference outlives a restart and, in a cluster, the leader) and who serves
    /// what through which instance.
    fn store_registry(&self, core: &mut Core) {
        use crate::registry::Journal;
        use crate::store::{Op, StoredDefinition};
        let journal = core.registry.take_journal();
        let ops: Vec<Op> = journal
            .into_iter()
            .map(|change| match change {
                Journal::Offered(spec) => Op::Seen(StoredDefinition {
                    name: spec.def.name.clone(),
                    group: spec.group.clone(),
                    digest: spec.digest.clone(),
                    definition: serde_json::to_string(&spec.def).unwrap_or_default(),
                }),
                Journal::Forgotten(name) => Op::Unseen { name },
                Journal::Registered {
                    client,
                    group,
                    tools,
                } if !tools.is_empty() => Op::Registered {
                    via: core.clients.get(&client).and_then(|c| c.via.clone()),
                    client_id: client.into(),
                    group,
                    tools: serde_json::to_string(&tools).unwrap_or_default(),
                },
                Journal::Registered { client, group, .. } => Op::Unregistered {
                    client_id: client.into(),
                    group: Some(group),
                },
                Journal::Left(client) => Op::Unregistered {
                    client_id: client.into(),
                    group: None,
                },
            })
            .collect();
        self.store.send(ops);
    }

    /// Ends the calls whose tool is no longer served to their agent (withdrawn, or out of
    /// scope), but for restored calls during the grace period and the calls that wait for an
    /// app that left (`waits_for_left`).
    fn end_unserved(core: &mut Core) -> Vec<EndedCall> {
        let registry = &core.registry;
        let restored = &core.restored;
        let away = &core.away;
        let left = &core.left;
        core.requests.end_where(|call, stage| {
            if restored.contains(&LocalCall::of(call)) {
                return None;
            }
            if matches!(stage, Stage::Claimed { by } if away.contains(by))
                || waits_for_left(left, call, stage)
            {
                // Its app may resume, register again and serve it; `client_expired` decides.
                return None;
            }
            // A call also ends when the tool is no longer offered to its agent (scope).
            let served = registry.visible(&call.tool).is_some_and(|v| {
                v.spec.group == call.group
                    && v.spec.offered_to(&call.agent)
                    && match stage {
                        Stage::Awaiting(_) | Stage::Parked => true,
                        Stage::Claimed { by } => registry.serves(by, &call.group),
                    }
            });
            (!served).then(|| {
                Failure::new(
                    CancelReason::ToolWithdrawn,
                    format!("tool {:?} was withdrawn", call.tool),
                )
            })
        })
    }

    fn publish_ended(&self, ended: &[EndedCall]) {
        self.history.failed(ended);
        for e in ended {
            info!(request = %e.id, agent = %e.call.agent, tool = %e.call.tool, reason = e.reason.as_str(), "request ended");
            if !e.offered {
                // Apps never saw it (it awaited approval): nothing of it is theirs to learn.
                continue;
            }
            self.bus.publish(
                kind::CANCELLED,
                json(&CancelledEvent {
                    id: e.id.clone(),
                    agent: e.call.agent.clone(),
                    tool: e.call.tool.clone(),
                    reason: e.reason,
                }),
                Some(json(&Redacted { id: e.id.clone() })),
            );
        }
    }
}

/// True when `call` waits for an app that left (`Core::left`): parked, for a tool such an app
/// served in the call's group; claimed, by such an app, in such a group.
fn waits_for_left(left: &HashMap<ClientId, Served>, call: &Call, stage: &Stage) -> bool {
    match stage {
        Stage::Awaiting(_) | Stage::Parked => left.values().any(|served| left_serves(served, call)),
        Stage::Claimed { by } => left.get(by).is_some_and(|s| s.contains_key(&call.group)),
    }
}

/// True when `served`, what an app served when it left, holds the call's tool in its group.
fn left_serves(served: &Served, call: &Call) -> bool {
    served
        .get(&call.group)
        .is_some_and(|tools| tools.contains(&call.tool))
}
