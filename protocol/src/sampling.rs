//! An app's request for a completion by the agent's own model, during a call.
//!
//! It travels to the harness that made the call as MCP `sampling/createMessage`, on that
//! call's stream, and the harness's answer (MCP's `CreateMessageResult`: `role`, `content`,
//! `model`, `stopReason`) comes back to the app as it was. The harness decides whether and how
//! to ask its model (most show the request to their user first). Only a harness that declared
//! the `sampling` capability in `initialize` is asked; for any other the app hears
//! `input_unsupported` at once, as for a question.
//!
//! `params` are MCP's `sampling/createMessage` params as they are (`messages`, `maxTokens`,
//! `systemPrompt`, `modelPreferences`, …): the broker checks what every request needs, and
//! `leo-mcp` reads the whole with the MCP SDK's own type, naming the path at fault. The words
//! a person reads when approving (the system prompt, text blocks) go through the one sanitizer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::AppError;
use crate::names::ClientId;
use crate::sanitize::{Lines, sanitize};

/// The most a sampling request's `params` may take, as JSON text (images included).
pub const MAX_SAMPLE_BYTES: usize = 256 * 1024;

/// `POST /api/v1/client-tools/requests/{id}/sample`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleBody {
    pub client_id: ClientId,
    /// MCP's `sampling/createMessage` params.
    pub params: Value,
}

impl SampleBody {
    /// Checks the size and what every request needs: an object with a non-empty `messages`
    /// list and a positive integer `maxTokens`.
    pub fn check(&self) -> Result<(), String> {
        let size = serde_json::to_vec(&self.params)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_SAMPLE_BYTES {
            return Err(format!(
                "at $.params: {size} bytes, at most {MAX_SAMPLE_BYTES}"
            ));
        }
        let Some(params) = self.params.as_object() else {
            return Err("at $.params: expected an object".into());
        };
        match params.get("messages").and_then(Value::as_array) {
            Some(m) if !m.is_empty() => {}
            _ => return Err("at $.params.messages: expected a non-empty array".into()),
        }
        match params.get("maxTokens").and_then(Value::as_u64) {
            Some(n) if n > 0 => Ok(()),
            _ => Err("at $.params.maxTokens: expected a positive integer".into()),
        }
    }
}

/// `params` with the words a person reads sanitized: `systemPrompt` and the `text` of each
/// message's text blocks (a message's `content` is one block or a list of them).
pub fn sanitized_params(mut params: Value) -> Value {
    if let Some(Value::String(s)) = params.get_mut("systemPrompt") {
        *s = sanitize(s, Lines::Keep).into_owned();
    }
    let messages = params.get_mut("messages").and_then(Value::as_array_mut);
    for message in messages.into_iter().flatten() {
        match message.get_mut("content") {
            Some(Value::Array(blocks)) => blocks.iter_mut().for_each(clean_text_block),
            Some(block) => clean_text_block(block),
            None => {}
        }
    }
    params
}

fn clean_text_block(block: &mut Value) {
    if block.get("type").and_then(Value::as_str) != Some("text") {
        return;
    }
    if let Some(Value::String(s)) = block.get_mut("text") {
        *s = sanitize(s, Lines::Keep).into_owned();
    }
}

/// How a sampling request ended on the sidecar: the harness's `CreateMessageResult`, or a
/// refusal with a documented code (`input_unsupported` when the harness cannot sample,
/// `invalid_parameter` for params the MCP SDK could not read, `cancelled`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SampleOutcome {
    Answer { result: Value },
    Refused { error: AppError },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sampling_request_needs_messages_and_max_tokens() {
        let body = |params: Value| SampleBody {
            client_id: "c".into(),
            params,
        };
        let ok = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                        "maxTokens": 100});
        assert_eq!(body(ok).check(), Ok(()));
        let cases = [
            (json!([]), "at $.params: expected an object"),
            (
                json!({"maxTokens": 5}),
                "at $.params.messages: expected a non-empty array",
            ),
            (
                json!({"messages": [{}], "maxTokens": 0}),
                "at $.params.maxTokens: expected a positive integer",
            ),
        ];
        for (params, want) in cases {
            assert_eq!(body(params).check(), Err(want.to_owned()));
        }
    }

    #[test]
    fn the_words_a_person_reads_are_sanitized_and_the_rest_kept() {
        let params = json!({"systemPrompt": "be\u{1b}[2J brief", "maxTokens": 9, "messages": [
            {"role": "user", "content": {"type": "text", "text": "a\u{7}b"}},
            {"role": "user", "content": [{"type": "image", "data": "AA\u{7}", "mimeType": "image/png"},
                                         {"type": "text", "text": "c\u{9b}d"}]}
        ]});
        assert_eq!(
            sanitized_params(params),
            json!({"systemPrompt": "be\u{fffd}[2J brief", "maxTokens": 9, "messages": [
                {"role": "user", "content": {"type": "text", "text": "a\u{fffd}b"}},
                {"role": "user", "content": [{"type": "image", "data": "AA\u{7}", "mimeType": "image/png"},
                                             {"type": "text", "text": "c\u{fffd}d"}]}
            ]})
        );
    }

    #[test]
    fn outcomes_read_by_their_key() {
        let answer: SampleOutcome =
            serde_json::from_value(json!({"result": {"role": "assistant"}})).unwrap();
        assert!(matches!(answer, SampleOutcome::Answer { .. }));
        let refused: SampleOutcome = serde_json::from_value(
            json!({"error": {"code": "input_unsupported", "message": "no"}}),
        )
        .unwrap();
        assert!(matches!(refused, SampleOutcome::Refused { .. }));
    }
}
