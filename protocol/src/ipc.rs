//! The sidecar IPC: JSON frames, one per line, over `$LEO_HOME/run/sidecar.sock`.
//!
//! One line per frame keeps the protocol readable with `socat` and needs no length prefix; a
//! frame is at most `MAX_FRAME_BYTES`, and a longer line is a protocol error. Every frame names
//! its `type`; unknown types and unknown fields are rejected, so both sides fail loudly when
//! their versions drift. The first frame from the sidecar is `hello` with `v`; the broker
//! answers `welcome` (same `v`) or `error` and closes.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::content::AppError;
pub use crate::input::{InputAnswer, InputOutcome};
use crate::tool::{Execution, ToolAnnotations};

/// What the harness said about itself in `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Harness {
    pub name: String,
    #[serde(default)]
    pub version: String,
}

/// How the sidecar shows client tools to its harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Native,
    Fallback,
}

/// Frames the sidecar sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SidecarFrame {
    /// Opens the session.
    Hello {
        v: u32,
        agent: String,
        session: String,
        token: String,
        #[serde(default)]
        harness: Option<Harness>,
        mode: Mode,
        /// On a reconnect: the ids of this session's calls still waiting for a result, so the
        /// broker re-attaches them (after a broker restart too) instead of ending them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        resume: Vec<u64>,
    },
    /// Tells the broker which harness and mode, once `initialize` has been seen.
    Harness { harness: Harness, mode: Mode },
    /// Calls a client tool. `id` is the sidecar's own, unique within the session.
    Call {
        id: u64,
        tool: String,
        arguments: Value,
        /// The W3C trace context of the sidecar's span for this call, when it exports traces;
        /// the broker's span for the call is its child. Optional: frames without it are
        /// accepted, and one that is not a valid trace context starts a new trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// The harness cancelled call `id`.
    Cancel { id: u64 },
    /// `leo_messages` was called: return and acknowledge this agent's unread messages.
    FetchMessages { id: u64 },
    /// Answers the broker's `input` frame `input`: the user's answer, or why none can come.
    InputAnswer { input: u64, outcome: InputOutcome },
}

/// A message to an agent, stamped by the broker (`[message from <from>] <text>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// The stamped text, the only part an agent should show the model.
    pub text: String,
    /// The authenticated sender, `name` or `name#session`.
    pub from: String,
    /// When the broker received it (RFC 3339).
    pub at: String,
}

/// A tool as an agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default)]
    pub title: Option<String>,
    pub group: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Whether the harness may run this tool's calls as tasks (where it supports them).
    #[serde(default, skip_serializing_if = "is_sync")]
    pub execution: Execution,
}

fn is_sync(e: &Execution) -> bool {
    *e == Execution::Sync
}

/// How a call ended, as the sidecar forwards it to the harness. `C` is how the content blocks
/// are held: parsed (`Vec<Value>`, what the sidecar reads) or as the app sent them
/// ([`RawOutcome`], what the broker writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Outcome<C = Vec<Value>> {
    /// The app's content, verbatim, and its structured content (a JSON object) if it sent one.
    Content {
        content: C,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured_content: Option<Value>,
    },
    /// A failure; the harness sees `"<code>: <message>"` as a tool error.
    Error { error: AppError },
}

/// An outcome whose content blocks are the JSON text the app posted, so the broker forwards a
/// large result without parsing it into a tree and serializing it again.
pub type RawOutcome = Outcome<Vec<Box<RawValue>>>;

/// `BrokerFrame::Result` as the broker writes it: the same JSON, with the blocks embedded as
/// the app sent them.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename = "result")]
pub struct ResultFrame<'a> {
    pub id: u64,
    pub outcome: &'a RawOutcome,
}

/// What starts every result frame the broker writes (`ResultFrame`, and `BrokerFrame::Result`
/// serialized), so a reader can pick the one-pass path below without parsing first.
pub const RESULT_FRAME_PREFIX: &[u8] = br#"{"type":"result","#;

/// `BrokerFrame::Result` read as a plain struct, with the content blocks read straight into
/// `C`. Through the enum, serde first buffers the whole frame (an internally tagged enum) and
/// then the outcome (an untagged one), copying a large image twice before the reader sees it;
/// this reads it in one pass. It reads every result frame the broker writes; anything it
/// refuses, a reader parses as `BrokerFrame` instead.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultFrameIn<C> {
    #[serde(rename = "type")]
    pub kind: ResultTag,
    pub id: u64,
    pub outcome: OutcomeIn<C>,
}

/// The `type` of a result frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ResultTag {
    #[serde(rename = "result")]
    Result,
}

/// An outcome's two shapes as one struct; exactly one field is present.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeIn<C> {
    #[serde(default = "none")]
    pub content: Option<C>,
    #[serde(default)]
    pub structured_content: Option<Value>,
    #[serde(default)]
    pub error: Option<AppError>,
}

fn none<C>() -> Option<C> {
    None
}

