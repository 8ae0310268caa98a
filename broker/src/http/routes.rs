//! The JSON routes: registration, listing, pending requests, claim, result, status.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, Uri};
use axum::response::Response;
use leo_protocol::ErrorCode;
use leo_protocol::console::CancelBody;
use leo_protocol::content::ResultBody;
use leo_protocol::requests::ClaimBody;
use leo_protocol::tool::RegisterBody;

use super::AppState;
use super::auth::{BodyLimit, Target};
use super::history::audit;
use super::reply::{json_body, ok, optional_json_body, query_flags};
use crate::messages::{MAX_TEXT_BYTES, MessageBody, check_from, operator_sender};
use crate::refusal::Refusal;
use crate::tokens::Principal;

/// The principal of the caller's token, as the core names it: the one a `client_id` in the
/// body must belong to. Never a body field.
pub fn caller(who: &Principal) -> String {
    crate::history::who(who).0
}

#[tracing::instrument(name = "register", skip_all)]
pub async fn register(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: RegisterBody = json_body(body, limit).await?;
    let client_id = body.client_id.clone();
    let done = state.broker.register_answered(&caller(&who), body).await?;
    let action = if done.tools.is_empty() {
        "withdraw"
    } else {
        "register"
    };
    let detail = format!(
        "{client_id} tools={} revision={}",
        done.tools.len(),
        done.revision
    );
    audit(&state, Some(&who), action, &done.group, Some(detail));
    Ok(ok(done))
}

pub async fn list_tools(State(state): State<Arc<AppState>>, uri: Uri) -> Result<Response, Refusal> {
    query_flags(uri.query(), &[])?;
    Ok(ok(state.broker.tools()))
}

pub async fn pending(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    uri: Uri,
) -> Result<Response, Refusal> {
    if super::history::wants_ended(uri.query())? {
        return super::history::ended(&state, &who, &uri).await;
    }
    // Only pending requests are held, so `pending=1` and no flag list the same thing; the flag
    // is accepted because existing apps send it.
    let rest = super::history::without_state(uri.query());
    query_flags(rest.as_deref(), &["pending"])?;
    Ok(ok(state.broker.pending()))
}

#[tracing::instrument(name = "claim", skip_all, fields(request = %id))]
pub async fn claim(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: ClaimBody = json_body(body, limit).await?;
    let ack = state
        .broker
        .claim(&id, &body.client_id, &caller(&who))
        .await?;
    audit(
        &state,
        Some(&who),
        "claim",
        &id,
        Some(body.client_id.to_string()),
    );
    Ok(ok(ack))
}

#[tracing::instrument(name = "result", skip_all, fields(request = %id))]
pub async fn result(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: ResultBody = json_body(body, limit).await?;
    let detail = format!(
        "{} {}",
        body.client_id,
        if body.ok { "ok" } else { "error" }
    );
    let ack = state.broker.post_result(&id, body, &caller(&who)).await?;
    audit(&state, Some(&who), "result", &id, Some(detail));
    Ok(ok(ack))
}

/// `POST …/requests/{id}/cancel`: the operator ends a live call (`cancelled_by_operator`).
#[tracing::instrument(name = "cancel", skip_all, fields(request = %id))]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    who: Option<Extension<Principal>>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let CancelBody {} = optional_json_body(body, limit).await?;
    let ack = state.broker.cancel_request(&id).await?;
    audit(&state, who.as_ref().map(|w| &w.0), "cancel", &id, None);
    Ok(ok(ack))
}

/// `POST /api/v1/client-tools/definitions/{name}/approve`: the operator approves a changed
/// definition held by `pin_definitions`.
#[tracing::instrument(name = "approve", skip_all, fields(tool = %name))]
pub async fn approve(
    State(state): State<Arc<AppState>>,
    who: Option<Extension<Principal>>,
    Path(name): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let CancelBody {} = optional_json_body(body, limit).await?;
    let approved = state.broker.approve(&name).await?;
    let detail = Some(approved.digest.clone());
    audit(&state, who.as_ref().map(|w| &w.0), "approve", &name, detail);
    Ok(ok(approved))
}

pub async fn status(State(state): State<Arc<AppState>>) -> Response {
    ok(state.broker.status())
}

pub async fn not_found(State(state): State<Arc<AppState>>, req: Request<Body>) -> Refusal {
    super::auth::gate_unrouted(&state, &req).unwrap_or_else(|| {
        Refusal::new(
            ErrorCode::NotFound,
            format!("no route {}", req.uri().path()),
        )
    })
}

pub async fn method_not_allowed(State(state): State<Arc<AppState>>, req: Request<Body>) -> Refusal {
    super::auth::gate_unrouted(&state, &req).unwrap_or_else(|| {
        Refusal::new(
            ErrorCode::MethodNotAllowed,
            format!("method not allowed on {}", req.uri().path()),
        )
    })
}

