//! An agent's call: every policy check (deny and allow rules, scopes, argument size, depth
//! and schema), parking, and the timer that ends it.

use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::events::{CancelReason, Redacted, kind};
use leo_protocol::ipc::RawOutcome;
use leo_protocol::limits::MAX_ARGUMENTS_BYTES;
use leo_protocol::requests::Request;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tracing::debug;

use super::{Broker, Core, SessionInfo, json};
use crate::refusal::Refusal;
use crate::registry::ToolSpec;
use crate::requests::{Call, ConnId, Failure};
use crate::tokens::random_id;

impl Broker {
    /// An agent calls a client tool. Every policy decision is made here: the session, the
    /// agent's `deny_tools` and `allow_tools`, the registration's `agents`, the arguments'
    /// size, depth and schema, the call id. A refusal is returned at once; a parked call's
    /// receiver gets exactly one outcome.
    pub fn call(
        &self,
        conn: ConnId,
        local_id: u64,
        tool: &str,
        arguments: Value,
        traceparent: Option<&str>,
    ) -> Result<(String, oneshot::Receiver<RawOutcome>), Refusal> {
        self.store_available()?;
        let mut core = self.lock();
        let session = Self::caller(&core, conn)?;
        let spec = self.permitted(&core, &session.agent, tool)?;
        let arguments = checked_arguments(&spec, arguments)?;
        if core.requests.find_local(conn, local_id).is_some() {
            return Err(Refusal::new(
                ErrorCode::InvalidFrame,
                format!("call id {local_id} is already in flight on this session"),
            ));
        }
        let call = Call {
            request: Request {
                id: random_id("r_").into(),
                agent: session.agent,
                session: session.session,
                group: spec.group.clone(),
                tool: tool.to_owned(),
                arguments,
                timeout_s: spec.timeout_s,
                created_at: leo_protocol::time::now(),
                owner: None,
                traceparent: None,
            },
            conn,
            local_id,
            parked_at: std::time::Instant::now(),
        };
        let awaiting = self.awaiting_for(&spec, &call);
        let (reply, rx) = oneshot::channel();
        let id = self.park(&mut core, call, reply, traceparent, awaiting);
        drop(core);
        self.touched();
        Ok((id, rx))
    }

    /// The session a call comes from, while the broker takes calls.
    fn caller(core: &Core, conn: ConnId) -> Result<SessionInfo, Refusal> {
        if core.shutting_down {
            return Err(Broker::stopping(core));
        }
        core.sessions
            .get(&conn)
            .cloned()
            .ok_or_else(|| Refusal::new(ErrorCode::NoClient, "the session is closed"))
    }

    /// The tool `agent` may call by `tool`: not denied, in its `allow_tools` (if any), served
    /// and offered to it by its registration's `agents`.
    fn permitted(&self, core: &Core, agent: &str, tool: &str) -> Result<Arc<ToolSpec>, Refusal> {
        let denied = self.config.denied_for(agent);
        if denied.iter().any(|d| d == tool) {
            return Err(Refusal::new(
                ErrorCode::Denied,
                format!("tool {tool:?} is denied to agent {agent:?}"),
            ));
        }
        if !self.config.allows(agent, tool) {
            // Said of any name outside the list, served or not, so it reveals nothing.
            return Err(Refusal::new(
                ErrorCode::Denied,
                format!("tool {tool:?} is not in the allow_tools of agent {agent:?}"),
            ));
        }
        let offered = core
            .registry
            .visible(tool)
            .filter(|v| v.spec.offered_to(agent));
        if let Some(visible) = offered {
            return Ok(visible.spec.clone());
        }
        // Only what this agent may call is named, never a tool denied to it or registered for
        // other agents.
        let served: Vec<String> = core
            .registry
            .view()
            .values()
            .filter(|v| self.offered(agent, &denied, &v.spec))
            .map(|v| v.spec.def.name.clone())
            .collect();
        Err(Refusal::new(
            ErrorCode::NoClient,
            crate::suggest::no_such_tool(tool, &served),
        ))
    }

