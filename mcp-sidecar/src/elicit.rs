//! An app's question for the user, asked through the harness as MCP `elicitation/create`
//! (form mode).
//!
//! Only a harness that declared the `elicitation` capability in `initialize` is asked; any
//! other gets nothing, and the app hears `input_unsupported` at once so that it can fall back
//! (ask in its own window, or go on with a default). The form was checked by the broker
//! (`leo_protocol::input::check_form`); rmcp's own typed schema reads it once more.

use std::future::Future;

use leo_protocol::content::AppError;
use leo_protocol::input::{InputAction, InputAnswer, InputOutcome};
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    GetExtensions, RequestId, ServerRequest,
};
use rmcp::service::OriginatingRequestId;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

fn refused(code: &str, message: impl Into<String>) -> InputOutcome {
    InputOutcome::Refused {
        error: AppError {
            code: code.to_owned(),
            message: message.into(),
        },
    }
}

/// True when the harness declared form elicitation (or elicitation with no mode, which MCP
/// reads as form).
fn supports_form(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info().is_some_and(|info| {
        info.capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
    })
}

/// The refusal for a harness that cannot ask its user.
pub fn unsupported(ctx: &rmcp::service::RequestContext<RoleServer>) -> InputOutcome {
    let name = ctx
        .client_info()
        .map(|i| i.name)
        .unwrap_or_else(|| "the harness".into());
    refused(
        "input_unsupported",
        format!("the agent's harness ({name}) does not support MCP elicitation"),
    )
}

/// The form request for `input_required` (2026-07-28), or `None` if the form does not read.
pub fn form_request(
    message: String,
    requested_schema: Value,
) -> Result<ElicitRequest, InputOutcome> {
    let schema: ElicitationSchema = serde_json::from_value(requested_schema)
        .map_err(|e| refused("invalid_parameter", format!("at $.requested_schema: {e}")))?;
    Ok(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        },
    ))
}

/// The app's answer from a client's `ElicitResult` JSON.
pub fn answer_of(result: &Value) -> InputOutcome {
    match serde_json::from_value::<rmcp::model::ElicitResult>(result.clone()) {
        Ok(r) => InputOutcome::Answer(InputAnswer {
            action: match r.action {
                ElicitationAction::Accept => InputAction::Accept,
                ElicitationAction::Decline => InputAction::Decline,
                _ => InputAction::Cancel,
            },
            content: r.content,
        }),
        Err(e) => refused(
            "input_unsupported",
            format!("the harness answered with something that is not an elicitation result: {e}"),
        ),
    }
}

/// `request`, tagged with the request it belongs to (`origin`), so that Streamable HTTP sends
/// it on that request's response stream: it is sent from a task of its own, where rmcp's own
/// tagging (a task-local) does not reach.
pub fn tagged(mut request: ServerRequest, origin: Option<RequestId>) -> ServerRequest {
    if let Some(origin) = origin {
        request
            .extensions_mut()
            .insert(OriginatingRequestId(origin));
    }
    request
}

/// The request to send, or the refusal to answer at once. A question of request `origin` is
/// tagged with it, so that Streamable HTTP sends it on that request's response stream: the
/// question runs in a task of its own, where rmcp's own tagging (a task-local) does not reach.
pub fn prepare(
    peer: &Peer<RoleServer>,
    origin: Option<RequestId>,
    message: String,
    requested_schema: Value,
) -> Result<impl Future<Output = InputOutcome> + Send + 'static, InputOutcome> {
    if !supports_form(peer) {
        let name = peer
            .peer_info()
            .map(|i| i.client_info.name.clone())
            .unwrap_or_else(|| "the harness".into());
        return Err(refused(
            "input_unsupported",
            format!("the agent's harness ({name}) does not support MCP elicitation"),
        ));
    }
    let version = peer.peer_info().map(|i| i.protocol_version.clone());
    let requested_schema = crate::forms::for_revision(requested_schema, version.as_ref())
        .map_err(|m| refused("input_unsupported", m))?;
    let schema: ElicitationSchema = serde_json::from_value(requested_schema)
        .map_err(|e| refused("invalid_parameter", format!("at $.requested_schema: {e}")))?;
    let request = tagged(
        ServerRequest::ElicitRequest(ElicitRequest::new(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            },
        )),
        origin,
    );
    let peer = peer.clone();
    Ok(async move {
        match peer.send_request(request).await {
            Ok(ClientResult::ElicitResult(r)) => InputOutcome::Answer(InputAnswer {
                action: match r.action {
                    ElicitationAction::Accept => InputAction::Accept,
                    ElicitationAction::Decline => InputAction::Decline,
                    // Cancel, and any action a newer SDK may add.
                    _ => InputAction::Cancel,
                },
                content: r.content,
            }),
            Ok(other) => refused(
                "input_unsupported",
                format!("the harness answered elicitation/create with {other:?}"),
            ),
            Err(e) => refused(
                "input_unsupported",
                format!("the harness could not ask its user: {e}"),
            ),
        }
    })
}
