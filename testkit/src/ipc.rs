//! A raw client of the sidecar IPC (JSON lines), for tests that play a sidecar's frames
//! directly against the real broker: on `run/sidecar.sock`, or on the TCP listener after the
//! `GET /api/v1/ipc` upgrade (`Ipc::upgrade`).

use std::path::Path;

use futures_util::StreamExt;
use leo_protocol::lines::{Line, LineCodec};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::codec::FramedRead;

use crate::WAIT;

type Read = Box<dyn AsyncRead + Send + Unpin>;
type Write = Box<dyn AsyncWrite + Send + Unpin>;

pub struct Ipc {
    /// The broker's frames, read with the codec every part uses.
    reader: FramedRead<Read, LineCodec>,
    /// Raw, so tests can write lines no codec would (too long, not JSON).
    writer: Write,
}

/// The answer to an IPC upgrade that was not `101`: the status, and the head and body as text.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Refused {
    /// The body as JSON (the broker's error envelope).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.head, self.body))
    }
}

impl Ipc {
    pub async fn connect(path: &Path) -> Ipc {
        let stream = UnixStream::connect(path)
            .await
            .expect("connect sidecar.sock");
        Ipc::over(stream)
    }

    fn over(stream: impl AsyncRead + AsyncWrite + Send + 'static) -> Ipc {
        let (r, w) = tokio::io::split(stream);
        Ipc {
            reader: FramedRead::new(Box::new(r), LineCodec::default()),
            writer: Box::new(w),
        }
    }

    /// Opens the IPC on the broker's TCP listener at `addr`: `GET /api/v1/ipc` with `Upgrade:
    /// leo-ipc`, `Host: <addr>` and `Connection: upgrade` unless `headers` name them (an empty
    /// value leaves a header out), and the other `headers` (`("authorization", "Bearer …")`,
    /// `("leo-agent", NAME)`…). `Err` is the answer when it is not `101`.
    pub async fn upgrade(
        addr: std::net::SocketAddr,
        headers: &[(&str, &str)],
    ) -> Result<Ipc, Refused> {
        let mut stream = TcpStream::connect(addr).await.expect("connect TCP");
        let mut head = format!("GET {} HTTP/1.1\r\n", leo_protocol::ipc::UPGRADE_PATH);
        let defaults = [
            ("host", addr.to_string()),
            ("connection", "upgrade".to_owned()),
            ("upgrade", leo_protocol::ipc::UPGRADE_PROTOCOL.to_owned()),
        ];
        for (k, v) in &defaults {
            if !headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k)) {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        for (k, v) in headers.iter().filter(|(_, v)| !v.is_empty()) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("write");
        let (status, head) = tokio::time::timeout(WAIT, read_head(&mut stream))
            .await
            .expect("no answer to the upgrade");
        if status == 101 {
            return Ok(Ipc::over(stream));
        }
        let length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())
                    .flatten()
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        tokio::time::timeout(WAIT, stream.read_exact(&mut body))
            .await
            .expect("no body")
            .expect("read body");
        Err(Refused {
            status,
            head,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    /// Connects and says hello as `agent`; returns the client and the welcome frame.
    pub async fn hello(path: &Path, token: &str, agent: &str) -> (Ipc, Value) {
        let mut ipc = Ipc::connect(path).await;
        let welcome = ipc.say_hello(token, agent).await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        (ipc, welcome)
    }

    /// [`Ipc::hello`] that never panics, for a bench that counts how many sessions a broker
    /// takes: `Err` says why this one was not welcomed (the socket refused, no frame within
    /// `WAIT`, the stream ended, or the broker's `error` frame).
    pub async fn try_hello(path: &Path, token: &str, agent: &str) -> Result<(Ipc, Value), String> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| format!("connect {}: {e}", path.display()))?;
        let mut ipc = Ipc::over(stream);
        // A broker that refuses the connection may answer and close before the hello is
        // written: its answer is still read.
        let written = ipc.try_send(&hello_frame(token, agent)).await;
        let unwritten = written
            .err()
            .map(|e| format!(" (the hello: {e})"))
            .unwrap_or_default();
        match tokio::time::timeout(WAIT, ipc.recv_or_end()).await {
            Ok(Some(v)) if v["type"] == "welcome" => Ok((ipc, v)),
            Ok(Some(v)) => Err(format!("answered {v}{unwritten}")),
            Ok(None) => Err(format!("the stream ended before a welcome{unwritten}")),
            Err(_) => Err(format!("no welcome within {WAIT:?}{unwritten}")),
        }
    }

