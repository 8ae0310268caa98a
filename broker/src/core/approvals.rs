//! A person approves before a call runs (docs/approvals.md).
//!
//! A call that needs approval (its tool was registered with `approval: "required"`, or a rule
//! of the operator's `approvals.require` holds it) is parked like any call, durably, but in the
//! stage `Awaiting`: no `client_tool.request` is published, it is not in `?pending=1`, and a
//! claim of it is told `unknown_request`, so no app learns of it or its arguments. Approvers
//! (the operator; by config paired devices and API clients) see it on their plain event streams
//! (`client_tool.approval_requested`) and in `GET /api/v1/approvals`. An approval moves it to
//! `Parked` and publishes it as any new call; a denial or the expiry ends it like any other
//! ending, so the rule "every call ends exactly once" is the requests' own. The decision and
//! the check of its digest happen under the core's one lock, so two approvers at once cannot
//! both decide: the second finds the call no longer awaiting (`409 already_decided`).
//!
//! The digest binds a decision to the exact call: the agent, the tool, the group, the
//! canonical arguments and the digest of the tool's definition as offered, so the same
//! arguments in a later call, or an edited definition, need a new approval. The definition is
//! checked again when a decision comes: if the app changed it while the call awaited, the
//! decision is refused `409 digest_mismatch` and the call stays awaiting under a new digest
//! (approvers are told again), so what runs is only ever what a person approved.

use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::approvals::{
    ApprovalList, ApproveBody, AwaitingApproval, Decided, Decision, DenyBody, MAX_REASON_CHARS,
    RequiredBy,
};
use leo_protocol::events::{CancelReason, kind};
use leo_protocol::ipc::BrokerFrame;
use leo_protocol::lines::encode_frame;
use leo_protocol::sanitize::{Lines, sanitize};
use serde_json::Value;

use super::{Broker, Core, json};
use crate::refusal::Refusal;
use crate::registry::ToolSpec;
use crate::requests::{Awaiting, Call, Failure, Stage};

/// What the harness is told while its call waits for a person.
pub const WAITING: &str = "waiting for approval";
/// What it is told once the call is approved.
pub const APPROVED: &str = "approved; waiting for the app to answer";

impl Broker {
    /// Whether `agent`'s calls of `spec` need approval, why, and whether an approver may edit
    /// their arguments. An app's requirement always holds; the operator's rules add to it.
    fn approval_policy(&self, spec: &ToolSpec, agent: &str) -> Option<(RequiredBy, bool)> {
        let approvals = &self.config.approvals;
        let rule = approvals
            .require
            .iter()
            .find(|r| r.holds(agent, &spec.def.name));
        let by_tool = spec.def.approval.is_some();
        match (by_tool, rule) {
            (true, rule) => Some((
                RequiredBy::Tool,
                approvals.allow_edits || rule.is_some_and(|r| r.allow_edits),
            )),
            (false, Some(rule)) => Some((RequiredBy::Config, rule.allow_edits)),
            (false, None) => None,
        }
    }

    /// The approval a new call awaits, if its policy asks for one.
    pub(super) fn awaiting_for(&self, spec: &ToolSpec, call: &Call) -> Option<Awaiting> {
        let (required_by, editable) = self.approval_policy(spec, &call.agent)?;
        let expire_ms = (self.config.approvals.expire_s as i64).saturating_mul(1000);
        Some(Awaiting {
            digest: digest(call, &spec.digest),
            editable,
            required_by,
            requested_at: call.created_at.clone(),
            expires_ms: crate::store::now_ms().saturating_add(expire_ms),
        })
    }

    /// A call was parked awaiting approval (or restored so): approvers are told, its harness
    /// hears why it waits, and its approval expires at its time. Under the lock.
    pub(super) fn await_approval(&self, core: &mut Core, call: &Call, awaiting: &Awaiting) {
        let left = awaiting.expires_ms.saturating_sub(crate::store::now_ms());
        let id = call.id.to_string();
        let timer = self.timer(
            super::deadline_in(Duration::from_millis(u64::try_from(left).unwrap_or(0))),
            move |broker| broker.approval_expired(&id),
        );
        core.requests
            .set_approval_timer(&call.id, timer.abort_handle());
        // Whole on every stream that gets it: only approvers' plain streams do (`http::events`).
        self.bus
            .publish(kind::APPROVAL_REQUESTED, json(&view(call, awaiting)), None);
        self.tell_waiting(call);
    }

