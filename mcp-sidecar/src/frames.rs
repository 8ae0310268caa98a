//! JSON lines on the IPC socket: one frame per line, at most `MAX_FRAME_BYTES`.
//!
//! The frame types live in `leo_protocol::ipc`; this file only moves them across the socket,
//! with the same length rule the broker applies, so a runaway line is an error rather than an
//! unbounded allocation.

use leo_protocol::ipc::{BrokerFrame, SidecarFrame};
use leo_protocol::limits::MAX_FRAME_BYTES;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Result, SidecarError};

/// Reads the next frame. `Ok(None)` at end of stream; blank lines are skipped.
pub async fn read_frame<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<BrokerFrame>> {
    loop {
        let mut buf = Vec::new();
        let n = (&mut *reader)
            .take(MAX_FRAME_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .await
            .map_err(|source| SidecarError::Ipc {
                context: "read",
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        if buf.last() != Some(&b'\n') && buf.len() > MAX_FRAME_BYTES {
            return Err(SidecarError::BadFrame {
                message: format!("frame longer than {MAX_FRAME_BYTES} bytes"),
            });
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        return parse_broker_frame(&buf).map(Some);
    }
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
