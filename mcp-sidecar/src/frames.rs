//! JSON lines on the IPC socket: one frame per line, at most `MAX_FRAME_BYTES`.
//!
//! The frame types live in `leo_protocol::ipc`; this file only moves them across the socket,
//! with the same length rule the broker applies, so a runaway line is an error rather than an
//! unbounded allocation.

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
    Result { id: u64, ending: Ending },
    Frame(BrokerFrame),
}

/// Reads the next non-blank line into `buf` (cleared first); `false` at end of stream.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> Result<bool> {
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
            return Ok(false);
        }
        if buf.last() != Some(&b'\n') && buf.len() > MAX_FRAME_BYTES {
            return Err(SidecarError::BadFrame {
                message: format!("frame longer than {MAX_FRAME_BYTES} bytes"),
            });
        }
        if !buf.iter().all(u8::is_ascii_whitespace) {
            return Ok(true);
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
/// calls. `Ok(None)` at end of stream.
pub async fn read_incoming<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Incoming>> {
    if !read_line(reader, buf).await? {
        return Ok(None);
    }
    decode(buf).map(Some)
}

/// Decodes one line. A result frame is read in one pass straight into rmcp's blocks
/// (`ResultFrameIn`); if that fails (a block rmcp cannot read), the line is parsed as any frame
/// and its blocks are converted one by one, with the fallback `outcome` describes.
pub fn decode(line: &[u8]) -> Result<Incoming> {
    if line.starts_with(RESULT_FRAME_PREFIX)
        && let Ok(frame) = serde_json::from_slice::<ResultFrameIn<Vec<ContentBlock>>>(line)
        && let Some(ending) = frame.outcome.into_outcome()
    {
        return Ok(Incoming::Result {
            id: frame.id,
            ending,
        });
    }
    parse_broker_frame(line).map(Incoming::Frame)
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
