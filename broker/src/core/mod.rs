//! The broker's state and every operation on it, behind one mutex.
//!
//! Registrations, requests, ownership, connected clients and sidecar sessions change together
//! (a client leaving withdraws its tools, which cancels calls, which publishes events), so they
//! live in one `Core` under one lock, and each operation is a short critical section that
//! changes state and publishes its events before it lets go. Nothing here awaits while holding
//! the lock.
//!
//! **Architecture Invariant:** only this module mutates `Registry`, `Requests` and `Owners`;
//! HTTP and IPC handlers call `Broker` methods and never touch the state directly.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::console::{ASK_HUMAN, CONSOLE_GROUP};
use leo_protocol::content::{AppError, Posted, ResultBody, ResultError};
use leo_protocol::events::{
    CancelReason, CancelledEvent, ChangedEvent, FEATURES, Hello, Redacted, RequestEvent, kind,
};
use leo_protocol::ipc::{AgentTool, BrokerFrame, Harness, Message, Mode, RawOutcome as Outcome};
use leo_protocol::requests::{Approved, PendingRequest, Registered, RequestAck, ToolList};
use leo_protocol::tool::RegisterBody;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::events::{EventBus, Subscription};
use crate::messages::{Mailboxes, Queued, stamp};
use crate::ownership::Owners;
use crate::refusal::Refusal;
use crate::registry::{Change, ClientId, Registry};
use crate::requests::{Call, ConnId, EndedCall, Failure, Requests, Stage};
use crate::state_file::EverRegistered;
use crate::tokens::random_id;

mod ask_human;
mod relay;
mod snapshot;

pub use ask_human::CONSOLE_CLIENT;

/// A connected event stream.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// Connection order, for stable listings.
    pub n: u64,
    pub provider: bool,
    /// Who opened it: `operator`, `device:NAME`, `agent`; `console` for the console's provider.
    pub principal: String,
    /// The name the app gave itself (`?name=…`), checked by `check_app_name`.
    pub name: Option<String>,
    pub connected_at: String,
    /// The web console's built-in provider (`ask_human`): not a stream, and not usable as a
    /// `client_id` over HTTP.
    pub internal: bool,
}

/// A connected sidecar.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub agent: String,
    pub session: String,
    pub harness: Option<Harness>,
    pub mode: Mode,
    pub connected_at: String,
}

struct Core {
    clients: HashMap<ClientId, ClientInfo>,
    registry: Registry,
    requests: Requests,
    owners: Owners,
    ever: EverRegistered,
    sessions: BTreeMap<ConnId, SessionInfo>,
    next_conn: ConnId,
    shutting_down: bool,
}