    /// Says hello as `agent` with `token`; the broker's first frame (`welcome` or `error`).
    pub async fn say_hello(&mut self, token: &str, agent: &str) -> Value {
        self.send(&hello_frame(token, agent)).await;
        self.recv().await
    }

    pub async fn send(&mut self, frame: &Value) {
        self.send_raw(&frame.to_string()).await;
    }

    /// Writes `frame` as a line; `Err` when the broker closed the connection first (a
    /// follower with no leader yet closes a new session at once).
    pub async fn try_send(&mut self, frame: &Value) -> std::io::Result<()> {
        self.writer.write_all(format!("{frame}\n").as_bytes()).await
    }

    pub async fn send_raw(&mut self, line: &str) {
        self.send_bytes(line.as_bytes()).await;
    }

    /// Writes `line` as a frame's line, whatever its bytes (not UTF-8, say).
    pub async fn send_bytes(&mut self, line: &[u8]) {
        self.writer.write_all(line).await.expect("write");
        self.writer.write_all(b"\n").await.expect("write");
    }

    /// Writes `bytes` as they are, with no newline: a line a sidecar killed in the middle of it
    /// leaves behind.
    pub async fn send_torn(&mut self, bytes: &str) {
        self.writer
            .write_all(bytes.as_bytes())
            .await
            .expect("write");
        self.writer.flush().await.expect("flush");
    }

    /// Sends a `call` frame.
    pub async fn call(&mut self, id: u64, tool: &str, arguments: Value) {
        self.send(&json!({"type": "call", "id": id, "tool": tool, "arguments": arguments}))
            .await;
    }

    /// Sends `fetch_messages` `id`; the `messages` frame that answers it.
    pub async fn fetch_messages(&mut self, id: u64) -> Value {
        self.send(&json!({"type": "fetch_messages", "id": id}))
            .await;
        self.recv_of("messages").await
    }

    /// The next frame; panics after `WAIT` or at end of stream.
    pub async fn recv(&mut self) -> Value {
        match tokio::time::timeout(WAIT, self.recv_or_end()).await {
            Ok(Some(v)) => v,
            Ok(None) => panic!("IPC stream ended"),
            Err(_) => panic!("no IPC frame within {WAIT:?}"),
        }
    }

    /// The next frame of `kind`, skipping others.
    pub async fn recv_of(&mut self, kind: &str) -> Value {
        loop {
            let v = self.recv().await;
            if v["type"] == kind {
                return v;
            }
        }
    }

    pub async fn recv_or_end(&mut self) -> Option<Value> {
        match self.reader.next().await? {
            Ok(Line::Frame(line)) => Some(serde_json::from_slice(&line).expect("frame is JSON")),
            Ok(Line::TooLong { head }) => panic!("frame over the limit: {head:?}…"),
            Err(_) => None,
        }
    }

    pub async fn within(&mut self, d: std::time::Duration) -> Option<Value> {
        tokio::time::timeout(d, self.recv_or_end())
            .await
            .ok()
            .flatten()
    }

    /// Closes the write side (the broker sees the agent stop).
    pub async fn close(mut self) {
        let _ = self.writer.shutdown().await;
    }
}

/// The `hello` of session `{agent}-s1` of `agent` with `token`, in native mode.
fn hello_frame(token: &str, agent: &str) -> Value {
    json!({
        "type": "hello", "v": 1, "agent": agent, "session": format!("{agent}-s1"),
        "token": token, "mode": "native",
        "harness": {"name": "test-harness", "version": "1"}
    })
}

/// The texts of a `messages` frame, oldest first.
pub fn texts(messages: &Value) -> Vec<String> {
    messages["messages"]
        .as_array()
        .expect("a messages frame")
        .iter()
        .map(|m| m["text"].as_str().expect("a message text").to_owned())
        .collect()
}

/// Reads a response head a byte at a time, so that nothing after it is taken from the stream.
async fn read_head(stream: &mut TcpStream) -> (u16, String) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = stream.read(&mut byte).await.expect("read head");
        assert!(
            n == 1,
            "the connection closed in the head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head)
}
