//! Webhook providers: an app that cannot hold an event stream is called by the broker instead.
//!
//! The bodies of `POST`/`GET /api/v1/client-tools/webhooks`, the headers of a signed delivery
//! (the Standard Webhooks convention: `webhook-id`, `webhook-timestamp`, `webhook-signature`)
//! and the inline answer an app may give in its response. What is delivered is the JSON of the
//! `client_tool.request` and `client_tool.cancelled` events, byte for byte as provider streams
//! see it, so one handler serves both kinds of app.

use crate::names::ClientId;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::content::{AppError, ResultBody};
use crate::tool::ToolDef;

/// The id of the delivered message: the request id (for a cancellation, the request id and
/// [`CANCELLED_SUFFIX`]).
pub const HEADER_ID: &str = "webhook-id";
/// Unix seconds when the delivery was signed.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// Which event the body is: `client_tool.request` or `client_tool.cancelled`.
pub const HEADER_EVENT: &str = "leo-event";
/// Appended to the request id to make a cancellation's `webhook-id`, so an app that drops
/// repeated ids (retries) does not drop the cancellation of a call it saw.
pub const CANCELLED_SUFFIX: &str = "-cancelled";
/// Appended to the request id for the `webhook-id` of an approval request sent to an
/// approver's webhook (`POST /api/v1/approvals/webhooks`).
pub const APPROVAL_SUFFIX: &str = "-approval";
/// The secret's prefix; the rest is the base64 of the key.
pub const SECRET_PREFIX: &str = "whsec_";

/// `POST /api/v1/client-tools/webhooks`: create a webhook provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookBody {
    /// 1 to 64 of `[A-Za-z0-9_.-]`, unique among webhooks.
    pub name: String,
    /// `http://` and a loopback host, or a host in `webhooks.allowed_hosts`.
    pub url: String,
    pub group: String,
    pub tools: Vec<ToolDef>,
    /// As in a registration: the agents offered the tools; `None` means every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
}

/// The answer to a creation: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookCreated {
    pub name: String,
    pub client_id: ClientId,
    pub url: String,
    pub group: String,
    /// `whsec_` and the base64 of the signing key.
    pub secret: String,
    pub revision: u64,
    pub tools: Vec<String>,
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One webhook provider, as listed (never with its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookInfo {
    pub name: String,
    pub client_id: ClientId,
    pub url: String,
    pub group: String,
    pub tools: Vec<String>,
    pub created_at: String,
    pub health: WebhookHealth,
}

/// How a webhook's deliveries have gone since the broker started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookHealth {
    /// False after [`UNHEALTHY_AFTER`] failed deliveries in a row; the next success clears it.
    pub healthy: bool,
    /// Failed deliveries since the last one that worked.
    pub failures: u32,
    /// Why the last failed delivery failed, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When a delivery last worked (RFC 3339), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ok_at: Option<String>,
}

/// Failed deliveries in a row after which a webhook is shown unhealthy.
pub const UNHEALTHY_AFTER: u32 = 3;

/// `GET /api/v1/client-tools/webhooks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookInfo>,
}

/// `DELETE /api/v1/client-tools/webhooks/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookRemoved {
    pub name: String,
    pub removed: bool,
}

/// What an app may answer a delivery with, as the body of a `200`: the result route's body
/// without `client_id` and `claim` (the broker claims and settles the call in one step).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlineAnswer {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Box<RawValue>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AppError>,
}

impl InlineAnswer {
    /// The result body the webhook's `client_id` posts, claiming in the same step.
    pub fn into_result(self, client_id: &str) -> ResultBody {
        ResultBody {
            client_id: client_id.into(),
            ok: self.ok,
            claim: true,
            content: self.content,
            structured_content: self.structured_content,
            error: self.error,
        }
    }
}

/// The text a delivery's signature covers: `id.timestamp.body`.
pub fn signed_content(id: &str, timestamp: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(id.len() + 24 + body.len());
    out.extend_from_slice(id.as_bytes());
    out.push(b'.');
    out.extend_from_slice(timestamp.to_string().as_bytes());
    out.push(b'.');
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signed_content_is_id_dot_timestamp_dot_body() {
        assert_eq!(signed_content("r_1", 42, b"{}"), b"r_1.42.{}");
    }

    #[test]
    fn an_inline_answer_is_a_claiming_result() {
        let a: InlineAnswer = crate::envelope::parse_json(
            br#"{"ok": true, "content": [{"type": "text", "text": "hi"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let r = a.into_result("c_1");
        assert!(r.claim && r.ok);
        assert_eq!(r.client_id, "c_1");
        assert!(
            crate::envelope::parse_json::<InlineAnswer>(br#"{"ok": true, "client_id": "x"}"#)
                .is_err()
        );
    }
}
