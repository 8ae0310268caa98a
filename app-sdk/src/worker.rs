//! One call, from claim to answer: claim it, run the handler, post what it returns.
//!
//! A claim the broker refuses because the call is taken or over (`already_claimed`,
//! `owned_by_other`, `already_settled`…) is the normal outcome of several instances racing for
//! the same call, so it is logged at debug and dropped. A handler whose call the broker ended
//! is cancelled; whatever it returns later is not posted. A reply the broker refuses
//! (`invalid_result`, `result_too_large`) is replaced by an app error carrying the broker's
//! message, so the agent is answered instead of waiting for the timeout.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use leo_protocol::ErrorCode;
use leo_protocol::content::ResultBody;
use leo_protocol::requests::ClaimBody;
use leo_protocol::requests::Request;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::call::Call;
use crate::calls::Control;
use crate::error::{Error, Result};
use crate::reply::{Outcome, Reply};
use crate::tool::Handler;
use crate::transport::{Chunks, Client};

/// What every call of one session posts with: the client, and its bodies serialized once.
pub struct Link {
    pub client: Arc<Client>,
    pub client_id: String,
    claim_body: Bytes,
    /// `{"client_id":"…","ok":true,"content":` — the content and `}` follow.
    ok_prefix: Bytes,
    /// The same with `"claim":true`, for tools that answer at once.
    claim_ok_prefix: Bytes,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Link {
    pub fn new(client: Arc<Client>, client_id: String) -> Result<Link> {
        let encode = |e: serde_json::Error| Error::Protocol {
            what: "client id",
            message: e.to_string(),
        };
        let claim_body = serde_json::to_vec(&ClaimBody {
            client_id: client_id.clone(),
        })
        .map_err(encode)?;
        let prefix = |claim: bool| {
            let mut prefix = serde_json::to_vec(&ResultBody {
                client_id: client_id.clone(),
                ok: true,
                claim,
                content: None,
                structured_content: None,
                error: None,
            })
            .map_err(encode)?;
            // `{…,"ok":true}` becomes `{…,"ok":true,"content":`.
            prefix.pop();
            prefix.extend_from_slice(b",\"content\":");
            Ok::<Bytes, Error>(prefix.into())
        };
        Ok(Link {
            ok_prefix: prefix(false)?,
            claim_ok_prefix: prefix(true)?,
            client,
            client_id,
            claim_body: claim_body.into(),
        })
    }

    fn prefix(&self, claim: bool) -> Bytes {
        if claim {
            self.claim_ok_prefix.clone()
        } else {
            self.ok_prefix.clone()
        }
    }

    fn result_body(&self, reply: &Reply, claim: bool) -> Chunks {
        match &reply.0 {
            Outcome::Content(content, None) => Chunks::new([
                self.prefix(claim),
                content.clone(),
                Bytes::from_static(b"}"),
            ]),
            Outcome::Content(content, Some(structured)) => Chunks::new([
                self.prefix(claim),
                content.clone(),
                Bytes::from_static(b",\"structured_content\":"),
                structured.clone(),
                Bytes::from_static(b"}"),
            ]),
            Outcome::Error(error) => {
                let body = ResultBody {
                    client_id: self.client_id.clone(),
                    ok: false,
                    claim,
                    content: None,
                    structured_content: None,
                    error: Some(error.clone()),
                };
                Chunks::new([Bytes::from(serde_json::to_vec(&body).unwrap_or_default())])
            }
        }
    }
}

/// Tells the session a call is done, however the worker ends.
struct Done {
    id: String,
    tx: mpsc::UnboundedSender<String>,
}

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.tx.send(std::mem::take(&mut self.id));
    }
}

/// Claims `request`, runs `handler` on it, and posts the reply; with `at_once`, runs it first
/// and posts the reply with the claim.
pub async fn work(
    link: Arc<Link>,
    request: Request,
    control: Arc<Control>,
    handler: Handler,
    at_once: bool,
    grace: Duration,
    done: mpsc::UnboundedSender<String>,
) {
    let _done = Done {
        id: request.id.clone(),
        tx: done,
    };
    let id = request.id.clone();
    if (!at_once && !claim(&link, &id).await) || control.token.is_cancelled() {
        return;
    }
    let call = Call::new(
        request,
        control.token.clone(),
        (!at_once).then(|| link.clone()),
    );
    let mut task = tokio::spawn(handler(call));
    let joined = tokio::select! {
        joined = &mut task => joined,
        () = control.token.cancelled() => match tokio::time::timeout(grace, &mut task).await {
            Ok(joined) => joined,
            Err(_) => {
                task.abort();
                debug!("the handler did not return within the cancel grace; dropped");
                return;
            }
        },
    };
    if control.ended() {
        debug!("the call ended at the broker; its reply is dropped");
        return;
    }
    let reply = match joined {
        Ok(reply) => reply,
        Err(e) if e.is_panic() => Reply::error("internal", "the tool's handler panicked"),
        Err(_) => return,
    };
    post(&link, &id, &reply, at_once).await;
}

/// Claims request `id`; false when the call is someone else's or over.
async fn claim(link: &Link, id: &str) -> bool {
    let path = format!("/api/v1/client-tools/requests/{id}/claim");
    let answer = link
        .client
        .post(&path, Chunks::new([link.claim_body.clone()]))
        .await;
    match answer {
        Ok(a) if a.status == 200 => true,
        Ok(a) => {
            match a.refusal() {
                Error::Refused {
                    code:
                        ErrorCode::AlreadyClaimed
                        | ErrorCode::OwnedByOther
                        | ErrorCode::AlreadySettled
                        | ErrorCode::UnknownRequest
                        | ErrorCode::NotProvider,
                    message,
                } => debug!(%message, "not claimed"),
                e => warn!(error = %e, "claim failed"),
            }
            false
        }
        Err(e) => {
            warn!(error = %e, "claim failed");
            false
        }
    }
}

/// Posts `reply`; a reply the broker refuses becomes an app error with the broker's message.
async fn post(link: &Link, id: &str, reply: &Reply, claim: bool) {
    let path = format!("/api/v1/client-tools/requests/{id}/result");
    let mut body = link.result_body(reply, claim);
    for attempt in 0..2 {
        let refusal = match link.client.post(&path, body).await {
            Ok(a) if a.status == 200 => {
                debug!(error = reply.is_error(), "answered");
                return;
            }
            Ok(a) => a.refusal(),
            Err(e) => {
                warn!(error = %e, "cannot post the result");
                return;
            }
        };
        match refusal {
            Error::Refused {
                code: code @ (ErrorCode::InvalidResult | ErrorCode::ResultTooLarge),
                message,
            } if attempt == 0 => {
                warn!(%code, %message, "the broker refused the reply; answering with an error");
                body = link.result_body(&Reply::error(code.as_str(), message), claim);
            }
            Error::Refused {
                code:
                    ErrorCode::AlreadySettled
                    | ErrorCode::NotClaimant
                    | ErrorCode::UnknownRequest
                    | ErrorCode::AlreadyClaimed
                    | ErrorCode::OwnedByOther
                    | ErrorCode::NotProvider,
                message,
            } => {
                debug!(%message, "the call ended before its reply");
                return;
            }
            e => {
                warn!(error = %e, "cannot post the result");
                return;
            }
        }
    }
}
