//! `leo_messages`: Leo's own tool that returns the messages API clients sent to this agent.
//!
//! An API client (`leo client add NAME --can-message AGENT`) posts to
//! `POST /web/agent/<agent>/message`; the broker stamps the text `[message from <from>] <text>`
//! with the sender it authenticated and queues it in the agent's mailbox (in memory, bounded).
//! This tool is the pull path every harness has: it sends `fetch_messages`, and the broker's
//! `messages` answer returns *and acknowledges* every unread message, oldest first. It is listed
//! in native and fallback mode alike (it is not an app tool, so it does not wait for an app to
//! register), unless `deny_tools` names it. The push path for harnesses that can show one is
//! `channel`.
//!
//! Acknowledged means gone from the broker, so the sidecar is careful not to drop what it was
//! given: an answer that arrives for a call the harness cancelled, or after the wait below gave
//! up, is kept here and returned first by the next `leo_messages` call. Only a connection that
//! breaks between the broker's acknowledgement and the frame's arrival can still lose a batch.

use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ipc::Message;
use leo_protocol::sanitize::{Lines, sanitize};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::link::BrokerLink;
use crate::outcome;

/// The tool's name (one of the broker's built-in names, so `deny_tools` may list it).
pub const MESSAGES: &str = "leo_messages";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "Return and acknowledge unread messages sent to this agent by API \
clients (scripts, containers or services the operator allowed to message it). Each message is \
returned once, oldest first, with the time the broker received it, and starts with \
[message from <sender>]: Leo adds that stamp with the sender it authenticated, so the text after \
it is that sender's words, not the user's. Call again later to check for new messages.";

/// The broker answers `fetch_messages` at once; this only bounds a broker that misbehaves.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Most acknowledged-but-unshown messages kept for the next call (the broker's mailbox size).
pub const MAX_UNSHOWN: usize = 256;

/// The broker's answer to one `fetch_messages`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Unread messages, oldest first; the broker has acknowledged them.
    pub messages: Vec<Message>,
    /// Messages dropped from this agent's full mailbox since the broker started.
    pub dropped: u64,
}

/// What a waiting `leo_messages` call gets: the answer, or the code and message of why there
/// is none.
pub type Fetch = Result<Fetched, (String, String)>;

/// The MCP tool.
pub fn tool() -> Tool {
    let schema = match json!({"type": "object", "properties": {}}) {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(MESSAGES, DESCRIPTION, Arc::new(schema))
}

/// Runs one `leo_messages` call. Arguments are ignored (the schema has none), as for
/// `leo_app_tools`.
pub async fn fetch(link: &BrokerLink, ctx: &RequestContext<RoleServer>) -> CallToolResult {
    let (id, rx) = match link.start_fetch() {
        Ok(started) => started,
        Err(reason) => return outcome::tool_error("no_client", &reason),
    };
    let answer = tokio::select! {
        biased;
        answer = rx => answer,
        () = ctx.ct.cancelled() => {
            // A late answer is kept for the next call (see `BrokerLink::apply`).
            link.forget_fetch(id);
            return outcome::tool_error("cancelled", "the harness cancelled the call");
        }
        () = tokio::time::sleep(FETCH_TIMEOUT) => {
            link.forget_fetch(id);
            return outcome::tool_error(
                "timeout",
                &format!("the broker did not answer within {} s", FETCH_TIMEOUT.as_secs()),
            );
        }
    };
    let fetched = match answer {
        Ok(Ok(fetched)) => fetched,
        Ok(Err((code, reason))) => return outcome::tool_error(&code, &reason),
        // The sender is only dropped by `fail_all`, which sends first; be safe anyway.
        Err(_) => return outcome::tool_error("no_client", crate::link::CONNECTION_LOST),
    };
    let mut messages = link.take_unshown();
    messages.extend(fetched.messages);
    if ctx.ct.is_cancelled() {
        // rmcp drops the answer to a cancelled request: keep the messages for the next call.
        link.keep_unshown(messages);
        return outcome::tool_error("cancelled", "the harness cancelled the call");
    }
    outcome::text(render(&Fetched {
        messages,
        dropped: fetched.dropped,
    }))
}

/// The text the model reads: one message per line, oldest first, each with its time.
pub fn render(fetched: &Fetched) -> String {
    let mut out = match fetched.messages.len() {
        0 => "no unread messages".to_owned(),
        1 => "1 unread message (now acknowledged):".to_owned(),
        n => format!("{n} unread messages, oldest first (now acknowledged):"),
    };
    for m in &fetched.messages {
        out.push_str(&format!("\n- {} {}", one_line(&m.at), one_line(&m.text)));
    }
    if fetched.dropped > 0 {
        let (noun, verb) = if fetched.dropped == 1 {
            ("message", "was")
        } else {
            ("messages", "were")
        };
        out.push_str(&format!(
            "\n({} older {noun} to this agent {verb} dropped unread since the broker started, \
             because its mailbox was full.)",
            fetched.dropped
        ));
    }
    out
}

/// The broker already sanitized and collapsed the text; do it again with the same sanitizer,
/// so one message is always one line and no control character reaches the model.
pub fn one_line(text: &str) -> String {
    sanitize(text, Lines::Join)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str, at: &str) -> Message {
        Message {
            text: text.into(),
            from: "scout".into(),
            at: at.into(),
        }
    }

    #[test]
    fn renders_each_message_with_its_time_oldest_first() {
        let none = Fetched {
            messages: vec![],
            dropped: 0,
        };
        assert_eq!(render(&none), "no unread messages");

        let two = Fetched {
            messages: vec![
                msg("[message from scout] one", "2026-05-01T12:00:00.000Z"),
                msg("[message from scout] two", "2026-05-01T12:00:01.000Z"),
            ],
            dropped: 0,
        };
        assert_eq!(
            render(&two),
            "2 unread messages, oldest first (now acknowledged):\n\
             - 2026-05-01T12:00:00.000Z [message from scout] one\n\
             - 2026-05-01T12:00:01.000Z [message from scout] two"
        );
    }

    #[test]
    fn mentions_drops_and_keeps_one_message_on_one_line() {
        let f = Fetched {
            messages: vec![msg("[message from scout] a\nb\r\n\tc", "t")],
            dropped: 3,
        };
        let text = render(&f);
        assert!(
            text.starts_with(
                "1 unread message (now acknowledged):\n- t [message from scout] a b c\n"
            ),
            "{text}"
        );
        assert!(text.contains("3 older messages"), "{text}");
        let empty = Fetched {
            messages: vec![],
            dropped: 1,
        };
        assert!(render(&empty).starts_with("no unread messages\n(1 older message "));
    }

    #[test]
    fn control_characters_never_reach_the_model() {
        let f = Fetched {
            messages: vec![msg(
                "[message from s] \u{1b}[2Jx\u{8}\u{0}\u{9b}y",
                "t\u{7}",
            )],
            dropped: 0,
        };
        assert_eq!(
            render(&f),
            "1 unread message (now acknowledged):\n- t\u{fffd} [message from s] \
             \u{fffd}[2Jx\u{fffd}\u{fffd}\u{fffd}y"
        );
    }

    #[test]
    fn the_tool_takes_an_empty_object() {
        let t = tool();
        assert_eq!(t.name, MESSAGES);
        assert_eq!(
            Value::Object((*t.input_schema).clone()),
            json!({"type": "object", "properties": {}})
        );
        assert!(
            t.description
                .as_deref()
                .is_some_and(|d| d.starts_with("Return and acknowledge unread messages"))
        );
    }
}
