//! An app's request for a completion by the harness's model, as MCP `sampling/createMessage`.
//!
//! Only a harness that declared the `sampling` capability is asked; any other, and any
//! 2026-07-28 request (that revision has no server-to-client requests, and its
//! `input_required` carries questions only here), gets `input_unsupported` at once, so the app
//! can go on without. The request is tagged with the call's request id, so Streamable HTTP
//! sends it on the call's own stream, as a question is (`elicit`).
#![allow(deprecated)] // rmcp marks sampling deprecated (SEP-2577); MCP 2025-11-25 has it.

use std::future::Future;

use leo_protocol::content::AppError;
use leo_protocol::sampling::SampleOutcome;
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, RequestId, ServerRequest,
};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

pub fn refused(code: &str, message: impl Into<String>) -> SampleOutcome {
    SampleOutcome::Refused {
        error: AppError {
            code: code.to_owned(),
            message: message.into(),
        },
    }
}

/// The refusal for a harness that cannot sample, naming it.
pub fn unsupported(peer: &Peer<RoleServer>) -> SampleOutcome {
    let name = peer
        .peer_info()
        .map(|i| i.client_info.name.clone())
        .unwrap_or_else(|| "the harness".into());
    refused(
        "input_unsupported",
        format!("the agent's harness ({name}) does not support MCP sampling"),
    )
}

/// The request to send, or the refusal to answer at once.
pub fn prepare(
    peer: &Peer<RoleServer>,
    origin: Option<RequestId>,
    params: Value,
) -> Result<impl Future<Output = SampleOutcome> + Send + 'static, SampleOutcome> {
    let declared = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.sampling.is_some());
    if !declared {
        return Err(unsupported(peer));
    }
    let params: CreateMessageRequestParams = serde_json::from_value(params)
        .map_err(|e| refused("invalid_parameter", format!("at $.params: {e}")))?;
    params
        .validate()
        .map_err(|e| refused("invalid_parameter", format!("at $.params: {e}")))?;
    let request = crate::elicit::tagged(
        ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params)),
        origin,
    );
    let peer = peer.clone();
    Ok(async move {
        match peer.send_request(request).await {
            Ok(ClientResult::CreateMessageResult(r)) => match serde_json::to_value(*r) {
                Ok(result) => SampleOutcome::Answer { result },
                Err(e) => refused("input_unsupported", format!("an unreadable result: {e}")),
            },
            Ok(other) => refused(
                "input_unsupported",
                format!("the harness answered sampling/createMessage with {other:?}"),
            ),
            Err(e) => refused(
                "input_unsupported",
                format!("the harness could not sample: {e}"),
            ),
        }
    })
}
