//! The one line codec of the sidecar IPC, used by the broker, `leo-mcp`, `leo call` and the
//! testkit alike (feature `codec`).
//!
//! A frame is one line of at most `MAX_FRAME_BYTES` (the newline not counted); a last line
//! without its newline still counts; blank lines are skipped. A longer line is never held
//! whole: as soon as it passes the limit, with or without its newline, it is reported with its
//! first bytes (`Line::TooLong`, so a reader can name the call it answered), and the rest is
//! dropped up to the next newline. Reporting it then, not at its end, matters: a line that never
//! ends would otherwise be read and dropped for as long as the sender goes on. Whether a
//! too-long line ends the connection is the reader's choice: the broker refuses it (before
//! `hello` and after), a welcomed sidecar fails only that call.
//!
//! The broker ends every frame it writes with a newline, so a reader of the broker's frames
//! (`leo-mcp`, `leo call`) uses `whole_lines_only`: a last line without its newline is a frame
//! torn by a broker that died while writing it, and is dropped at end of stream instead of
//! being read as a bad frame; the call it carried is resumed after the reconnect.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

use crate::limits::MAX_FRAME_BYTES;

/// How much of a too-long line is kept: enough for its `type` and `id`.
const HEAD: usize = 256;

/// One line off the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A frame's text, without its newline.
    Frame(Bytes),
    /// A line over the limit, dropped; its first bytes.
    TooLong { head: Bytes },
}

impl Line {
    /// The error text for a line over the limit.
    pub fn too_long_message(max: usize) -> String {
        format!("frame longer than {max} bytes")
    }
}

/// JSON lines with a maximum length.
#[derive(Debug, Clone)]
pub struct LineCodec {
    max: usize,
    /// Bytes of `buf` already searched for a newline.
    searched: usize,
    /// A too-long line was reported; its rest is being dropped.
    dropping: bool,
    /// A last line without its newline is dropped at end of stream (`whole_lines_only`).
    whole_lines: bool,
}

impl Default for LineCodec {
    fn default() -> Self {
        LineCodec::new(MAX_FRAME_BYTES)
    }
}

impl LineCodec {
    /// Lines of at most `max` bytes.
    pub fn new(max: usize) -> LineCodec {
        LineCodec {
            max,
            searched: 0,
            dropping: false,
            whole_lines: false,
        }
    }

    /// Drops a last line that has no newline at end of stream: for readers of a peer that
    /// ends every line, where such a line is one the peer died writing.
    pub fn whole_lines_only(mut self) -> LineCodec {
        self.whole_lines = true;
        self
    }

    /// The largest line this codec accepts.
    pub fn max(&self) -> usize {
        self.max
    }
}

fn head_of(buf: &[u8]) -> Bytes {
    Bytes::copy_from_slice(&buf[..buf.len().min(HEAD)])
}

impl Decoder for LineCodec {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, std::io::Error> {
        loop {
            let newline = memchr::memchr(b'\n', &buf[self.searched..]).map(|i| self.searched + i);
            if self.dropping {
                self.searched = 0;
                let Some(end) = newline else {
                    buf.clear();
                    return Ok(None);
                };
                buf.advance(end + 1);
                self.dropping = false;
                continue;
            }
            let Some(end) = newline else {
                if buf.len() > self.max {
                    // Past the limit before its end: reported now, its rest dropped.
                    let head = head_of(buf);
                    buf.clear();
                    self.searched = 0;
                    self.dropping = true;
                    return Ok(Some(Line::TooLong { head }));
                }
                self.searched = buf.len();
                return Ok(None);
            };
            self.searched = 0;
            let mut line = buf.split_to(end + 1);
            line.truncate(end);
            if line.len() > self.max {
                return Ok(Some(Line::TooLong {
                    head: head_of(&line),
                }));
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(Line::Frame(line.freeze())));
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, std::io::Error> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        self.searched = 0;
        self.dropping = false;
        let rest = buf.split();
        if self.whole_lines || rest.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        Ok(Some(Line::Frame(rest.freeze())))
    }
}

/// Writes one frame's text (without a newline) as a line.
impl Encoder<Bytes> for LineCodec {
    type Error = std::io::Error;

