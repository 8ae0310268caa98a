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

/// The IPC over the broker's TCP listener: `GET UPGRADE_PATH` with `Upgrade: UPGRADE_PROTOCOL`
/// (and `Connection: Upgrade`), authenticated by an agent token in `Authorization: Bearer`
/// before the upgrade; after `101 Switching Protocols` the connection carries the same JSON
/// lines as `run/sidecar.sock`, starting with `hello`.
pub const UPGRADE_PATH: &str = "/api/v1/ipc";
/// The protocol token of the IPC upgrade (`Upgrade: leo-ipc`).
pub const UPGRADE_PROTOCOL: &str = "leo-ipc";
/// The request header that names the agent a shared agent token speaks for (`Leo-Agent: NAME`);
/// an agent's own token names its agent already.
pub const AGENT_HEADER: &str = "leo-agent";

/// The longest session id a `hello` may give.
pub const MAX_SESSION_ID: usize = 128;

/// Checks a `hello`'s session id: 1 to [`MAX_SESSION_ID`] bytes of text the broker can store
/// (`names::storable`: no U+0000). The message says why, after `at $.session: `.
pub fn check_session_id(session: &str) -> Result<(), String> {
    if session.is_empty() || session.len() > MAX_SESSION_ID {
        return Err(format!("must be 1 to {MAX_SESSION_ID} bytes"));
    }
    crate::names::storable(session).map_err(|e| e.to_string())
}

/// What the harness said about itself in `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Harness {
    pub name: String,
    #[serde(default)]
    pub version: String,
}

/// How the harness reaches the session's MCP server: `leo-mcp` on its stdio, or the broker's
/// `/mcp` route (MCP over Streamable HTTP). Shown in the status snapshot; a hello without it
/// is `stdio`, so older sidecars need no change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    #[default]
    Stdio,
    /// `/mcp` on the broker's TCP listener.
    Http,
}

impl Transport {
    /// True for the default, which a hello leaves out.
    pub fn is_stdio(&self) -> bool {
        *self == Transport::Stdio
    }
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
        /// How the harness reaches this session (absent: `stdio`).
        #[serde(default, skip_serializing_if = "Transport::is_stdio")]
        transport: Transport,
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
    /// Answers the broker's `sample` frame `sample`: the harness's completion, or why none
    /// can come.
    SampleAnswer {
        sample: u64,
        outcome: crate::sampling::SampleOutcome,
    },
    /// Asks for the prompts, resources and templates this agent is offered now; answered by
    /// `offers` with the same `id`.
    ListOffers { id: u64 },
    /// A read (`crate::offers`): MCP's params of `kind`'s method, answered by `offer_result`
    /// with the same `id`.
    Offer {
        id: u64,
        kind: crate::offers::OfferKind,
        params: Value,
    },
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

/// How a call ended. `C` is how the content blocks are held: as the app sent them
/// ([`RawOutcome`], what the broker keeps, stores and writes), in the reader's own block type
/// (rmcp's, in the sidecar), or as JSON values (the default, for tools and tests).
///
/// Written untagged: `{"content": […], "structured_content": …}` or `{"error": …}`. Read in one
/// pass through `OutcomeFields` (exactly one of `content` and `error`), not as an untagged
/// enum, which would first buffer the whole outcome, a large image included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "OutcomeFields<C>")]
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

impl<C> Outcome<C> {
    /// The outcome of a call that failed with `code` (an error code, or the app's own).
    pub fn failed(code: impl Into<String>, message: impl Into<String>) -> Outcome<C> {
        Outcome::Error {
            error: AppError {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}

/// An outcome's members as read: one struct, so no buffering.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutcomeFields<C> {
    #[serde(default = "none")]
    content: Option<C>,
    #[serde(default)]
    structured_content: Option<Value>,
    #[serde(default)]
    error: Option<AppError>,
}

fn none<C>() -> Option<C> {
    None
}

impl<C> TryFrom<OutcomeFields<C>> for Outcome<C> {
    type Error = &'static str;

    fn try_from(f: OutcomeFields<C>) -> Result<Outcome<C>, &'static str> {
        match (f.content, f.error) {
            (Some(content), None) => Ok(Outcome::Content {
                content,
                structured_content: f.structured_content,
            }),
            (None, Some(error)) if f.structured_content.is_none() => Ok(Outcome::Error { error }),
            _ => Err("an outcome has either content (and structured_content) or error"),
        }
    }
}

/// `{"type":"result","id":…,"outcome":…}`: call `id` ended. The one type of a result frame,
/// written by the broker (`ResultFrame<Vec<Box<RawValue>>>`, the blocks embedded as the app
/// sent them) and read by every reader through [`BrokerLine`], its blocks straight into `C`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "result", from = "ResultFields<C>")]
pub struct ResultFrame<C = Vec<Value>> {
    pub id: u64,
    pub outcome: Outcome<C>,
}

/// A result frame's members as read (serde writes a struct's `tag` but does not read it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultFields<C> {
    #[serde(rename = "type")]
    _kind: ResultTag,
    id: u64,
    outcome: Outcome<C>,
}

#[derive(Deserialize)]
enum ResultTag {
    #[serde(rename = "result")]
    Result,
}

impl<C> From<ResultFields<C>> for ResultFrame<C> {
    fn from(f: ResultFields<C>) -> ResultFrame<C> {
        ResultFrame {
            id: f.id,
            outcome: f.outcome,
        }
    }
}

/// What starts every result frame the broker writes (`type` first), so a reader picks the
/// result path without parsing first.
pub const RESULT_FRAME_PREFIX: &[u8] = br#"{"type":"result","#;

/// One line from the broker, decoded once: a result frame, read as a plain struct with its
/// blocks straight into `C`, or any other frame.
///
/// **Why results are not a `BrokerFrame` variant:** serde reads an internally tagged enum by
/// first buffering the whole frame, so a large image would be copied into that buffer and
/// then again into its blocks. A result frame is recognised by its `type` and read in one
/// pass; every other frame is small and goes through the enum.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerLine<C = Vec<Value>> {
    Result(ResultFrame<C>),
    Frame(BrokerFrame),
}

