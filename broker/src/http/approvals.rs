//! The approval routes (`/api/v1/approvals…`): list the calls awaiting approval, approve one
//! (perhaps with edited arguments), deny one. Who may is the core's rule
//! (`approvals.approvers`, never a call's own agent); each decision is an audit entry with the
//! approver, the digest and the decision.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::response::Response;
use leo_protocol::approvals::{ApproveBody, DenyBody};

use super::AppState;
use super::auth::BodyLimit;
use super::history::audit;
use super::reply::{json_body, ok, query_flags};
use super::routes::caller;
use crate::refusal::Refusal;
use crate::tokens::Principal;

/// `GET /api/v1/approvals`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    uri: Uri,
) -> Result<Response, Refusal> {
    query_flags(uri.query(), &[])?;
    Ok(ok(state.broker.approvals(&caller(&who))?))
}

/// `POST /api/v1/approvals/{id}/approve`.
#[tracing::instrument(name = "approve_call", skip_all, fields(request = %id))]
pub async fn approve(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: ApproveBody = json_body(body, limit).await?;
    let mut detail = format!("digest={}", body.digest);
    if let Some(args) = &body.arguments {
        detail.push_str(&format!(" edited={args}"));
    }
    let decided = state.broker.approve_call(&id, body, &caller(&who)).await?;
    audit(&state, Some(&who), "approve_call", &id, Some(detail));
    Ok(ok(decided))
}

/// `POST /api/v1/approvals/{id}/deny`.
#[tracing::instrument(name = "deny_call", skip_all, fields(request = %id))]
pub async fn deny(
    State(state): State<Arc<AppState>>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    body: Body,
) -> Result<Response, Refusal> {
    let body: DenyBody = json_body(body, limit).await?;
    let mut detail = format!("digest={}", body.digest);
    if let Some(reason) = &body.reason {
        detail.push_str(&format!(" reason={reason:?}"));
    }
    let decided = state.broker.deny_call(&id, body, &caller(&who)).await?;
    audit(&state, Some(&who), "deny_call", &id, Some(detail));
    Ok(ok(decided))
}