    /// Tells `call`'s harness that it waits for approval, if its session is here.
    pub(super) fn tell_waiting(&self, call: &Call) {
        self.tell(call, WAITING);
    }

    /// Tells `call`'s harness why it waits, as progress, if its session is here.
    fn tell(&self, call: &Call, message: &str) {
        let frame = BrokerFrame::Progress {
            id: call.local_id,
            progress: 0.0,
            total: None,
            message: Some(message.into()),
        };
        self.push_to(&[call.conn], &encode_frame(&frame));
    }

    /// `GET /api/v1/approvals`: the calls `who` may decide, oldest first.
    pub fn approvals(&self, who: &str) -> Result<ApprovalList, Refusal> {
        self.check_approver(who)?;
        let core = self.lock();
        let approvals = core
            .requests
            .awaiting()
            .filter(|(call, _)| !own_agent(who, call))
            .map(|(call, awaiting)| view(call, awaiting))
            .collect();
        Ok(ApprovalList { approvals })
    }

    /// `POST /api/v1/approvals/{id}/approve`: the call goes on to the apps, with the edited
    /// arguments when given (checked against the tool's schema again). Answered once stored.
    pub async fn approve_call(
        &self,
        id: &str,
        body: ApproveBody,
        who: &str,
    ) -> Result<Decided, Refusal> {
        self.store_available()?;
        let edited = body.arguments.is_some();
        {
            let mut core = self.lock();
            let awaiting = Self::decidable(&core, id, &body.digest, who)?;
            self.definition_unchanged(&mut core, id)?;
            let arguments = match body.arguments {
                None => None,
                Some(_) if !awaiting.editable => {
                    return Err(Refusal::new(
                        ErrorCode::Forbidden,
                        "this call's approval allows no edits (approvals.allow_edits)",
                    ));
                }
                Some(args) => Some(self.edited_arguments(&core, id, args)?),
            };
            if let Some(call) = core.requests.approve(id, who, arguments) {
                self.tell(call, APPROVED);
            }
            core.unoffered.insert(id.to_owned().into());
            self.offer_restored(&mut core);
        }
        self.touched();
        self.committed().await?;
        Ok(Decided {
            id: id.to_owned().into(),
            decision: Decision::Approved,
            edited,
        })
    }

    /// `POST /api/v1/approvals/{id}/deny`: the agent gets the tool error `denied: <reason>`.
    pub async fn deny_call(&self, id: &str, body: DenyBody, who: &str) -> Result<Decided, Refusal> {
        self.store_available()?;
        let reason = match body.reason.as_deref().map(str::trim) {
            Some(r) if r.chars().count() > MAX_REASON_CHARS => {
                return Err(Refusal::new(
                    ErrorCode::InvalidParameter,
                    format!("at $.reason: at most {MAX_REASON_CHARS} characters"),
                ));
            }
            Some(r) if !r.is_empty() => sanitize(r, Lines::Join).into_owned(),
            _ => "the approver gave no reason".to_owned(),
        };
        {
            let mut core = self.lock();
            Self::decidable(&core, id, &body.digest, who)?;
            self.definition_unchanged(&mut core, id)?;
            let ended = core
                .requests
                .end(id, Failure::new(CancelReason::Denied, reason));
            self.publish_ended(&ended.into_iter().collect::<Vec<_>>());
        }
        self.touched();
        self.committed().await?;
        Ok(Decided {
            id: id.to_owned().into(),
            decision: Decision::Denied,
            edited: false,
        })
    }

    /// Nobody decided in time: the call ends with `approval_timeout`.
    fn approval_expired(&self, id: &str) {
        let mut core = self.lock();
        if !matches!(core.requests.get(id), Some((_, Stage::Awaiting(_)))) {
            return;
        }
        let secs = self.config.approvals.expire_s;
        let ended = core.requests.end(
            id,
            Failure::new(
                CancelReason::ApprovalTimeout,
                format!("nobody approved the call within {secs} s"),
            ),
        );
        self.publish_ended(&ended.into_iter().collect::<Vec<_>>());
        drop(core);
        self.touched();
    }

    fn check_approver(&self, who: &str) -> Result<(), Refusal> {
        if self.config.approvals.may_approve(who) {
            Ok(())
        } else {
            Err(Refusal::new(
                ErrorCode::Forbidden,
                format!("{who} is not an approver (approvals.approvers)"),
            ))
        }
    }