    fn encode(&mut self, line: Bytes, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        dst.reserve(line.len() + 1);
        dst.put_slice(&line);
        dst.put_u8(b'\n');
        Ok(())
    }
}

/// A frame's text, ready for `LineCodec` (no newline). Our own frame types always serialize;
/// a failure would be a bug, and writes `{}`, which the reader refuses loudly.
pub fn encode_frame<F: Serialize>(frame: &F) -> Bytes {
    serde_json::to_vec(frame)
        .unwrap_or_else(|_| b"{}".to_vec())
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(codec: &mut LineCodec, input: &[&[u8]]) -> Vec<Line> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in input {
            buf.extend_from_slice(chunk);
            while let Some(line) = codec.decode(&mut buf).unwrap() {
                out.push(line);
            }
        }
        while let Some(line) = codec.decode_eof(&mut buf).unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn whole_lines_only_drops_a_torn_last_line() {
        let mut c = LineCodec::new(16).whole_lines_only();
        let got = all(&mut c, &[b"{\"a\":1}\n{\"b\"", b":2"]);
        assert_eq!(got, vec![frame("{\"a\":1}")]);
        let mut c = LineCodec::new(4).whole_lines_only();
        assert!(
            matches!(&all(&mut c, &[b"{\"a\":1}"])[..], [Line::TooLong { .. }]),
            "torn, but past the limit: too long all the same"
        );
    }

    fn frame(s: &str) -> Line {
        Line::Frame(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn lines_split_across_reads_blank_lines_skipped_last_line_without_newline() {
        let mut c = LineCodec::new(16);
        let got = all(
            &mut c,
            &[b"{\"a\"", b":1}\n\n  \n{\"b\":2}\n{\"c\"", b":3}"],
        );
        assert_eq!(
            got,
            [frame("{\"a\":1}"), frame("{\"b\":2}"), frame("{\"c\":3}")]
        );
    }

    #[test]
    fn the_limit_counts_the_line_without_its_newline() {
        let mut c = LineCodec::new(4);
        assert_eq!(all(&mut c, &[b"abcd\n"]), [frame("abcd")]);
        let mut c = LineCodec::new(4);
        assert_eq!(all(&mut c, &[b"abcd"]), [frame("abcd")]);
        let mut c = LineCodec::new(4);
        assert!(matches!(
            &all(&mut c, &[b"abcde\n"])[..],
            [Line::TooLong { .. }]
        ));
    }

    #[test]
    fn a_long_line_is_dropped_keeping_its_head_and_the_next_line_reads() {
        let mut c = LineCodec::new(8);
        let got = all(
            &mut c,
            &[b"{\"type\":\"result\",", b"\"id\":7,xxxxxxxx", b"xxx\nok\n"],
        );
        assert_eq!(got.len(), 2, "{got:?}");
        match &got[0] {
            Line::TooLong { head } => assert!(head.starts_with(b"{\"type\":\"result\",")),
            other => panic!("{other:?}"),
        }
        assert_eq!(got[1], frame("ok"));
        // Cut off by the end of the stream while dropping: still reported.
        let mut c = LineCodec::new(4);
        assert!(matches!(
            &all(&mut c, &[b"abcdefgh"])[..],
            [Line::TooLong { .. }]
        ));
    }

    #[test]
    fn a_line_is_reported_as_soon_as_it_passes_the_limit() {
        let mut c = LineCodec::new(8);
        let mut buf = BytesMut::from(&b"12345678"[..]);
        assert_eq!(
            c.decode(&mut buf).unwrap(),
            None,
            "at the limit, it may still end"
        );
        buf.extend_from_slice(b"9");
        assert!(matches!(
            c.decode(&mut buf).unwrap(),
            Some(Line::TooLong { .. })
        ));
        // What follows is dropped as it comes, up to the newline, and reported no more.
        for _ in 0..100 {
            buf.extend_from_slice(&[b'x'; 1000]);
            assert_eq!(c.decode(&mut buf).unwrap(), None);
            assert!(buf.is_empty(), "the dropped rest is not kept");
        }
        buf.extend_from_slice(b"x\nok\n");
        assert_eq!(c.decode(&mut buf).unwrap(), Some(frame("ok")));
        assert_eq!(c.decode_eof(&mut buf).unwrap(), None);
    }

    #[test]
    fn encoding_adds_the_newline() {
        let mut c = LineCodec::default();
        let mut dst = BytesMut::new();
        c.encode(encode_frame(&serde_json::json!({"a": 1})), &mut dst)
            .unwrap();
        assert_eq!(&dst[..], b"{\"a\":1}\n");
    }
}