/// `POST /web/agent/{target}/message`, for scoped API clients. The target is the one `auth`
/// decoded and checked against the caller's scope; the raw path segment is never looked at
/// again.
#[tracing::instrument(name = "message", skip_all, fields(target = %target))]
pub async fn message(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Extension(Target(target)): Extension<Target>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: MessageBody = json_body(body, limit).await?;
    if body.text.len() > MAX_TEXT_BYTES {
        return Err(Refusal::new(
            ErrorCode::TextTooLarge,
            format!(
                "at $.text: {} bytes, at most {MAX_TEXT_BYTES}",
                body.text.len()
            ),
        ));
    }
    match &who {
        Principal::ApiClient(name) => check_from(name, &body.from)?,
        _ => check_from(operator_sender(&body.from)?, &body.from)?,
    }
    let queued = state
        .broker
        .deliver_message(&target, &body.from, &body.text)
        .await?;
    let detail = format!("from {} bytes={}", body.from, body.text.len());
    audit(&state, Some(&who), "message", &target, Some(detail));
    Ok(ok(queued))
}

/// `POST …/requests/{id}/progress`: the claimant's progress, passed to the calling harness.
#[tracing::instrument(name = "progress", skip_all, fields(request = %id))]
pub async fn progress(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::input::ProgressBody = json_body(body, limit).await?;
    Ok(ok(state.broker.report_progress(
        &id,
        body,
        &caller(&who),
    )?))
}

/// `POST …/client-offers/requests/{id}/answer`: an app answers a read.
#[tracing::instrument(name = "offer_answer", skip_all, fields(read = %id))]
pub async fn offer_answer(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::offers::OfferAnswerBody = json_body(body, limit).await?;
    Ok(ok(state.broker.answer_offer(&id, body, &caller(&who))?))
}

/// `POST /api/v1/client-offers/updated`: an app says a resource changed.
#[tracing::instrument(name = "resource_updated", skip_all)]
pub async fn resource_updated(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::offers::ResourceUpdatedBody = json_body(body, limit).await?;
    Ok(ok(state.broker.resource_updated(body, &caller(&who))?))
}

/// `POST …/requests/{id}/input`: asks the agent's user; answers with what the user did.
#[tracing::instrument(name = "input", skip_all, fields(request = %id))]
pub async fn input(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::input::InputBody = json_body(body, limit).await?;
    Ok(ok(state.broker.ask_input(&id, body, &caller(&who)).await?))
}

/// `POST …/requests/{id}/log`: the claimant's log message, passed to the calling harness.
#[tracing::instrument(name = "log", skip_all, fields(request = %id))]
pub async fn log(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::logging::LogBody = json_body(body, limit).await?;
    Ok(ok(state.broker.log_for_call(&id, body, &caller(&who))?))
}

/// `POST …/requests/{id}/sample`: asks the caller's model; answers with the harness's result.
#[tracing::instrument(name = "sample", skip_all, fields(request = %id))]
pub async fn sample(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::sampling::SampleBody = json_body(body, limit).await?;
    Ok(ok(state
        .broker
        .ask_sample(&id, body, &caller(&who))
        .await?))
}

/// `POST /api/v1/client-tools/webhooks`: a webhook provider; the answer shows its secret, once.
/// Audited as `webhook_create` and, for its group, `register`, both by the token's principal.
#[tracing::instrument(name = "create_webhook", skip_all)]
pub async fn create_webhook(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: leo_protocol::webhooks::WebhookBody = json_body(body, limit).await?;
    let made = state.webhooks.create(&caller(&who), body).await?;
    let id = &made.client_id;
    let detail = format!("{id} url={}", crate::webhooks::url::shown(&made.url));
    audit(
        &state,
        Some(&who),
        "webhook_create",
        &made.name,
        Some(detail),
    );
    let tools = made.tools.len();
    let detail = format!("{id} tools={tools} revision={}", made.revision);
    audit(&state, Some(&who), "register", &made.group, Some(detail));
    Ok(ok(made))
}

pub async fn list_webhooks(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<Response, Refusal> {
    list_webhooks_of(&state, &uri, false)
}

/// The providers' webhooks, or (`approvals`) the approvers'.
pub(super) fn list_webhooks_of(
    state: &AppState,
    uri: &Uri,
    approvals: bool,
) -> Result<Response, Refusal> {
    query_flags(uri.query(), &[])?;
    Ok(if approvals {
        ok(state.webhooks.list_approvals())
    } else {
        ok(state.webhooks.list())
    })
}

#[tracing::instrument(name = "remove_webhook", skip_all, fields(webhook = %name))]
pub async fn remove_webhook(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> Result<Response, Refusal> {
    remove_webhook_of(&state, &who, &name, false).await
}

/// Removes a provider's webhook, or (`approvals`) an approver's; audited as `webhook_remove`
/// with its `client_id` (an approver's has none: `approvals`).
pub(super) async fn remove_webhook_of(
    state: &AppState,
    who: &Principal,
    name: &str,
    approvals: bool,
) -> Result<Response, Refusal> {
    let (removed, client_id) = state
        .webhooks
        .remove_of(&caller(who), name, approvals)
        .await?;
    let detail = if approvals {
        "approvals".into()
    } else {
        client_id
    };
    audit(state, Some(who), "webhook_remove", name, Some(detail));
    Ok(ok(removed))
}
