//! An app's question in a 2026-07-28 session, as that revision's multi-round-trip input: the
//! `tools/call` request ends with an `input_required` result carrying the form, the client
//! asks its user and calls again with `input_responses` and the `request_state` it was given.
//!
//! A server sends no requests of its own in that revision, so this is the only way to ask.
//! The broker's call stays live across the rounds: `request_state` is an opaque handle to the
//! suspended call held here (never trusted for anything else), and the retry resumes waiting
//! on the same call after the answer went to the app. A handle nobody comes back for keeps its
//! call until the call ends on the broker's side (its timeout, or the session's end).

use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use tracing::debug;

use crate::call::{Asked, Live};
use crate::elicit;
use crate::link::BrokerLink;

/// The key of the one input request of a round.
const KEY: &str = "leo_question";

/// Whether `ctx` is a 2026-07-28 request whose client declared elicitation.
pub fn stateless(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
        && ctx
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some())
}

/// Calls waiting for the client's next round, by their `request_state`.
#[derive(Debug, Default)]
pub struct Suspended {
    calls: Mutex<HashMap<String, (Live, u64)>>,
}

impl Suspended {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Live, u64)>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends this round with the question; `Err` gives the call back when the form cannot be
    /// sent (the app was told why), so the caller goes on waiting.
    pub fn suspend(&self, link: &BrokerLink, asked: Asked) -> Result<CallToolResponse, Live> {
        let Asked {
            live,
            input,
            message,
            requested_schema,
        } = asked;
        let request = match elicit::form_request(message, requested_schema) {
            Ok(r) => r,
            Err(refused) => {
                link.answer_input(input, refused);
                return Err(live);
            }
        };
        let state = format!("leo-call-{}-input-{input}", live.id);
        debug!(call = live.id, input, "question sent as input_required");
        self.lock().insert(state.clone(), (live, input));
        let mut requests = InputRequests::new();
        requests.insert(KEY.to_owned(), InputRequest::Elicitation(request));
        Ok(InputRequiredResult::new(Some(requests), Some(state)).into())
    }

    /// The client's next round: the answer goes to the app, and the call is given back to wait
    /// on. `None` for a handle that names no suspended call.
    pub fn resume(
        &self,
        link: &BrokerLink,
        state: &str,
        responses: Option<&InputResponses>,
    ) -> Option<Live> {
        let (live, input) = self.lock().remove(state)?;
        let answer = match responses.and_then(|r| r.get(KEY)) {
            Some(result) => elicit::answer_of(result),
            None => elicit::answer_of(&serde_json::json!({"action": "cancel"})),
        };
        link.answer_input(input, answer);
        Some(live)
    }
}
