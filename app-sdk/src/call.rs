//! One call of a tool, as its handler sees it.
//!
//! A call carries its cancellation: when the broker ends it (the call timed out, the agent
//! cancelled or went away, the tool was withdrawn, the app lost its connection) or the app
//! shuts down, the token is cancelled at once. The handler may watch it (`cancelled().await`
//! in a `select!`) to stop early and clean up; see `App` for what happens to a handler that
//! does not.

use std::sync::Arc;

use bytes::Bytes;
use leo_protocol::content::AppError;
use leo_protocol::input::{InputAnswer, InputBody, ProgressBody};
use leo_protocol::requests::Request;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::transport::Chunks;
use crate::worker::Link;

/// A call to answer: the broker's [`Request`] (read its fields through the call:
/// `call.id`, `call.agent`, `call.tool`, …) and the handle to the broker for this one call.
///
/// The arguments arrive as the JSON text the broker checked against the tool's input_schema
/// (`call.arguments`, a `RawValue`); [`Call::args`] reads them straight into a type, and
/// [`Call::arguments`] into a `serde_json::Value`, each when asked.
#[derive(Debug, Clone)]
pub struct Call {
    request: Request,
    pub(crate) cancel: CancellationToken,
    /// How to reach the broker as the call's claimant; `None` for a tool that answers at once
    /// (its calls are never claimed before the reply, so it cannot report or ask).
    pub(crate) claimant: Option<Arc<Link>>,
}

impl std::ops::Deref for Call {
    type Target = Request;

    fn deref(&self) -> &Request {
        &self.request
    }
}

impl Call {
    /// The request as the broker sent it.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The arguments as a JSON value (an object), parsed from their text on each call.
    pub fn arguments(&self) -> Value {
        // The broker sent valid JSON it produced itself; `null` only if that ever failed.
        serde_json::from_str(self.request.arguments.get()).unwrap_or_default()
    }

    /// The arguments as `T`, read in one pass from their text; on a mismatch, an
    /// `invalid_arguments` app error naming the JSON path, ready to return from a handler with
    /// `?`.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, AppError> {
        let mut de = serde_json::Deserializer::from_str(self.request.arguments.get());
        serde_path_to_error::deserialize(&mut de).map_err(|e| AppError {
            code: "invalid_arguments".into(),
            message: format!(
                "at {}: {}",
                leo_protocol::envelope::json_path(e.path()),
                leo_protocol::envelope::strip_position(&e.inner().to_string())
            ),
        })
    }

    /// Resolves when the call is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// True once the call is cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The cancellation token itself, to hand to other tasks.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Reports how far the work is: `progress` (growing with each report), out of `total` when
    /// known, with a short `message`. The agent's harness shows it when it gave the call a
    /// progress token, and each report keeps the call's keep-alive quiet. A report after the
    /// call ended is dropped quietly (`Ok`).
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<()> {
        let link = self.claimant("report progress")?;
        let body = ProgressBody {
            client_id: link.client_id.clone(),
            progress,
            total,
            message: message.map(str::to_owned),
        };
        body.check().map_err(Error::Config)?;
        let path = format!("/api/v1/client-tools/requests/{}/progress", self.id);
        let answer = link.client.post(&path, json_body(&body)?).await?;
        match answer.data::<Value>() {
            Ok(_) => Ok(()),
            Err(Error::Refused { code, .. }) if code.lost_the_race() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Asks the agent's user `message` through the harness, with a form (`requested_schema`:
    /// an object of string, number, integer or boolean properties) and waits for the answer,
    /// at most until the call ends. A harness that cannot ask its user answers at once with
    /// `Error::Refused { code: leo_protocol::ErrorCode::InputUnsupported, .. }`: fall back then (ask in the
    /// app's own window, or go on with a default).
    pub async fn ask(
        &self,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> Result<InputAnswer> {
        let link = self.claimant("ask the user")?;
        let body = InputBody {
            client_id: link.client_id.clone(),
            message: message.into(),
            requested_schema,
        };
        body.check().map_err(Error::Config)?;
        let path = format!("/api/v1/client-tools/requests/{}/input", self.id);
        // Bounded by the call: the broker answers at its deadline or when it ends.
        link.client
            .post_unbounded(&path, json_body(&body)?)
            .await?
            .data()
    }

    pub(crate) fn claimant(&self, what: &str) -> Result<&Link> {
        self.claimant.as_deref().ok_or_else(|| {
            Error::Config(format!(
                "tool {:?} answers at once: its calls are not claimed, so it cannot {what}",
                self.tool
            ))
        })
    }

    pub(crate) fn new(
        request: Request,
        cancel: CancellationToken,
        claimant: Option<Arc<Link>>,
    ) -> Call {
        Call {
            request,
            cancel,
            claimant,
        }
    }
}

pub(crate) fn json_body<T: serde::Serialize>(body: &T) -> Result<Chunks> {
    let bytes = serde_json::to_vec(body).map_err(|e| Error::Config(e.to_string()))?;
    Ok(Chunks::new([Bytes::from(bytes)]))
}
