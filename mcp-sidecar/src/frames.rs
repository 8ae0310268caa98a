//! JSON lines on the IPC socket: one frame per line, at most `MAX_FRAME_BYTES`.
//!
//! The frame types live in `leo_protocol::ipc` and the line codec in `leo_protocol::lines`
//! (the broker's own), so the length rule is the broker's and a runaway line is an error
//! rather than an unbounded allocation; this file decodes what the codec cuts.
//!
//! Once a connection is welcomed, no single line can end it: a line this sidecar cannot read
//! (too long, too deep for serde_json, a shape it does not know) is `Incoming::Unreadable`,
//! naming the call or fetch it answers when its head can still be read, so that one call fails
//! with a clear error and every other call of the session goes on.

use futures_util::{SinkExt, StreamExt};
use leo_protocol::ipc::{BrokerFrame, BrokerLine, RESULT_FRAME_PREFIX, SidecarFrame};
use leo_protocol::limits::MAX_FRAME_BYTES;
use leo_protocol::lines::{Line, LineCodec, encode_frame};
use rmcp::model::ContentBlock;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::error::{Result, SidecarError};
use crate::outcome::{Ending, ending};

/// A frame as the connection loop takes it: a call's result with its content already in rmcp's
/// blocks, or any other frame.
#[derive(Debug)]
pub enum Incoming {
    Result {
        id: u64,
        ending: Ending,
    },
    Frame(BrokerFrame),
    /// A line that is not a frame this sidecar can read, and why.
    Unreadable {
        answers: Option<Answers>,
        message: String,
    },
}

/// What an unreadable frame was the answer to, read from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// A `result` frame: call `id`.
    Call(u64),
    /// A `messages` frame: fetch `id`.
    Fetch(u64),
}

/// Any byte stream that carries the IPC: the unix socket, an upgraded HTTP connection (plain
/// or TLS), or an in-process pipe. Boxed once, so the connection loop is one type whatever
/// carries it.
pub trait Stream: AsyncRead + AsyncWrite + Send + 'static {}
impl<S: AsyncRead + AsyncWrite + Send + 'static> Stream for S {}

type BoxStream = std::pin::Pin<Box<dyn Stream>>;

/// The broker's frames, read with the one IPC codec.
pub type Reader = FramedRead<ReadHalf<BoxStream>, LineCodec>;
/// This sidecar's frames, written with the one IPC codec.
pub type Writer = FramedWrite<WriteHalf<BoxStream>, LineCodec>;

/// The two halves of a connection to the broker. Results can be large (an image is hundreds
/// of KiB): the stream is read in large chunks.
pub fn split(stream: impl Stream) -> (Reader, Writer) {
    let boxed: BoxStream = Box::pin(stream);
    let (r, w) = tokio::io::split(boxed);
    (
        FramedRead::with_capacity(r, LineCodec::default().whole_lines_only(), 64 * 1024),
        FramedWrite::new(w, LineCodec::default()),
    )
}

fn too_long() -> SidecarError {
    SidecarError::BadFrame {
        message: Line::too_long_message(MAX_FRAME_BYTES),
    }
}

fn read_error(source: std::io::Error) -> SidecarError {
    SidecarError::Ipc {
        context: "read",
        source,
    }
}

/// Reads the next frame. `Ok(None)` at end of stream; a line over the limit is an error.
pub async fn read_frame(reader: &mut Reader) -> Result<Option<BrokerFrame>> {
    match reader.next().await.transpose().map_err(read_error)? {
        None => Ok(None),
        Some(Line::TooLong { .. }) => Err(too_long()),
        Some(Line::Frame(line)) => parse_broker_frame(&line).map(Some),
    }
}

/// Reads the next frame of a welcomed connection. `Ok(None)` at end of stream; only the socket
/// failing is an error.
pub async fn read_incoming(reader: &mut Reader) -> Result<Option<Incoming>> {
    match reader.next().await.transpose().map_err(read_error)? {
        None => Ok(None),
        Some(Line::Frame(line)) => Ok(Some(decode(&line))),
        Some(Line::TooLong { head }) => Ok(Some(Incoming::Unreadable {
            answers: result_id_from_prefix(&head).map(Answers::Call),
            message: too_long().to_string(),
        })),
    }
}

/// Decodes one line, through the one decoder of broker lines (`BrokerLine`): a result frame is
/// read in one pass straight into rmcp's blocks. If that fails (a block rmcp cannot read), the
/// same frame is read again with JSON values for blocks, converted one by one with the fallback
/// `outcome` describes. A line that is no frame at all is `Unreadable`.
pub fn decode(line: &[u8]) -> Incoming {
    match BrokerLine::<Vec<ContentBlock>>::parse(line) {
        Ok(BrokerLine::Result(frame)) => {
            return Incoming::Result {
                id: frame.id,
                ending: frame.outcome,
            };
        }
        Ok(BrokerLine::Frame(frame)) => return Incoming::Frame(frame),
        Err(_) => {}
    }
    match BrokerLine::<Vec<serde_json::Value>>::parse(line) {
        Ok(BrokerLine::Result(frame)) => Incoming::Result {
            id: frame.id,
            ending: ending(frame.outcome),
        },
        Ok(BrokerLine::Frame(frame)) => Incoming::Frame(frame),
        // This error names what is wrong with the frame itself, not with rmcp's view of it.
        Err(e) => Incoming::Unreadable {
            answers: answers(line),
            message: SidecarError::BadFrame { message: e.message }.to_string(),
        },
    }
}

/// The `type` and `id` of a frame, every other member skipped. Skipping has no depth limit in
/// serde_json, so this reads the head of a frame nested too deeply to parse.
#[derive(Debug, serde::Deserialize)]
struct Head {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<u64>,
}

/// Which call or fetch `line` answers, if its head can be read.
fn answers(line: &[u8]) -> Option<Answers> {
    match serde_json::from_slice::<Head>(line) {
        Ok(Head { kind, id: Some(id) }) => match kind.as_str() {
            "result" => Some(Answers::Call(id)),
            "messages" => Some(Answers::Fetch(id)),
            _ => None,
        },
        _ => result_id_from_prefix(line).map(Answers::Call),
    }
}

/// The id of a result frame as the broker writes it (`{"type":"result","id":7,…`), read from
/// the start of the line alone (for a line cut short).
fn result_id_from_prefix(line: &[u8]) -> Option<u64> {
    let rest = line
        .strip_prefix(RESULT_FRAME_PREFIX)?
        .strip_prefix(br#""id":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Parses one broker frame, naming the JSON path at fault.
pub fn parse_broker_frame(line: &[u8]) -> Result<BrokerFrame> {
    leo_protocol::envelope::parse_json::<BrokerFrame>(line)
        .map_err(|e| SidecarError::BadFrame { message: e.message })
}

/// Writes one frame.
pub async fn write_frame(writer: &mut Writer, frame: &SidecarFrame) -> Result<()> {
    // Our own frames always serialize (string keys, no non-finite floats from outside: the
    // arguments came in as JSON already).
    writer
        .send(encode_frame(frame))
        .await
        .map_err(|source| SidecarError::Ipc {
            context: "write",
            source,
        })
}
