//! The server-sent events parser: bytes in, `(id, event, data)` frames out.
//!
//! The broker's stream is small and regular (`id:`, `event:`, one `data:` line, comments for
//! keep-alive), so a hand-written parser of the SSE line format is shorter than a dependency
//! and lets the data stay bytes until the one `serde_json` pass that reads it. The SDK and the
//! test kit both read the stream through it, so what a test sees is what an app sees. Lines may end in
//! `\n`, `\r\n` or `\r`; a frame ends at a blank line. A frame larger than `MAX_FRAME` is an
//! error, so a broken peer cannot grow the buffer without bound.

/// The largest frame accepted: call arguments are at most 1 MiB of compact JSON, and escaping
/// inside the event at most doubles it.
pub const MAX_FRAME: usize = 8 * 1024 * 1024;

/// One event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    /// The `id:` line, when it is a number.
    pub id: Option<u64>,
    /// The `event:` line (`message` when absent).
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: Vec<u8>,
}

/// An incremental parser.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    /// Where the next line starts in `buf`.
    start: usize,
    /// The frame being built.
    frame: Frame,
    /// True once the frame has a `data:` line; a frame without one is not dispatched.
    has_data: bool,
    /// A `\r` ended the last line: a `\n` right after it belongs to it.
    after_cr: bool,
}

/// The stream sent a frame larger than `MAX_FRAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

impl Parser {
    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, if the bytes pushed so far hold one.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, TooLarge> {
        loop {
            let rest = &self.buf[self.start..];
            let rest = match (self.after_cr, rest.first()) {
                (true, Some(b'\n')) => {
                    self.start += 1;
                    self.after_cr = false;
                    continue;
                }
                (true, Some(_)) => {
                    self.after_cr = false;
                    rest
                }
                _ => rest,
            };
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                if rest.len() + self.frame.data.len() > MAX_FRAME {
                    return Err(TooLarge);
                }
                self.compact();
                return Ok(None);
            };
            self.after_cr = rest[end] == b'\r';
            let line_start = self.start;
            self.start += end + 1;
            if let Some(frame) = self.line(line_start, line_start + end)? {
                return Ok(Some(frame));
            }
        }
    }

    /// Drops consumed bytes once they are most of the buffer.
    fn compact(&mut self) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    fn line(&mut self, from: usize, to: usize) -> Result<Option<Frame>, TooLarge> {
        let line = &self.buf[from..to];
        if line.is_empty() {
            let mut frame = std::mem::take(&mut self.frame);
            if !std::mem::take(&mut self.has_data) {
                return Ok(None);
            }
            if frame.event.is_empty() {
                frame.event = "message".into();
            }
            return Ok(Some(frame));
        }
        if line[0] == b':' {
            return Ok(None);
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.frame.data.push(b'\n');
                }
                self.has_data = true;
                if self.frame.data.len() + value.len() > MAX_FRAME {
                    return Err(TooLarge);
                }
                self.frame.data.extend_from_slice(value);
            }
            b"event" => self.frame.event = String::from_utf8_lossy(value).into_owned(),
            b"id" => self.frame.id = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()),
            // `retry:` and unknown fields are ignored, as the SSE rules say.
            _ => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]]) -> Vec<Frame> {
        let mut p = Parser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            p.push(chunk);
            while let Ok(Some(f)) = p.next_frame() {
                out.push(f);
            }
        }
        out
    }

    fn frame(id: Option<u64>, event: &str, data: &str) -> Frame {
        Frame {
            id,
            event: event.into(),
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn parses_the_brokers_frames_split_anywhere() {
        let text = b"event: hello\ndata: {\"a\":1}\n\n: keep-alive\n\nid: 7\nevent: client_tool.request\ndata: {\"id\":\"r\"}\n\n";
        let whole = frames(&[text]);
        assert_eq!(
            whole,
            [
                frame(None, "hello", "{\"a\":1}"),
                frame(Some(7), "client_tool.request", "{\"id\":\"r\"}")
            ]
        );
        for split in 1..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(frames(&[a, b]), whole, "split at {split}");
        }
    }

    #[test]
    fn handles_crlf_cr_multiline_data_and_defaults() {
        let got = frames(&[b"data: a\r\ndata: b\r\n\r\ndata:c\r", b"\r", b"event\n\n"]);
        assert_eq!(
            got,
            [frame(None, "message", "a\nb"), frame(None, "message", "c")]
        );
    }

    #[test]
    fn keeps_utf8_whole_when_a_character_is_split_between_chunks() {
        let text = "data: {\"t\":\"h\u{e9}llo \u{1f980}\"}\n\n".as_bytes();
        for split in 1..text.len() {
            let (a, b) = text.split_at(split);
            let got = frames(&[a, b]);
            assert_eq!(got.len(), 1, "split at {split}");
            assert_eq!(
                std::str::from_utf8(&got[0].data),
                Ok("{\"t\":\"h\u{e9}llo \u{1f980}\"}"),
                "split at {split}"
            );
        }
    }

    #[test]
    fn refuses_frames_over_the_limit() {
        let mut p = Parser::default();
        p.push(b"data: ");
        p.push(&vec![b'x'; MAX_FRAME + 1]);
        assert_eq!(p.next_frame(), Err(TooLarge));
    }
}
