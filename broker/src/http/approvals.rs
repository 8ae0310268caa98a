//! The approval routes (`/api/v1/approvals…`): list the calls awaiting approval, approve one
//! (perhaps with edited arguments), deny one. Who may is the core's rule
//! (`approvals.approvers`, never a call's own agent); each decision is an audit entry with the
//! approver, the digest and the decision.
//!
//! The console's list and buttons (`/console/approvals…`) are these same handlers: a console
//! login is the operator, and its audit entries name the console.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::response::Response;
use leo_protocol::approvals::{ApprovalWebhookBody, ApproveBody, DenyBody};

use super::AppState;
use super::auth::BodyLimit;
use super::history::audit;
use super::reply::{json_body, ok, query_flags};
use crate::refusal::Refusal;
use crate::tokens::Principal;

/// Who decides: the token's principal, or the operator through a console login.
fn approver(who: &Option<Extension<Principal>>) -> String {
    who.as_ref()
        .map_or_else(|| "operator".to_owned(), |w| super::routes::caller(&w.0))
}

/// `GET /api/v1/approvals` and `GET /console/approvals`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    who: Option<Extension<Principal>>,
    uri: Uri,
) -> Result<Response, Refusal> {
    query_flags(uri.query(), &[])?;
    Ok(ok(state.broker.approvals(&approver(&who))?))
}

/// `POST /api/v1/approvals/{id}/approve` and `/console/approvals/{id}/approve`.
#[tracing::instrument(name = "approve_call", skip_all, fields(request = %id))]
pub async fn approve(
    State(state): State<Arc<AppState>>,
    who: Option<Extension<Principal>>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: ApproveBody = json_body(body, limit).await?;
    let mut detail = format!("digest={}", body.digest);
    if let Some(args) = &body.arguments {
        detail.push_str(&format!(" edited={args}"));
    }
    let decided = state
        .broker
        .approve_call(&id, body, &approver(&who))
        .await?;
    audit(
        &state,
        who.as_ref().map(|w| &w.0),
        "approve_call",
        &id,
        Some(detail),
    );
    Ok(ok(decided))
}

/// `POST /api/v1/approvals/{id}/deny` and `/console/approvals/{id}/deny`.
#[tracing::instrument(name = "deny_call", skip_all, fields(request = %id))]
pub async fn deny(
    State(state): State<Arc<AppState>>,
    who: Option<Extension<Principal>>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: DenyBody = json_body(body, limit).await?;
    let mut detail = format!("digest={}", body.digest);
    if let Some(reason) = &body.reason {
        detail.push_str(&format!(" reason={reason:?}"));
    }
    let decided = state.broker.deny_call(&id, body, &approver(&who)).await?;
    audit(
        &state,
        who.as_ref().map(|w| &w.0),
        "deny_call",
        &id,
        Some(detail),
    );
    Ok(ok(decided))
}

/// `POST /api/v1/approvals/webhooks`: an approver's webhook; the answer shows its secret, once.
#[tracing::instrument(name = "create_approval_webhook", skip_all)]
pub async fn create_webhook(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: ApprovalWebhookBody = json_body(body, limit).await?;
    let made = state
        .webhooks
        .create_approvals(&super::routes::caller(&who), body)
        .await?;
    let detail = format!("approvals url={}", crate::webhooks::url::shown(&made.url));
    audit(
        &state,
        Some(&who),
        "webhook_create",
        &made.name,
        Some(detail),
    );
    Ok(ok(made))
}

/// `GET /api/v1/approvals/webhooks`.
pub async fn list_webhooks(
    State(state): State<Arc<AppState>>,
    uri: Uri,
) -> Result<Response, Refusal> {
    super::routes::list_webhooks_of(&state, &uri, true)
}

/// `DELETE /api/v1/approvals/webhooks/{name}`: by its owner or the operator.
#[tracing::instrument(name = "remove_approval_webhook", skip_all, fields(webhook = %name))]
pub async fn remove_webhook(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> Result<Response, Refusal> {
    super::routes::remove_webhook_of(&state, &who, &name, true).await
}