/// The broker: shared by every HTTP handler, IPC session and timer.
pub struct Broker {
    core: Mutex<Core>,
    /// The `tools` frame every agent without `deny_tools` gets, by revision.
    tools_cache: Mutex<Option<(u64, Bytes)>>,
    /// Messages to agents; their own lock, since they never touch tools or requests.
    mail: Mutex<Mailboxes>,
    /// Tells connected sessions that a message arrived for their agent.
    arrivals: broadcast::Sender<(String, Message)>,
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

/// One IPC frame as a JSON line, ready to write to any number of sessions.
pub fn encode_line<F: Serialize>(frame: &F) -> Bytes {
    let mut line = serde_json::to_vec(frame).unwrap_or_else(|e| {
        warn!(error = %e, "frame failed to serialize");
        b"{}".to_vec()
    });
    line.push(b'\n');
    line.into()
}

fn json<T: Serialize>(value: &T) -> String {
    // Our own event types always serialize; a failure would be a bug, not bad input.
    serde_json::to_string(value).unwrap_or_else(|e| {
        warn!(error = %e, "event failed to serialize");
        "{}".to_owned()
    })
}

impl Broker {
    pub fn new(config: Arc<Config>, ever: EverRegistered) -> Arc<Broker> {
        let (revision, _) = watch::channel(0);
        let (changes, _) = watch::channel(0);
        let (arrivals, _) = broadcast::channel(256);
        let mail = Mailboxes::new(config.agents.keys().cloned());
        Arc::new_cyclic(|me| Broker {
            tools_cache: Mutex::new(None),
            mail: Mutex::new(mail),
            arrivals,
            core: Mutex::new(Core {
                clients: HashMap::new(),
                registry: Registry::new(config.client_tools.pin_definitions),
                requests: Requests::new(config.client_tools.remember_settled),
                owners: Owners::default(),
                ever,
                sessions: BTreeMap::new(),
                next_conn: 1,
                shutting_down: false,
            }),
            bus: EventBus::new(config.client_tools.replay_events),
            revision,
            changes,
            config,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            me: me.clone(),
            relay: relay::Relay::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // Every critical section leaves Core consistent before anything that can panic, so a
        // poisoned lock is still usable; refusing service forever would be worse.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
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

    // ----- event streams -----

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
    fn client_gone(&self, client_id: &str) {
        let mut core = self.lock();
        if core.clients.remove(client_id).is_none() || core.shutting_down {
            // At shutdown every call has already ended; the tool set is not announced again.
            return;
        }
        core.owners.release_client(client_id);
        let (change, _) = core.registry.remove_client(client_id);
        let ended = core.requests.end_where(|call, stage| match stage {
            crate::requests::Stage::Claimed { by } if by == client_id => Some(Failure::new(
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

    /// Publishes what a registration change did: cancels calls whose tool nobody serves any
    /// more, announces the new revision.
    fn after_change(&self, core: &mut Core, change: Change, mut ended: Vec<EndedCall>) {
        if change == Change::Changed {
            let registry = &core.registry;
            ended.extend(core.requests.end_where(|call, stage| {
                // A call also ends when the tool is no longer offered to its agent (scope).
                let served = registry.visible(&call.tool).is_some_and(|v| {
                    v.spec.group == call.group
                        && v.spec.offered_to(&call.agent)
                        && match stage {
                            crate::requests::Stage::Parked => true,
                            crate::requests::Stage::Claimed { by } => {
                                registry.serves(by, &call.group)
                            }
                        }
                });
                (!served).then(|| {
                    Failure::new(
                        ErrorCode::Cancelled,
                        CancelReason::ToolWithdrawn,
                        format!("tool {:?} was withdrawn", call.tool),
                    )
                })
            }));
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
        }
    }

    fn publish_ended(&self, ended: &[EndedCall]) {
        for e in ended {
            info!(request = %e.id, agent = %e.call.agent, tool = %e.call.tool, reason = e.reason.as_str(), "request ended");
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

    fn require_provider(core: &Core, client_id: &str) -> Result<(), Refusal> {
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

    // ----- registration -----

    /// `POST /api/v1/client-tools`.
    pub fn register(&self, body: RegisterBody) -> Result<Registered, Refusal> {
        if body.group == CONSOLE_GROUP {
            return Err(Refusal::new(
                ErrorCode::NameConflict,
                format!(
                    "at $.group: group {CONSOLE_GROUP:?} is reserved for the web console's {ASK_HUMAN}"
                ),
            ));
        }
        let specs = Registry::prepare(
            &body.group,
            body.tools,
            body.agents,
            self.config.client_tools.default_timeout_s,
        )?;
        let mut core = self.lock();
        Self::require_provider(&core, &body.client_id)?;
        let names: Vec<String> = specs.iter().map(|s| s.def.name.clone()).collect();
        let defs: Vec<leo_protocol::tool::ToolDef> = specs.iter().map(|s| s.def.clone()).collect();
        let change = core
            .registry
            .register(&body.client_id, &body.group, specs)?;
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
        self.after_change(&mut core, change, Vec::new());
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

    /// The registration lints of `group`'s `defs`, against the other groups' visible tools.
    fn lint(registry: &Registry, group: &str, defs: &[leo_protocol::tool::ToolDef]) -> Vec<String> {
        let refs: Vec<&leo_protocol::tool::ToolDef> = defs.iter().collect();
        let others = registry
            .view()
            .values()
            .filter(|v| v.spec.group != group)
            .map(|v| v.spec.def.name.as_str());
        crate::lints::warnings(&refs, others)
    }

    /// The operator approves `tool`'s changed definition (`pin_definitions`): agents are
    /// offered it from now on, and their calls are checked against it.
    pub fn approve(&self, tool: &str) -> Result<Approved, Refusal> {
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
        self.lock().registry.list()
    }

    /// `GET …/requests`: pending requests.
    pub fn pending(&self) -> Vec<PendingRequest> {
        let core = self.lock();
        core.requests.pending(&core.owners)
    }

    // ----- claims and results -----

    /// `POST …/requests/{id}/claim`.
    pub fn claim(&self, id: &str, client_id: &str) -> Result<RequestAck, Refusal> {
        let mut core = self.lock();
        Self::require_provider(&core, client_id)?;
        let call = Self::claim_locked(&mut core, id, client_id)?;
        debug!(request = id, client_id, agent = %call.agent, tool = %call.tool, "request claimed");
        self.touched();
        Ok(RequestAck {
            id: id.to_owned(),
            state: "claimed".into(),
        })
    }

    /// `POST …/requests/{id}/result`.
    pub fn post_result(&self, id: &str, body: ResultBody) -> Result<RequestAck, Refusal> {
        let client_id = body.client_id.clone();
        let claim = body.claim;
        let posted = body.into_posted().map_err(|e| match e {
            ResultError::Invalid(m) => Refusal::new(ErrorCode::InvalidResult, m),
            ResultError::TooLarge(n) => Refusal::new(
                ErrorCode::ResultTooLarge,
                format!(
                    "at $.content: {n} bytes, at most {}",
                    leo_protocol::limits::MAX_RESULT_BYTES
                ),
            ),
        })?;
        let mut core = self.lock();
        Self::require_provider(&core, &client_id)?;
        Self::check_output(&core, id, &posted)?;
        let call = Self::settle_locked(&mut core, id, &client_id, posted, claim)?;
        debug!(request = id, client_id, agent = %call.agent, tool = %call.tool, "request settled");
        self.touched();
        Ok(RequestAck {
            id: id.to_owned(),
            state: "settled".into(),
        })
    }

    /// Claims request `id` for `client_id`, with the claim route's checks (the client must serve
    /// the call's group; ownership).
    fn claim_locked<'c>(
        core: &'c mut Core,
        id: &str,
        client_id: &str,
    ) -> Result<&'c Call, Refusal> {
        let serves = core
            .requests
            .get(id)
            .is_some_and(|(call, _)| core.registry.serves(client_id, &call.group));
        core.requests.claim(id, client_id, serves, &mut core.owners)
    }

    /// Settles request `id`; with `claim`, a request still parked is claimed first, under the
    /// same lock, so nobody sees it claimed but unanswered.
    fn settle_locked(
        core: &mut Core,
        id: &str,
        client_id: &str,
        posted: Posted,
        claim: bool,
    ) -> Result<Call, Refusal> {
        if claim && matches!(core.requests.get(id), Some((_, Stage::Parked))) {
            Self::claim_locked(core, id, client_id)?;
        }
        core.requests.settle(id, client_id, posted)
    }

    // ----- sidecar sessions -----

    /// A sidecar said hello; returns its connection id.
    pub fn session_open(
        &self,
        agent: &str,
        session: &str,
        harness: Option<Harness>,
        mode: Mode,
    ) -> ConnId {
        self.mailboxes().know(agent);
        let mut core = self.lock();
        let conn = core.next_conn;
        core.next_conn += 1;
        core.sessions.insert(
            conn,
            SessionInfo {
                agent: agent.to_owned(),
                session: session.to_owned(),
                harness,
                mode,
                connected_at: leo_protocol::time::now(),
            },
        );
        drop(core);
        self.touched();
        conn
    }

    /// The sidecar reported its harness after `initialize`.
    pub fn session_harness(&self, conn: ConnId, harness: Harness, mode: Mode) {
        if let Some(s) = self.lock().sessions.get_mut(&conn) {
            s.harness = Some(harness);
            s.mode = mode;
        }
        self.touched();
    }

    /// A sidecar connection closed: the agent stopped, so its calls are cancelled.
    pub fn session_closed(&self, conn: ConnId) {
        let mut core = self.lock();
        let Some(info) = core.sessions.remove(&conn) else {
            return;
        };
        let ended = core.requests.end_where(|call, _| {
            (call.conn == conn).then(|| {
                Failure::new(
                    ErrorCode::Cancelled,
                    CancelReason::AgentGone,
                    "the agent stopped",
                )
            })
        });
        self.publish_ended(&ended);
        self.touched();
        info!(agent = %info.agent, session = %info.session, cancelled = ended.len(), "sidecar session closed");
    }

    /// True when `agent` is offered `spec`: the registration's `agents` name it, its
    /// `allow_tools` (if any) list it, and its `deny_tools` do not.
    fn offered(&self, agent: &str, denied: &[String], spec: &crate::registry::ToolSpec) -> bool {
        spec.offered_to(agent)
            && self.config.allows(agent, &spec.def.name)
            && !denied.contains(&spec.def.name)
    }

    /// A fingerprint of what `agent` is offered now: equal fingerprints, equal `tools` frames
    /// (but for the revision), so a session is told only about changes that reach it.
    pub fn offer_fingerprint(&self, agent: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let denied = self.config.denied_for(agent);
        let core = self.lock();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for v in core.registry.view().values() {
            if self.offered(agent, &denied, &v.spec) {
                (&v.spec.def.name, &v.spec.group, &v.spec.digest).hash(&mut h);
            }
        }
        core.ever.is_empty().hash(&mut h);
        h.finish()
    }

    /// What `agent` sees: every visible tool offered to it, and the revision.
    pub fn agent_tools(&self, agent: &str) -> (u64, Vec<AgentTool>, bool) {
        let (revision, tools, ever_registered, _) = self.agent_tools_scoped(agent);
        (revision, tools, ever_registered)
    }

    /// `agent_tools`, and whether that revision offers some tool to chosen agents only (read
    /// under the same lock, so a shared frame is never one cut for a chosen agent).
    fn agent_tools_scoped(&self, agent: &str) -> (u64, Vec<AgentTool>, bool, bool) {
        let denied = self.config.denied_for(agent);
        let core = self.lock();
        let tools = core
            .registry
            .view()
            .values()
            .filter(|v| self.offered(agent, &denied, &v.spec))
            .map(|v| agent_tool(&v.spec.def, &v.spec.group, v.spec.timeout_s.is_none()))
            .collect();
        let scoped = core.registry.scoped();
        (
            core.registry.revision(),
            tools,
            !core.ever.is_empty(),
            scoped,
        )
    }

    /// The `tools` frame for `agent`, as one JSON line. Agents without `deny_tools` or
    /// `allow_tools` see the same list while no tool is offered to chosen agents only, so theirs
    /// is serialized once per such revision and shared by every session.
    pub fn tools_line(&self, agent: &str) -> Bytes {
        let shared =
            self.config.denied_for(agent).is_empty() && self.config.allowed_for(agent).is_none();
        let mut cache = self.tools_cache.lock().unwrap_or_else(|p| p.into_inner());
        // Only lines of unscoped revisions are cached, so a hit is right for every such agent.
        if shared
            && let Some((revision, line)) = cache.as_ref()
            && *revision == *self.revision.borrow()
        {
            return line.clone();
        }
        let (revision, tools, ever_registered, scoped) = self.agent_tools_scoped(agent);
        let line = encode_line(&BrokerFrame::Tools {
            revision,
            tools,
            ever_registered,
        });
        if shared && !scoped {
            *cache = Some((revision, line.clone()));
        }
        line
    }

    /// An agent calls a client tool. The receiver gets exactly one outcome.
    pub fn call(
        &self,
        conn: ConnId,
        local_id: u64,
        tool: &str,
        arguments: Value,
    ) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        if let Err(refusal) = self.park(conn, local_id, tool, arguments, tx) {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Outcome::Error {
                error: AppError {
                    code: refusal.code.as_str().to_owned(),
                    message: refusal.message,
                },
            });
            return rx;
        }
        rx
    }

    fn park(
        &self,
        conn: ConnId,
        local_id: u64,
        tool: &str,
        arguments: Value,
        reply: oneshot::Sender<Outcome>,
    ) -> Result<(), Refusal> {
        let mut core = self.lock();
        if core.shutting_down {
            return Err(Refusal::new(
                ErrorCode::Cancelled,
                "the broker is shutting down",
            ));
        }
        let Some(session) = core.sessions.get(&conn).cloned() else {
            return Err(Refusal::new(ErrorCode::NoClient, "the session is closed"));
        };
        let denied = self.config.denied_for(&session.agent);
        if denied.iter().any(|d| d == tool) {
            return Err(Refusal::new(
                ErrorCode::Denied,
                format!("tool {tool:?} is denied to agent {:?}", session.agent),
            ));
        }
        if !self.config.allows(&session.agent, tool) {
            // Said of any name outside the list, served or not, so it reveals nothing.
            return Err(Refusal::new(
                ErrorCode::Denied,
                format!(
                    "tool {tool:?} is not in the allow_tools of agent {:?}",
                    session.agent
                ),
            ));
        }
        let offered = core
            .registry
            .visible(tool)
            .filter(|v| v.spec.offered_to(&session.agent));
        let Some(visible) = offered else {
            // Only what this agent may call is named, never a tool denied to it or registered
            // for other agents.
            let served: Vec<String> = core
                .registry
                .view()
                .values()
                .filter(|v| self.offered(&session.agent, &denied, &v.spec))
                .map(|v| v.spec.def.name.clone())
                .collect();
            return Err(Refusal::new(
                ErrorCode::NoClient,
                crate::suggest::no_such_tool(tool, &served),
            ));
        };
        let spec = visible.spec.clone();
        let arguments = match arguments {
            Value::Null => Value::Object(Default::default()),
            other => other,
        };
        let text = serde_json::to_vec(&arguments).unwrap_or_default();
        if text.len() > leo_protocol::limits::MAX_ARGUMENTS_BYTES {
            return Err(Refusal::new(
                ErrorCode::InvalidArguments,
                format!(
                    "at $: arguments have {} bytes, at most {}",
                    text.len(),
                    leo_protocol::limits::MAX_ARGUMENTS_BYTES
                ),
            ));
        }
        // An app reads the arguments with serde_json too: nothing deeper than it can read.
        leo_protocol::depth::check_depth(&text, "$")
            .map_err(|message| Refusal::new(ErrorCode::InvalidArguments, message))?;
        drop(text);
        check_arguments(&spec.validator, &arguments)?;
        if core.requests.find_local(conn, local_id).is_some() {
            return Err(Refusal::new(
                ErrorCode::InvalidFrame,
                format!("call id {local_id} is already in flight on this session"),
            ));
        }
        let id = random_id("r_");
        let call = Call {
            agent: session.agent.clone(),
            session: session.session.clone(),
            conn,
            local_id,
            group: spec.group.clone(),
            tool: tool.to_owned(),
            arguments,
            timeout_s: spec.timeout_s,
            created_at: leo_protocol::time::now(),
            parked_at: std::time::Instant::now(),
        };
        let event = RequestEvent {
            id: id.clone(),
            agent: call.agent.clone(),
            session: call.session.clone(),
            group: call.group.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            timeout_s: call.timeout_s,
            created_at: call.created_at.clone(),
            owner: core.owners.owner(&call.agent, &call.group).cloned(),
        };
        let timeout = call.timeout_s;
        core.requests.park(id.clone(), call, reply);
        if let Some(secs) = timeout {
            let me = self.me.clone();
            let rid = id.clone();
            let timer = self.tasks.spawn(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                if let Some(broker) = me.upgrade() {
                    broker.expire(&rid, secs);
                }
            });
            core.requests.set_timer(&id, timer.abort_handle());
        }
        debug!(request = %id, agent = %session.agent, tool, "request parked");
        self.bus.publish(
            kind::REQUEST,
            json(&event),
            Some(json(&Redacted { id: id.clone() })),
        );
        self.touched();
        Ok(())
    }

    fn expire(&self, id: &str, secs: u64) {
        let mut core = self.lock();
        let ended = core.requests.end(
            id,
            Failure::new(
                ErrorCode::Timeout,
                CancelReason::Timeout,
                format!("no result within {secs} s"),
            ),
        );
        drop(core);
        if let Some(e) = ended {
            self.publish_ended(&[e]);
            self.touched();
        }
    }

    /// The harness cancelled a call.
    pub fn cancel_call(&self, conn: ConnId, local_id: u64) {
        let mut core = self.lock();
        let Some(id) = core.requests.find_local(conn, local_id) else {
            return;
        };
        let ended = core.requests.end(
            &id,
            Failure::new(
                ErrorCode::Cancelled,
                CancelReason::CancelledByAgent,
                "the agent cancelled the call",
            ),
        );
        if let Some(e) = ended {
            self.publish_ended(&[e]);
            self.touched();
        }
    }

    /// The operator cancels a live call, from the console or `POST …/requests/{id}/cancel`.
    pub fn cancel_request(&self, id: &str) -> Result<RequestAck, Refusal> {
        let mut core = self.lock();
        let ended = core.requests.end(
            id,
            Failure::new(
                ErrorCode::Cancelled,
                CancelReason::CancelledByOperator,
                "the operator cancelled the call",
            ),
        );
        let Some(e) = ended else {
            return Err(core.requests.not_live(id));
        };
        info!(request = id, agent = %e.call.agent, tool = %e.call.tool, "request cancelled by the operator");
        self.publish_ended(&[e]);
        self.touched();
        Ok(RequestAck {
            id: id.to_owned(),
            state: "cancelled".into(),
        })
    }

    // ----- messages -----

    fn mailboxes(&self) -> MutexGuard<'_, Mailboxes> {
        // Each mailbox operation is one push or drain; a poisoned lock is still consistent.
        self.mail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stamps and queues a message for `agent`, and tells its connected sessions.
    pub fn deliver_message(&self, agent: &str, from: &str, text: &str) -> Result<Queued, Refusal> {
        let message = Message {
            text: stamp(from, text),
            from: from.to_owned(),
            at: leo_protocol::time::now(),
        };
        let queued = self.mailboxes().deliver(agent, message.clone())?;
        let _ = self.arrivals.send((agent.to_owned(), message));
        info!(agent, from, unread = queued.unread, "message queued");
        Ok(queued)
    }

    /// Returns and acknowledges `agent`'s unread messages, oldest first.
    pub fn take_messages(&self, agent: &str) -> (Vec<Message>, u64) {
        self.mailboxes().take(agent)
    }

    /// Arrivals of messages, for sessions to push to harnesses that can show them.
    pub fn watch_arrivals(&self) -> broadcast::Receiver<(String, Message)> {
        self.arrivals.subscribe()
    }

    // ----- status and shutdown -----

    /// Ends every live call with `cancelled` (reason `shutdown`) and refuses new ones.
    pub fn begin_shutdown(&self) {
        let mut core = self.lock();
        core.shutting_down = true;
        let ended = core.requests.end_where(|_, _| {
            Some(Failure::new(
                ErrorCode::Cancelled,
                CancelReason::Shutdown,
                "the broker is shutting down",
            ))
        });
        self.publish_ended(&ended);
        if let Err(e) = core.ever.flush() {
            warn!(error = %e, "cannot flush client-tools.json at shutdown");
        }
        drop(core);
        self.touched();
        self.shutdown.cancel();
    }
}

/// A tool as agents see it: the words a model reads (description, label, the descriptions in
/// the schema) through the one sanitizer, since an app wrote them.
fn agent_tool(def: &leo_protocol::tool::ToolDef, group: &str, handoff: bool) -> AgentTool {
    use leo_protocol::sanitize::{Lines, sanitize, sanitize_schema};
    let mut input_schema = def.input_schema.clone();
    sanitize_schema(&mut input_schema);
    let output_schema = def.output_schema.clone().map(|mut s| {
        sanitize_schema(&mut s);
        s
    });
    AgentTool {
        name: def.name.clone(),
        description: sanitize(&def.description, Lines::Keep).into_owned(),
        input_schema,
        title: def
            .shown_title()
            .map(|l| sanitize(l, Lines::Join).into_owned()),
        group: group.to_owned(),
        annotations: def.annotations,
        output_schema,
        execution: def.effective_execution(handoff),
    }
}

/// Validates call arguments against the tool's schema, naming the first few faults.
fn check_arguments(validator: &jsonschema::Validator, args: &Value) -> Result<(), Refusal> {
    if !args.is_object() {
        return Err(Refusal::new(
            ErrorCode::InvalidArguments,
            "at $: arguments must be an object",
        ));
    }
    let faults: Vec<String> = validator
        .iter_errors(args)
        .take(3)
        .map(|e| format!("at {}: {e}", pointer_to_path(e.instance_path().as_str())))
        .collect();
    if faults.is_empty() {
        Ok(())
    } else {
        Err(Refusal::new(ErrorCode::InvalidArguments, faults.join("; ")))
    }
}

/// `/a/0/b c` → `$.a[0]["b c"]`.
fn pointer_to_path(pointer: &str) -> String {
    let mut out = String::from("$");
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            leo_protocol::envelope::push_key(&mut out, &seg);
        }
    }
    out
}