    /// The approval of call `id` that `who` may decide now with `digest`: `who` is an approver
    /// and not the call's own agent, the call awaits, and the digest is the call's.
    fn decidable(core: &Core, id: &str, digest: &str, who: &str) -> Result<Awaiting, Refusal> {
        let Some((call, stage)) = core.requests.get(id) else {
            return Err(match core.requests.not_live(id).code {
                ErrorCode::AlreadySettled => Refusal::new(
                    ErrorCode::AlreadyDecided,
                    format!("request {id} is no longer awaiting approval"),
                ),
                _ => Refusal::new(ErrorCode::UnknownRequest, format!("no request {id}")),
            });
        };
        if own_agent(who, call) {
            return Err(Refusal::new(
                ErrorCode::Forbidden,
                format!("{who} may not decide a call of its own agent"),
            ));
        }
        let Stage::Awaiting(awaiting) = stage else {
            return Err(Refusal::new(
                ErrorCode::AlreadyDecided,
                format!("request {id} is no longer awaiting approval"),
            ));
        };
        if awaiting.digest != digest {
            return Err(Refusal::new(
                ErrorCode::DigestMismatch,
                format!("at $.digest: not the digest of request {id}; list the approvals again"),
            ));
        }
        Ok((**awaiting).clone())
    }

    /// Refuses a decision on awaiting call `id` when the definition its tool is offered with
    /// now is not the one its digest names: the app changed it while the call awaited. The
    /// call then awaits a decision on the new one: its digest is renewed and stored, and
    /// approvers get `client_tool.approval_requested` again. A tool no app serves now keeps its
    /// digest (there is no other definition to show).
    fn definition_unchanged(&self, core: &mut Core, id: &str) -> Result<(), Refusal> {
        let Some((call, Stage::Awaiting(awaiting))) = core.requests.get(id) else {
            return Ok(());
        };
        let Some(spec) = served_spec(core, call) else {
            return Ok(());
        };
        let now = digest(call, &spec.digest);
        if now == awaiting.digest {
            return Ok(());
        }
        if let Some((call, awaiting)) = core.requests.redigest(id, now.clone()) {
            self.bus
                .publish(kind::APPROVAL_REQUESTED, json(&view(call, awaiting)), None);
        }
        Err(Refusal::new(
            ErrorCode::DigestMismatch,
            format!(
                "the definition of tool {:?} changed while request {id} awaited approval; it \
                 now awaits a decision on the new definition (digest {now}): list the approvals \
                 again",
                spec.def.name
            ),
        ))
    }

    /// An approver's arguments for call `id`, checked as the agent's were.
    fn edited_arguments(
        &self,
        core: &Core,
        id: &str,
        args: Value,
    ) -> Result<Box<serde_json::value::RawValue>, Refusal> {
        let (call, _) = core
            .requests
            .get(id)
            .ok_or_else(|| core.requests.not_live(id))?;
        let spec = served_spec(core, call).ok_or_else(|| {
            Refusal::new(
                ErrorCode::NoClient,
                format!("tool {:?} is not served now", call.tool),
            )
        })?;
        super::calls::checked_arguments(&spec, args)
    }
}

/// The definition `call`'s tool is offered with now, if its group still serves it.
fn served_spec(core: &Core, call: &Call) -> Option<std::sync::Arc<ToolSpec>> {
    core.registry
        .visible(&call.tool)
        .filter(|v| v.spec.group == call.group)
        .map(|v| v.spec.clone())
}

/// True when `who` is a device named as the call's agent: an agent's own principal never
/// decides its calls.
fn own_agent(who: &str, call: &Call) -> bool {
    who.strip_prefix("device:") == Some(call.agent.as_str())
}

/// The digest a decision of `call` names (see the module's doc).
fn digest(call: &Call, definition: &str) -> String {
    let arguments: Value = serde_json::from_str(call.arguments.get()).unwrap_or_default();
    crate::registry::digest_of_value(&serde_json::json!([
        call.agent, call.tool, call.group, arguments, definition,
    ]))
}

/// How approvers see an awaiting call.
fn view(call: &Call, awaiting: &Awaiting) -> AwaitingApproval {
    let expires = std::time::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(awaiting.expires_ms).unwrap_or(0));
    AwaitingApproval {
        id: call.id.clone(),
        agent: call.agent.clone(),
        session: call.session.clone(),
        group: call.group.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        digest: awaiting.digest.clone(),
        editable: awaiting.editable,
        required_by: awaiting.required_by,
        requested_at: awaiting.requested_at.clone(),
        expires_at: leo_protocol::time::rfc3339(expires),
    }
}
