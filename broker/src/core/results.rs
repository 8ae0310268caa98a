//! Claims and results from apps, and the operator's cancel: the ways a parked call ends
//! from the app's side.

use leo_protocol::ErrorCode;
use leo_protocol::content::{Posted, ResultBody, ResultError};
use leo_protocol::events::CancelReason;
use leo_protocol::requests::{AckState, PendingRequest, RequestAck};
use tracing::{debug, info};

use super::{Broker, Core};
use crate::refusal::Refusal;
use crate::requests::{Call, Failure, Stage};

impl Broker {
    /// `GET …/requests`: pending requests.
    pub fn pending(&self) -> Vec<PendingRequest> {
        let core = self.lock();
        core.requests.pending(&core.owners)
    }

    /// `POST …/requests/{id}/claim`, by `caller` (the token's principal); acknowledged once
    /// the claim is on disk.
    pub async fn claim(
        &self,
        id: &str,
        client_id: &str,
        caller: &str,
    ) -> Result<RequestAck, Refusal> {
        self.accepted(|| self.claim_now(id, client_id, caller))
            .await
    }

    fn claim_now(&self, id: &str, client_id: &str, caller: &str) -> Result<RequestAck, Refusal> {
        let mut core = self.lock();
        Self::require_provider(&core, client_id, caller)?;
        let call = Self::claim_locked(&mut core, id, client_id)?;
        debug!(request = id, client_id, agent = %call.agent, tool = %call.tool, "request claimed");
        self.history
            .claimed(id, client_id, Self::app_name(&core, client_id));
        crate::telemetry::claimed(id, client_id);
        self.touched();
        Ok(RequestAck {
            id: id.to_owned().into(),
            state: AckState::Claimed,
        })
    }

    /// `POST …/requests/{id}/result`, by `caller` (the token's principal; a webhook's inline
    /// answer acts as the webhook's creator); acknowledged once the ending is on disk.
    /// Meanwhile the session writes the result frame, so the agent is not kept waiting for
    /// the commit.
    pub async fn post_result(
        &self,
        id: &str,
        body: ResultBody,
        caller: &str,
    ) -> Result<RequestAck, Refusal> {
        self.accepted(|| self.post_result_now(id, body, caller))
            .await
    }

    fn post_result_now(
        &self,
        id: &str,
        body: ResultBody,
        caller: &str,
    ) -> Result<RequestAck, Refusal> {
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
        Self::require_provider(&core, &client_id, caller)?;
        Self::check_output(&core, id, &posted)?;
        let posting = self.history.posting(&posted);
        let call = Self::settle_locked(&mut core, id, &client_id, posted, claim)?;
        debug!(request = id, %client_id, agent = %call.agent, tool = %call.tool, "request settled");
        let name = Self::app_name(&core, &client_id);
        self.history
            .settled(id, call, (client_id.to_string(), name), posting);
        self.touched();
        Ok(RequestAck {
            id: id.to_owned().into(),
            state: AckState::Settled,
        })
    }

    /// The name a connected app gave itself.
    fn app_name(core: &Core, client_id: &str) -> Option<String> {
        core.clients.get(client_id).and_then(|c| c.name.clone())
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
        // An owner whose stream is gone does not hold its group against a connected app: an
        // app that opened a new stream instead of resuming goes on serving its agents.
        let away_owner = core.requests.get(id).and_then(|(call, _)| {
            core.owners
                .owner(&call.agent, &call.group)
                .filter(|o| core.away.contains(*o))
                .map(|_| (call.agent.clone(), call.group.clone()))
        });
        if serves && let Some((agent, group)) = away_owner {
            core.owners.forget(&agent, &group);
        }
        core.requests.claim(id, client_id, serves, &mut core.owners)
    }

    /// Settles request `id`; with `claim`, a request still parked is claimed first, under the
    /// same lock, so nobody sees it claimed but unanswered.
    pub(super) fn settle_locked(
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

    /// The operator cancels a live call, from the console or `POST …/requests/{id}/cancel`;
    /// acknowledged once the ending is on disk.
    pub async fn cancel_request(&self, id: &str) -> Result<RequestAck, Refusal> {
        self.accepted(|| self.cancel_now(id)).await
    }

    fn cancel_now(&self, id: &str) -> Result<RequestAck, Refusal> {
        let mut core = self.lock();
        let ended = core.requests.end(
            id,
            Failure::new(
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
            id: id.to_owned().into(),
            state: AckState::Cancelled,
        })
    }
}
