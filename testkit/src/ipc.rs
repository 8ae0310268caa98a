//! A raw client of the sidecar IPC (JSON lines), for tests that play a sidecar's frames
//! directly against the real broker.

use std::path::Path;

use futures_util::StreamExt;
use leo_protocol::lines::{Line, LineCodec};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::FramedRead;

use crate::WAIT;

pub struct Ipc {
    /// The broker's frames, read with the codec every part uses.
    reader: FramedRead<OwnedReadHalf, LineCodec>,
    /// Raw, so tests can write lines no codec would (too long, not JSON).
    writer: OwnedWriteHalf,
}

impl Ipc {
    pub async fn connect(path: &Path) -> Ipc {
        let stream = UnixStream::connect(path)
            .await
            .expect("connect sidecar.sock");
        let (r, w) = stream.into_split();
        Ipc {
            reader: FramedRead::new(r, LineCodec::default()),
            writer: w,
        }
    }

    /// Connects and says hello as `agent`; returns the client and the welcome frame.
    pub async fn hello(path: &Path, token: &str, agent: &str) -> (Ipc, Value) {
        let mut ipc = Ipc::connect(path).await;
        ipc.send(&json!({
            "type": "hello", "v": 1, "agent": agent, "session": format!("{agent}-s1"),
            "token": token, "mode": "native",
            "harness": {"name": "test-harness", "version": "1"}
        }))
        .await;
        let welcome = ipc.recv().await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        (ipc, welcome)
    }

    pub async fn send(&mut self, frame: &Value) {
        self.send_raw(&frame.to_string()).await;
    }

    pub async fn send_raw(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.expect("write");
        self.writer.write_all(b"\n").await.expect("write");
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

/// The texts of a `messages` frame, oldest first.
pub fn texts(messages: &Value) -> Vec<String> {
    messages["messages"]
        .as_array()
        .expect("a messages frame")
        .iter()
        .map(|m| m["text"].as_str().expect("a message text").to_owned())
        .collect()
}