    /// Parks a checked call, opens its span (under the sidecar's `traceparent`), arms its
    /// timer and publishes `client_tool.request` (the call's `Request` itself, with its owner
    /// and its span's context), under the lock. A call `awaiting` approval is published to
    /// approvers instead (`approvals`).
    fn park(
        &self,
        core: &mut Core,
        mut call: Call,
        reply: oneshot::Sender<RawOutcome>,
        traceparent: Option<&str>,
        awaiting: Option<crate::requests::Awaiting>,
    ) -> String {
        call.request.traceparent = crate::telemetry::parked(&call, traceparent);
        call.request.owner = core
            .owners
            .owner(&call.agent, &call.group)
            .filter(|o| !core.away.contains(*o))
            .cloned();
        let id = call.id.clone();
        let event = json(&call.request);
        debug!(request = %id, agent = %call.agent, tool = %call.tool, "request parked");
        let timeout = call.timeout_s;
        if let Some(awaiting) = awaiting {
            let shown = call.clone();
            core.requests.park(call, reply, Some(awaiting.clone()));
            if let Some(secs) = timeout {
                self.arm_timer(core, &id, secs, Duration::from_secs(secs));
            }
            self.await_approval(core, &shown, &awaiting);
            return id.to_string();
        }
        core.requests.park(call, reply, None);
        if let Some(secs) = timeout {
            self.arm_timer(core, &id, secs, Duration::from_secs(secs));
        }
        self.bus.publish(
            kind::REQUEST,
            event,
            Some(json(&Redacted { id: id.clone() })),
        );
        id.to_string()
    }

    /// Ends call `id` by timeout after `after` (its `timeout_s` is `secs`), counted from now,
    /// not from when the timer's task first runs.
    pub(super) fn arm_timer(&self, core: &mut Core, id: &str, secs: u64, after: Duration) {
        let rid = id.to_owned();
        let timer = self.timer(super::deadline_in(after), move |broker| {
            broker.expire(&rid, secs);
        });
        core.requests.set_timer(id, timer.abort_handle());
    }

    pub(super) fn expire(&self, id: &str, secs: u64) {
        let mut core = self.lock();
        let ended = core.requests.end(
            id,
            Failure::new(CancelReason::Timeout, format!("no result within {secs} s")),
        );
        // Published under the lock, like every other ending: a result posted in between
        // cannot see the call ended before its `client_tool.cancelled` is in the stream.
        if let Some(e) = ended {
            self.publish_ended(&[e]);
            drop(core);
            self.touched();
        }
    }
}

/// The arguments as the app will read them (`null` is `{}`), within the size and depth an app
/// can read, and valid for the tool's schema: parsed once (by the frame), checked as a tree
/// (the schema check needs one), then kept as the compact text that was measured.
pub(super) fn checked_arguments(
    spec: &ToolSpec,
    arguments: Value,
) -> Result<Box<RawValue>, Refusal> {
    let arguments = match arguments {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    let text = serde_json::value::to_raw_value(&arguments)
        .map_err(|e| Refusal::new(ErrorCode::InvalidArguments, format!("at $: {e}")))?;
    let bytes = text.get().len();
    if bytes > MAX_ARGUMENTS_BYTES {
        return Err(Refusal::new(
            ErrorCode::InvalidArguments,
            format!("at $: arguments have {bytes} bytes, at most {MAX_ARGUMENTS_BYTES}"),
        ));
    }
    // An app reads the arguments with serde_json too: nothing deeper than it can read.
    leo_protocol::depth::check_depth(text.get().as_bytes(), "$")
        .map_err(|message| Refusal::new(ErrorCode::InvalidArguments, message))?;
    check_arguments(&spec.validator, &arguments)?;
    Ok(text)
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
pub(super) fn pointer_to_path(pointer: &str) -> String {
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
