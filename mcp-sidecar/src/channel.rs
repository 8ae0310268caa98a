//! The push path for messages: Claude Code channels (the `claude/channel` capability, "Push into a
//! session").
//!
//! A server that declares `capabilities.experimental["claude/channel"]: {}` may send
//! `notifications/claude/channel` with `{content, meta}`; Claude Code shows it to the model as a
//! `<channel source=…>` tag whose attributes are the `meta` entries (string values, keys of
//! letters, digits and underscores). When the broker pushes `message_arrived`, the sidecar sends
//! the stamped text as `content`, with `from` (the authenticated sender) and `at` as `meta`.
//!
//! **Declared only on opt-in** (`leo-mcp --channels`, or `LEO_MCP_CHANNELS=1`), never by
//! default:
//! - Claude Code delivers channel events only from servers the user named when starting it
//!   (`claude --dangerously-load-development-channels server:<name>` while channels are a
//!   research preview); declaring the capability buys nothing without that, and the two
//!   switches belong together in the same MCP config.
//! - A push puts text from an API client, the least trusted token kind, into the model's context
//!   without the model asking for it; that is the operator's choice to make per agent, not a
//!   default.
//! - Everyone else (codex, opencode, the SDKs) sees a standard `initialize` answer and no
//!   notifications of an unregistered method.
//!
//! A push is a notice, not a delivery: the message stays unread in the broker until
//! `leo_messages` returns it, so a push that nobody shows (the harness did not enable the
//! channel, or is not Claude Code) loses nothing, and a pushed message is returned once more by
//! the next `leo_messages` call (the server instructions say so). Nothing is pushed while
//! `leo_messages` is denied to the agent, nor before the harness sent `initialized`.

use leo_protocol::ipc::Message;
use rmcp::model::{CustomNotification, ExperimentalCapabilities, JsonObject, ServerNotification};
use rmcp::{Peer, RoleServer};
use serde_json::json;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tracing::debug;

use crate::messages::one_line;

/// The experimental capability Claude Code looks for.
pub const CAPABILITY: &str = "claude/channel";
/// The notification it listens to.
pub const METHOD: &str = "notifications/claude/channel";
/// The opt-in, as an environment variable (the flag is `--channels`).
pub const ENV: &str = "LEO_MCP_CHANNELS";

/// `experimental` with `claude/channel: {}` added.
pub fn declare(experimental: Option<ExperimentalCapabilities>) -> ExperimentalCapabilities {
    let mut caps = experimental.unwrap_or_default();
    caps.insert(CAPABILITY.to_owned(), JsonObject::new());
    caps
}

/// The channel notification for one message, through the same sanitizer as `leo_messages`
/// (the broker sanitized the text already; a second pass changes nothing).
pub fn notification(message: &Message) -> CustomNotification {
    CustomNotification::new(
        METHOD,
        Some(json!({
            "content": one_line(&message.text),
            "meta": {"from": one_line(&message.from), "at": one_line(&message.at)},
        })),
    )
}

/// Pushes every arrival to the harness while `allowed()` holds, until the harness or the
/// broker link goes away. Arrivals missed because this task lagged stay unread in the broker.
pub async fn push_arrivals(
    peer: Peer<RoleServer>,
    mut arrivals: broadcast::Receiver<Message>,
    allowed: impl Fn() -> bool + Send + 'static,
) {
    loop {
        let message = match arrivals.recv().await {
            Ok(m) => m,
            Err(RecvError::Lagged(n)) => {
                debug!(
                    missed = n,
                    "channel pusher lagged; those messages stay unread"
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if !allowed() {
            debug!("leo_messages is denied; message not pushed");
            continue;
        }
        debug!(from = %message.from, "pushing a message to the harness's channel");
        let sent = peer
            .send_notification(ServerNotification::CustomNotification(notification(
                &message,
            )))
            .await;
        if sent.is_err() {
            debug!("the client is gone; channel pusher stops");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_carry_the_stamped_text_and_the_sender() {
        let n = notification(&Message {
            text: "[message from scout#s1] hi".into(),
            from: "scout#s1".into(),
            at: "2026-05-01T12:00:00.000Z".into(),
        });
        assert_eq!(n.method, METHOD);
        assert_eq!(
            n.params,
            Some(json!({
                "content": "[message from scout#s1] hi",
                "meta": {"from": "scout#s1", "at": "2026-05-01T12:00:00.000Z"}
            }))
        );
        let n = notification(&Message {
            text: "[message from s] \u{1b}]0;title\u{7}\u{8}\u{0}\u{9b}2J".into(),
            from: "s".into(),
            at: "t".into(),
        });
        assert_eq!(
            n.params.as_ref().map(|p| p["content"].clone()),
            Some(json!(
                "[message from s] \u{fffd}]0;title\u{fffd}\u{fffd}\u{fffd}\u{fffd}2J"
            ))
        );
        let caps = declare(None);
        assert_eq!(caps.get(CAPABILITY), Some(&JsonObject::new()));
    }
}
