//! One call, from claim to answer: claim it, run the handler, post what it returns.
//!
//! A claim the broker refuses because the call is taken or over (`ErrorCode::LOST_RACE`:
//! `already_claimed`, `owned_by_other`, `already_settled`…) is the normal outcome of several instances racing for
//! the same call, so it is logged at debug and dropped. A handler whose call the broker ended
//! is cancelled; whatever it returns later is not posted. A reply the broker refuses
//! (`invalid_result`, `result_too_large`) is replaced by an app error carrying the broker's
//! message, so the agent is answered instead of waiting for the timeout.
//!
//! The broker may be killed and started again at any point of a call. A claim that gets no
//! answer (the connection broke) may or may not have been taken: the call is forgotten, and the
//! pending list after the reconnect tells (parked: offered again; claimed by this client: run
//! without claiming). A reply that gets no answer, or that reaches a broker that does not know
//! the app again yet (`unknown_client`), is posted again with a backoff until the broker says
//! how it went: a reply the broker had taken before the kill answers `already_settled`, and the
//! first accepted reply is the call's result. It stops when the call ends (a
//! `client_tool.cancelled`, or the app back as another client).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use leo_protocol::ErrorCode;
use leo_protocol::content::ResultBody;
use leo_protocol::names::{ClientId, RequestId};
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
use leo_protocol::backoff::Backoff;

/// The first and the longest pause between two posts of the same reply.
const RETRY: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// What every call of one session posts with: the client, and its bodies serialized once.
pub struct Link {
    pub client: Arc<Client>,
    pub client_id: ClientId,
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
    pub fn new(client: Arc<Client>, client_id: ClientId) -> Result<Link> {
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

/// How a worker starts its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Claim it, run the handler, post the reply.
    Claim,
    /// Run the handler and post the reply with the claim (`claim: true`).
    AtOnce,
    /// This client holds the claim already: run the handler, post the reply.
    Claimed,
}

/// A call the worker is done with; `forget`: its claim got no definite answer.
#[derive(Debug)]
pub struct Finished {
    pub id: RequestId,
    pub forget: bool,
}

/// Tells the session a call is done, however the worker ends.
struct Done {
    id: RequestId,
    forget: bool,
    tx: mpsc::UnboundedSender<Finished>,
}

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.tx.send(Finished {
            id: std::mem::take(&mut self.id),
            forget: self.forget,
        });
    }
}

/// How a claim went.
enum Claimed {
    Yes,
    /// Someone else's, or over.
    No,
    /// No definite answer: the connection broke, or the broker does not know us yet.
    Unsure,
}

/// Claims `request`, runs `handler` on it, and posts the reply; with `at_once`, runs it first
/// and posts the reply with the claim.
pub async fn work(
    link: Arc<Link>,
    request: Request,
    control: Arc<Control>,
    handler: Handler,
    start: Start,
    grace: Duration,
    done: mpsc::UnboundedSender<Finished>,
) {
    let mut done = Done {
        id: request.id.clone(),
        forget: false,
        tx: done,
    };
    let id = request.id.clone();
    let at_once = start == Start::AtOnce;
    if start == Start::Claim {
        match claim(&link, &id).await {
            Claimed::Yes => {}
            Claimed::No => return,
            Claimed::Unsure => {
                done.forget = true;
                return;
            }
        }
    }
    if control.token.is_cancelled() {
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
    post(&link, &id, &reply, at_once, &control).await;
}

/// Claims request `id`.
async fn claim(link: &Link, id: &str) -> Claimed {
    let path = format!("/api/v1/client-tools/requests/{id}/claim");
    let answer = link
        .client
        .post(&path, Chunks::new([link.claim_body.clone()]))
        .await;
    match answer {
        Ok(a) if a.status == 200 => Claimed::Yes,
        Ok(a) => {
            match a.refusal() {
                Error::Refused { code, message } if code.lost_the_race() => {
                    debug!(%code, %message, "not claimed");
                }
                e => {
                    warn!(error = %e, "claim failed");
                    return Claimed::Unsure;
                }
            }
            Claimed::No
        }
        Err(e) => {
            warn!(error = %e, "claim failed");
            Claimed::Unsure
        }
    }
}

/// Posts `reply`; a reply the broker refuses becomes an app error with the broker's message.
/// A post without a definite answer is sent again (see the module's doc).
async fn post(link: &Link, id: &str, reply: &Reply, claim: bool, control: &Control) {
    let path = format!("/api/v1/client-tools/requests/{id}/result");
    let mut body = link.result_body(reply, claim);
    let mut replaced = false;
    let mut backoff = Backoff::new(RETRY.0, RETRY.1).jittered();
    loop {
        let refusal = match link.client.post(&path, body.clone()).await {
            Ok(a) if a.status == 200 => {
                debug!(error = reply.is_error(), "answered");
                return;
            }
            Ok(a) => a.refusal(),
            Err(e) => {
                debug!(error = %e, "no answer to the result; posting it again");
                if !wait_to_retry(&mut backoff, control).await {
                    return;
                }
                continue;
            }
        };
        match refusal {
            Error::Refused {
                code: code @ (ErrorCode::InvalidResult | ErrorCode::ResultTooLarge),
                message,
            } if !replaced => {
                warn!(%code, %message, "the broker refused the reply; answering with an error");
                body = link.result_body(&Reply::error(code.as_str(), message), claim);
                replaced = true;
            }
            Error::Refused {
                code: code @ (ErrorCode::UnknownClient | ErrorCode::StoreUnavailable),
                ..
            } => {
                debug!(%code, "the broker cannot take the result now; posting it again");
                if !wait_to_retry(&mut backoff, control).await {
                    return;
                }
            }
            Error::Refused { code, message } if code.lost_the_race() => {
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

/// Sleeps before the next attempt; false when the call ended meanwhile.
async fn wait_to_retry(backoff: &mut Backoff, control: &Control) -> bool {
    tokio::time::sleep(backoff.next_delay()).await;
    !control.ended()
}
