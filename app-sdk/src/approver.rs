//! An approver: a program (a phone app, a chat bot, a script) where a person decides the calls
//! that need approval (docs/approvals.md).
//!
//! It holds the broker's plain event stream with a token the broker counts as an approver (the
//! operator's, or a device or API client named in `approvals.approvers`) and hands out each call
//! that awaits a decision, whether it was asked before the stream opened (`GET
//! /api/v1/approvals`, read once the stream is open so that nothing falls between) or after
//! (`client_tool.approval_requested`). A dropped stream is opened again after the reconnect
//! backoff and the list read again; a call is handed out once.
//!
//! A decision names the call's id and digest, so it holds for that exact call: a digest that no
//! longer matches is [`Error::DigestMismatch`], a call someone else decided first, or that
//! ended, [`Error::AlreadyDecided`].

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::approvals::{ApprovalList, ApproveBody, AwaitingApproval, Decided, DenyBody};
use leo_protocol::backoff::Backoff;
use leo_protocol::events::kind;
use serde::Serialize;
use serde_json::Value;

use crate::endpoint::{Endpoint, TokenSource};
use crate::error::{Error, Result};
use crate::session::Events;
use crate::transport::Client;

/// How many ids are remembered, so that a call listed again is not handed out twice.
const SEEN: usize = 4096;

/// Receives the calls that need approval and decides them.
///
/// ```no_run
/// # async fn phone() -> leo_app::Result<()> {
/// use leo_app::{Approver, Endpoint, TokenSource};
/// let approver = Approver::new(
///     Endpoint::from_url("https://box.lan:8370")?,
///     TokenSource::Value("the phone's token".into()),
/// )?;
/// let mut requests = approver.requests();
/// loop {
///     let call = requests.next().await?;
///     if call.tool == "deploy" {
///         approver.approve(&call, None).await?;
///     } else {
///         approver.deny(&call, Some("not this one")).await?;
///     }
/// }
/// # }
/// ```
pub struct Approver {
    client: Client,
    backoff: (Duration, Duration),
}

impl Approver {
    /// An approver of the broker at `endpoint` with `token` (an `https://` endpoint trusts the
    /// system's roots and the file `LEO_CA_FILE` names).
    pub fn new(endpoint: Endpoint, token: TokenSource) -> Result<Approver> {
        Approver::with_ca_file(endpoint, token, None)
    }

    /// As [`Approver::new`], trusting `ca_file` (such as the `tls/ca.pem` of `leo tls init`)
    /// for an `https://` endpoint.
    pub fn with_ca_file(
        endpoint: Endpoint,
        token: TokenSource,
        ca_file: Option<PathBuf>,
    ) -> Result<Approver> {
        let tls = match &endpoint {
            Endpoint::Https { .. } => Some(crate::http::connector(ca_file.as_deref())?),
            _ => None,
        };
        Ok(Approver {
            client: Client::with_tls(endpoint, &token.read()?, tls)?,
            backoff: (Duration::from_millis(100), Duration::from_secs(5)),
        })
    }

    /// The reconnect delay of [`Requests`]: `first`, doubling to `cap`, jittered.
    pub fn reconnect_backoff(mut self, first: Duration, cap: Duration) -> Approver {
        self.backoff = (first, cap);
        self
    }

    /// The calls awaiting a decision now, oldest first.
    pub async fn pending(&self) -> Result<Vec<AwaitingApproval>> {
        let list: ApprovalList = self.client.get("/api/v1/approvals").await?.data()?;
        Ok(list.approvals)
    }

    /// Each call that awaits a decision, once, as it is asked.
    pub fn requests(&self) -> Requests<'_> {
        Requests {
            approver: self,
            events: None,
            queue: VecDeque::new(),
            seen: (HashSet::new(), VecDeque::new()),
            backoff: Backoff::new(self.backoff.0, self.backoff.1).jittered(),
        }
    }

    /// Lets `call` go on to its app; with `arguments`, the app gets those instead (only where
    /// the policy allows edits; the broker checks them against the tool's schema).
    pub async fn approve(
        &self,
        call: &AwaitingApproval,
        arguments: Option<Value>,
    ) -> Result<Decided> {
        let body = ApproveBody {
            digest: call.digest.clone(),
            arguments,
        };
        self.decide(call, "approve", &body).await
    }

    /// Ends `call`; its agent gets the tool error `denied: <reason>`.
    pub async fn deny(&self, call: &AwaitingApproval, reason: Option<&str>) -> Result<Decided> {
        let body = DenyBody {
            digest: call.digest.clone(),
            reason: reason.map(str::to_owned),
        };
        self.decide(call, "deny", &body).await
    }

    async fn decide(
        &self,
        call: &AwaitingApproval,
        what: &str,
        body: &impl Serialize,
    ) -> Result<Decided> {
        let id: String = form_urlencoded::byte_serialize(call.id.as_str().as_bytes()).collect();
        let json = serde_json::to_vec(body).map_err(|e| Error::Config(e.to_string()))?;
        let answer = self
            .client
            .post_json(&format!("/api/v1/approvals/{id}/{what}"), json)
            .await?;
        answer.data().map_err(|e| match e {
            Error::Refused {
                code: ErrorCode::DigestMismatch,
                message,
            } => Error::DigestMismatch(message),
            Error::Refused {
                code: ErrorCode::AlreadyDecided,
                message,
            } => Error::AlreadyDecided(message),
            e => e,
        })
    }
}

/// The calls awaiting a decision, as [`Approver::requests`] follows them.
pub struct Requests<'a> {
    approver: &'a Approver,
    events: Option<Events>,
    queue: VecDeque<AwaitingApproval>,
    seen: (HashSet<String>, VecDeque<String>),
    backoff: Backoff,
}

impl Requests<'_> {
    /// The next call awaiting a decision; waits for one, reconnecting as needed. Returns an
    /// error only when retrying cannot help ([`Error::is_fatal`]: a refused token, or a
    /// principal that is no approver).
    pub async fn next(&mut self) -> Result<AwaitingApproval> {
        loop {
            if let Some(call) = self.queue.pop_front() {
                return Ok(call);
            }
            match self.step().await {
                Ok(()) => {}
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "the approver's stream failed; connecting again");
                    self.events = None;
                    tokio::time::sleep(self.backoff.next_delay()).await;
                }
            }
        }
    }

    /// Opens the stream and lists the calls already waiting, or reads the next event.
    async fn step(&mut self) -> Result<()> {
        let Some(events) = self.events.as_mut() else {
            let body = self
                .approver
                .client
                .open_stream("/api/v1/events", None)
                .await?;
            self.events = Some(Events::new(body));
            for call in self.approver.pending().await? {
                self.offer(call);
            }
            self.backoff.reset();
            return Ok(());
        };
        let Some(frame) = events.next().await? else {
            return Err(Error::StreamEnded);
        };
        if frame.event == kind::APPROVAL_REQUESTED {
            let call = serde_json::from_slice(&frame.data).map_err(|e| Error::Protocol {
                what: "approval request",
                message: e.to_string(),
            })?;
            self.offer(call);
        }
        Ok(())
    }

    /// Queues `call` unless it was handed out already.
    fn offer(&mut self, call: AwaitingApproval) {
        let (set, order) = &mut self.seen;
        let id = call.id.as_str().to_owned();
        if !set.insert(id.clone()) {
            return;
        }
        order.push_back(id);
        if order.len() > SEEN
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        self.queue.push_back(call);
    }
}
