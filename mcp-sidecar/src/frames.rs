//! JSON lines on the IPC socket: one frame per line, at most `MAX_FRAME_BYTES`.
//!
//! The frame types live in `leo_protocol::ipc`; this file only moves them across the socket,
//! with the same length rule the broker applies, so a runaway line is an error rather than an
//! unbounded allocation.
//!
//! Once a connection is welcomed, no single line can end it: a line this sidecar cannot read
//! (too long, too deep for serde_json, a shape it does not know) is `Incoming::Unreadable`,
//! naming the call or fetch it answers when its head can still be read, so that one call fails
//! with a clear error and every other call of the session goes on.

use leo_protocol::ipc::{BrokerFrame, RESULT_FRAME_PREFIX, ResultFrameIn, SidecarFrame};
use leo_protocol::limits::MAX_FRAME_BYTES;
use rmcp::model::ContentBlock;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Result, SidecarError};
use crate::outcome::Ending;

/// A line buffer that grew past this is given back after the frame, so one large image does
/// not stay in the sidecar's memory for the rest of the session.
const KEEP_BUFFER: usize = 1024 * 1024;

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

/// What `read_line` found.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    End,
    /// A whole line is in the buffer.
    Whole,
    /// The line was longer than `MAX_FRAME_BYTES`: its start is in the buffer, the rest was
    /// read and dropped.
    TooLong,
}

/// Reads the next non-blank line into `buf` (cleared first); `false` at end of stream. A line
/// over the limit is an error.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> Result<bool> {
    match read_line_or_skip(reader, buf, false).await? {
        Line::End => Ok(false),
        Line::Whole => Ok(true),
        Line::TooLong => Err(too_long()),
    }
}

fn too_long() -> SidecarError {
    SidecarError::BadFrame {
        message: format!("frame longer than {MAX_FRAME_BYTES} bytes"),
    }
}

/// `read_line`; with `skip_long`, a line over the limit is read to its end and dropped
/// (`Line::TooLong`) instead of ending the connection.
async fn read_line_or_skip<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    skip_long: bool,
) -> Result<Line> {
    loop {
        buf.clear();
        if buf.capacity() > KEEP_BUFFER {
            buf.shrink_to(64 * 1024);
        }
        let n = (&mut *reader)
            .take(MAX_FRAME_BYTES as u64 + 1)
            .read_until(b'\n', buf)
            .await
            .map_err(|source| SidecarError::Ipc {
                context: "read",
                source,
            })?;
        if n == 0 {
            return Ok(Line::End);
        }
        if buf.last() != Some(&b'\n') && buf.len() > MAX_FRAME_BYTES {
            if !skip_long {
                return Err(too_long());
            }
            skip_rest_of_line(reader).await?;
            return Ok(Line::TooLong);
        }
        if !buf.iter().all(u8::is_ascii_whitespace) {
            return Ok(Line::Whole);
        }
    }
}

/// Reads up to and including the next newline (or the end of stream), keeping nothing.
async fn skip_rest_of_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<()> {
    loop {
        let chunk = reader
            .fill_buf()
            .await
            .map_err(|source| SidecarError::Ipc {
                context: "read",
                source,
            })?;
        if chunk.is_empty() {
            return Ok(());
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
            }
        }
    }
}

/// Reads the next frame. `Ok(None)` at end of stream; blank lines are skipped.
pub async fn read_frame<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<BrokerFrame>> {
    let mut buf = Vec::new();
    if !read_line(reader, &mut buf).await? {
        return Ok(None);
    }
    parse_broker_frame(&buf).map(Some)
}

/// Reads the next frame of a welcomed connection into `buf`, which the caller keeps between
/// calls. `Ok(None)` at end of stream; only the socket failing is an error.
pub async fn read_incoming<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Incoming>> {
    match read_line_or_skip(reader, buf, true).await? {
        Line::End => Ok(None),
        Line::Whole => Ok(Some(decode(buf))),
        Line::TooLong => Ok(Some(Incoming::Unreadable {
            answers: result_id_from_prefix(buf).map(Answers::Call),
            message: too_long().to_string(),
        })),
    }
}

/// Decodes one line. A result frame is read in one pass straight into rmcp's blocks
/// (`ResultFrameIn`); if that fails (a block rmcp cannot read), the line is parsed as any frame
/// and its blocks are converted one by one, with the fallback `outcome` describes. A line that
/// is no frame at all is `Unreadable`.
pub fn decode(line: &[u8]) -> Incoming {
    if line.starts_with(RESULT_FRAME_PREFIX)
        && let Ok(frame) = serde_json::from_slice::<ResultFrameIn<Vec<ContentBlock>>>(line)
        && let Some(ending) = frame.outcome.into_outcome()
    {
        return Incoming::Result {
            id: frame.id,
            ending,
        };
    }
    match parse_broker_frame(line) {
        Ok(frame) => Incoming::Frame(frame),
        Err(e) => Incoming::Unreadable {
            answers: answers(line),
            message: e.to_string(),
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

/// The line for `frame`, newline included.
pub fn encode(frame: &SidecarFrame) -> Vec<u8> {
    // Our own frames always serialize (string keys, no non-finite floats from outside: the
    // arguments came in as JSON already).
    let mut line = serde_json::to_vec(frame).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &SidecarFrame,
) -> Result<()> {
    writer
        .write_all(&encode(frame))
        .await
        .map_err(|source| SidecarError::Ipc {
            context: "write",
            source,
        })
}
