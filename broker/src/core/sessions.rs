//! Sidecar sessions: opening and closing them, what each agent is offered, the shared
//! `tools` frame, the agent's cancel and its mailbox.

use bytes::Bytes;
use leo_protocol::ErrorCode;
use leo_protocol::events::CancelReason;
use leo_protocol::ipc::{AgentTool, BrokerFrame, Harness, Message, Mode};
use leo_protocol::names::AgentName;
use leo_protocol::tool::ToolDef;
use tokio::sync::broadcast;
use tracing::info;

use leo_protocol::lines::encode_frame;

use super::{Broker, SessionInfo};

/// The broker's built-in tool that reads an agent's mailbox.
pub const MESSAGES_TOOL: &str = "leo_messages";
use crate::messages::Queued;
use crate::refusal::Refusal;
use crate::registry::ToolSpec;
use crate::requests::{ConnId, Failure};

impl Broker {
    /// A sidecar said hello; returns its connection id.
    pub fn session_open(
        &self,
        agent: &str,
        session: &str,
        harness: Option<Harness>,
        mode: Mode,
        transport: leo_protocol::ipc::Transport,
    ) -> ConnId {
        self.mail.know(agent);
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
                transport,
                connected_at: leo_protocol::time::now(),
                via: None,
            },
        );
        drop(core);
        self.touched();
        conn
    }

    /// In a cluster: session `conn` reached the leader through follower `via`.
    pub fn session_via(&self, conn: ConnId, via: String) {
        if let Some(s) = self.lock().sessions.get_mut(&conn) {
            s.via = Some(via);
        }
        self.touched();
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
            (call.conn == conn).then(|| Failure::new(CancelReason::AgentGone, "the agent stopped"))
        });
        self.publish_ended(&ended);
        self.touched();
        info!(agent = %info.agent, session = %info.session, cancelled = ended.len(), "sidecar session closed");
    }

    /// A piped session's connection was lost without word that its sidecar left (its
    /// follower was killed or cut off): its calls are not ended but wait, with the outcomes it
    /// may have missed (`left`), for the sidecar to come back through another connection and
    /// resume, as after a restart, for `client_tools.resume_grace_s`.
    pub fn session_detached(&self, conn: ConnId, left: super::Left) {
        let mut core = self.lock();
        let Some(info) = core.sessions.remove(&conn) else {
            return;
        };
        if core.shutting_down {
            // Every call has ended already; nothing waits for a sidecar any more.
            return;
        }
        let waiting = left.calls.len();
        let key = super::SessionKey::new(&info.agent, &info.session);
        self.orphan(&mut core, key, left);
        drop(core);
        self.touched();
        info!(agent = %info.agent, session = %info.session, waiting, "piped sidecar session lost; its calls wait for it");
    }

    /// True when `agent` is offered `spec`: the registration's `agents` name it, its
    /// `allow_tools` (if any) list it, and its `deny_tools` do not.
    pub(super) fn offered(&self, agent: &str, denied: &[String], spec: &ToolSpec) -> bool {
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

    /// The `tools` frame for `agent`, encoded. Agents without `deny_tools` or
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
        let line = encode_frame(&BrokerFrame::Tools {
            revision,
            tools,
            ever_registered,
        });
        if shared && !scoped {
            *cache = Some((revision, line.clone()));
        }
        line
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
                CancelReason::CancelledByAgent,
                "the agent cancelled the call",
            ),
        );
        if let Some(e) = ended {
            self.publish_ended(&[e]);
            self.touched();
        }
    }

    // ----- messages -----

    /// Stamps and queues a message for `agent`, and tells its connected sessions;
    /// acknowledged once it is on disk.
    pub async fn deliver_message(
        &self,
        agent: &AgentName,
        from: &str,
        text: &str,
    ) -> Result<Queued, Refusal> {
        self.accepted(|| self.mail.deliver(agent, from, text, &self.store))
            .await
    }

    /// `fetch_messages`: returns and acknowledges `agent`'s unread messages, oldest first. An
    /// agent denied `leo_messages` is refused and its mailbox stays unread, so raw frames
    /// cannot drain it either.
    pub fn fetch_messages(&self, agent: &str) -> Result<(Vec<Message>, u64), Refusal> {
        if self
            .config
            .denied_for(agent)
            .iter()
            .any(|t| t == MESSAGES_TOOL)
        {
            return Err(Refusal::new(
                ErrorCode::Denied,
                format!("tool {MESSAGES_TOOL:?} is denied to agent {agent:?}"),
            ));
        }
        Ok(self.mail.take(agent, &self.store))
    }

    /// Arrivals of messages, for sessions to push to harnesses that can show them.
    pub fn watch_arrivals(&self) -> broadcast::Receiver<(String, Message)> {
        self.mail.watch()
    }
}

/// A tool as agents see it: the words a model reads (description, label, the descriptions in
/// the schema) through the one sanitizer, since an app wrote them.
fn agent_tool(def: &ToolDef, group: &str, handoff: bool) -> AgentTool {
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