impl<C: serde::de::DeserializeOwned> BrokerLine<C> {
    /// Decodes one line, naming the JSON path at fault.
    pub fn parse(line: &[u8]) -> Result<BrokerLine<C>, crate::envelope::BodyError> {
        if !is_result(line) {
            return crate::envelope::parse_json(line).map(BrokerLine::Frame);
        }
        // The hot path reads without tracking the path; only a frame that fails is read again,
        // to say where.
        match serde_json::from_slice(line) {
            Ok(frame) => Ok(BrokerLine::Result(frame)),
            Err(_) => crate::envelope::parse_json(line).map(BrokerLine::Result),
        }
    }
}

/// Whether `line` is a result frame: the broker writes `type` first, so the prefix decides;
/// a line in another member order (hand-written) has its `type` read, the rest skipped.
fn is_result(line: &[u8]) -> bool {
    if line.starts_with(RESULT_FRAME_PREFIX) {
        return true;
    }
    if line.starts_with(br#"{"type":""#) {
        return false;
    }
    #[derive(Deserialize)]
    struct Tag {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    matches!(serde_json::from_slice::<Tag>(line), Ok(Tag { kind: Some(k) }) if k == "result")
}

/// Frames the broker sends, but for results ([`ResultFrame`]; a reader takes both through
/// [`BrokerLine`]).
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
        /// The operator's mode for this agent (`agents.NAME.mode`); absent: `auto`, the
        /// harness table decides.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<Mode>,
    },
    /// The tool set changed; coalesced to at most one a second per session.
    Tools {
        revision: u64,
        tools: Vec<AgentTool>,
        ever_registered: bool,
    },
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
    /// The app logs a message during call `id` (`notifications/message` for the harness).
    Log {
        id: u64,
        level: crate::logging::LogLevel,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        logger: Option<String>,
        data: Value,
    },
    /// The app asks the harness's model for a completion during call `id`
    /// (`sampling/createMessage`); answered by the sidecar's `sample_answer` frame with the
    /// same `sample`.
    Sample { id: u64, sample: u64, params: Value },
    /// Answers `list_offers` `id`.
    Offers {
        id: u64,
        prompts: Vec<crate::offers::PromptDef>,
        resources: Vec<crate::offers::ResourceDef>,
        resource_templates: Vec<crate::offers::ResourceTemplateDef>,
    },
    /// Answers `offer` `id`: MCP's result object as the app sent it, or an error.
    OfferResult {
        id: u64,
        outcome: crate::offers::OfferOutcome,
    },
    /// Some app's prompts, resources or templates changed: list them again.
    OffersChanged,
    /// The app says the resource at `uri` changed (for `resources/subscribe`).
    ResourceUpdated { uri: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_result_frame_reads_in_one_pass_as_values() {
        let blocks = r#"[{"type":"text","text":"a \"quoted\"\nline"}, {"type":"image","data":"AAAA","mimeType":"image/png","annotations":{"priority":1}}]"#;
        let raw: Vec<Box<RawValue>> = serde_json::from_str(blocks).unwrap();
        let written = ResultFrame {
            id: 7,
            outcome: RawOutcome::Content {
                content: raw,
                structured_content: None,
            },
        };
        let line = serde_json::to_string(&written).unwrap();
        assert!(line.as_bytes().starts_with(RESULT_FRAME_PREFIX), "{line}");
        let expected = ResultFrame {
            id: 7,
            outcome: Outcome::Content {
                content: serde_json::from_str::<Vec<Value>>(blocks).unwrap(),
                structured_content: None,
            },
        };
        // The same frame; only the key order inside blocks is the app's, not sorted.
        assert_eq!(
            BrokerLine::<Vec<Value>>::parse(line.as_bytes()).unwrap(),
            BrokerLine::Result(expected.clone())
        );
        // The raw reader reads back what was written, byte for byte.
        let BrokerLine::Result(again) =
            BrokerLine::<Vec<Box<RawValue>>>::parse(line.as_bytes()).unwrap()
        else {
            panic!("not a result");
        };
        assert_eq!(serde_json::to_string(&again).unwrap(), line);

        let failed = ResultFrame {
            id: 8,
            outcome: RawOutcome::failed("timeout", "no result within 1 s"),
        };
        let line = serde_json::to_vec(&failed).unwrap();
        assert_eq!(
            BrokerLine::<Vec<Value>>::parse(&line).unwrap(),
            BrokerLine::Result(ResultFrame {
                id: 8,
                outcome: Outcome::failed("timeout", "no result within 1 s"),
            })
        );
    }

    #[test]
    fn a_result_frame_is_read_in_any_member_order_and_only_whole() {
        // Sorted, as a pretty-printed fixture has it.
        let sorted = br#"{"id":1,"outcome":{"error":{"code":"x","message":"y"}},"type":"result"}"#;
        assert_eq!(
            BrokerLine::<Vec<Value>>::parse(sorted).unwrap(),
            BrokerLine::Result(ResultFrame {
                id: 1,
                outcome: Outcome::failed("x", "y"),
            })
        );
        // Other frames go through the enum.
        let error = br#"{"type":"error","code":"x","message":"y"}"#;
        assert!(matches!(
            BrokerLine::<Vec<Value>>::parse(error).unwrap(),
            BrokerLine::Frame(BrokerFrame::Error { .. })
        ));
        // Both fields, or neither, is not an outcome; nor is an unknown member.
        for bad in [
            r#"{"type":"result","id":1,"outcome":{"content":[],"error":{"code":"x","message":"y"}}}"#,
            r#"{"type":"result","id":1,"outcome":{}}"#,
            r#"{"type":"result","id":1,"outcome":{"content":[],"later":1}}"#,
            r#"{"type":"result","id":1,"outcome":{"content":[]},"later":1}"#,
        ] {
            let e = BrokerLine::<Vec<Value>>::parse(bad.as_bytes()).unwrap_err();
            assert!(e.message.starts_with("at $"), "{bad}: {}", e.message);
        }
    }
}