impl<C> OutcomeIn<C> {
    /// The outcome, or `None` when both or neither field is present.
    pub fn into_outcome(self) -> Option<Outcome<C>> {
        match (self.content, self.error) {
            (Some(content), None) => Some(Outcome::Content {
                content,
                structured_content: self.structured_content,
            }),
            (None, Some(error)) if self.structured_content.is_none() => {
                Some(Outcome::Error { error })
            }
            _ => None,
        }
    }
}

/// Frames the broker sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum BrokerFrame {
    /// Accepts the session with the tools this agent may see now.
    Welcome {
        v: u32,
        session: String,
        revision: u64,
        tools: Vec<AgentTool>,
        /// True when some app has ever registered a tool (`state/client-tools.json`).
        ever_registered: bool,
        /// Tools denied to this agent, including fallback tools (`deny_tools`).
        denied: Vec<String>,
        /// The broker's `telemetry.otlp_endpoint`, so the sidecar exports its spans to the
        /// same collector (its own `OTEL_EXPORTER_OTLP_*` variables win).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        otlp_endpoint: Option<String>,
    },
    /// The tool set changed; coalesced to at most one a second per session.
    Tools {
        revision: u64,
        tools: Vec<AgentTool>,
        ever_registered: bool,
    },
    /// Call `id` ended.
    Result { id: u64, outcome: Outcome },
    /// Answers `fetch_messages` `id`: unread messages, oldest first, now acknowledged.
    Messages {
        id: u64,
        messages: Vec<Message>,
        /// Messages dropped from this agent's full mailbox since the broker started.
        dropped: u64,
    },
    /// A message arrived for this agent (a push, for harnesses with a push channel); it stays
    /// unread until fetched.
    MessageArrived { message: Message },
    /// The session is refused or broken, and the broker closes after it; or, with `id`, the
    /// `fetch_messages` of that id is refused (`denied`) and the session goes on.
    Error {
        code: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
    },
    /// The app reported progress on call `id` (the sidecar's id).
    Progress {
        id: u64,
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The app asks the user, through the harness, during call `id`; answered by the sidecar's
    /// `input_answer` frame with the same `input`.
    Input {
        id: u64,
        input: u64,
        message: String,
        requested_schema: Value,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::content::AppError;

    #[test]
    fn a_raw_result_frame_reads_as_the_parsed_one() {
        let blocks = r#"[{"type":"text","text":"a \"quoted\"\nline"}, {"type":"image","data":"AAAA","mimeType":"image/png","annotations":{"priority":1}}]"#;
        let raw: Vec<Box<RawValue>> = serde_json::from_str(blocks).unwrap();
        let outcome = RawOutcome::Content {
            content: raw,
            structured_content: None,
        };
        let line = serde_json::to_string(&ResultFrame {
            id: 7,
            outcome: &outcome,
        })
        .unwrap();
        let parsed: BrokerFrame = crate::envelope::parse_json(line.as_bytes()).unwrap();
        let expected = BrokerFrame::Result {
            id: 7,
            outcome: Outcome::Content {
                content: serde_json::from_str(blocks).unwrap(),
                structured_content: None,
            },
        };
        // The same frame; only the key order inside blocks is the app's, not sorted.
        assert_eq!(parsed, expected);
        // And the one-pass reader sees the same.
        assert!(line.as_bytes().starts_with(RESULT_FRAME_PREFIX));
        let fast: ResultFrameIn<Vec<Value>> = serde_json::from_str(&line).unwrap();
        assert_eq!(fast.id, 7);
        assert_eq!(
            BrokerFrame::Result {
                id: fast.id,
                outcome: fast.outcome.into_outcome().unwrap()
            },
            expected
        );

        let failed = RawOutcome::Error {
            error: AppError {
                code: "timeout".into(),
                message: "no result within 1 s".into(),
            },
        };
        let line = serde_json::to_string(&ResultFrame {
            id: 8,
            outcome: &failed,
        })
        .unwrap();
        assert!(matches!(
            crate::envelope::parse_json::<BrokerFrame>(line.as_bytes()).unwrap(),
            BrokerFrame::Result {
                id: 8,
                outcome: Outcome::Error { .. }
            }
        ));
        let fast: ResultFrameIn<Vec<Value>> = serde_json::from_str(&line).unwrap();
        assert!(matches!(
            fast.outcome.into_outcome(),
            Some(Outcome::Error { .. })
        ));
        // The enum's own serialization starts the same way.
        let enum_line = serde_json::to_vec(&BrokerFrame::Result {
            id: 1,
            outcome: Outcome::Content {
                content: vec![],
                structured_content: None,
            },
        })
        .unwrap();
        assert!(enum_line.starts_with(RESULT_FRAME_PREFIX));
        // Both fields, or neither, is not an outcome.
        let both = r#"{"type":"result","id":1,"outcome":{"content":[],"error":{"code":"x","message":"y"}}}"#;
        let fast: ResultFrameIn<Vec<Value>> = serde_json::from_str(both).unwrap();
        assert!(fast.outcome.into_outcome().is_none());
    }
}
