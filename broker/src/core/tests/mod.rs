//! The core tested in-process, with time paused.
//!
//! A `Broker` is built from a `Config` as `server` builds it, but with the store disabled
//! (`Store::disabled()`: what a restart reads back is handed to `Broker::restore` as the store
//! would) and without listeners: an app is
//! played through the core's own operations (`open_stream`, `register`, `claim`,
//! `post_result`), a sidecar through `session_open`, `call` and `cancel_call`. Time is paused
//! (`#[tokio::test(start_paused = true)]`), so a timeout or a grace period is reached with
//! `tokio::time::advance` to the millisecond, and a test of a ten-second timer takes no real
//! time. What the binary adds around these operations (HTTP, SSE, the IPC socket) is tested
//! end to end in `broker/tests`, once per behaviour.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leo_protocol::ErrorCode;
use leo_protocol::ipc::{Mode, RawOutcome};
use leo_protocol::tool::{RegisterBody, ToolDef};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;

use super::{Broker, Opened};
use crate::config::Config;
use crate::history::History;
use crate::refusal::Refusal;
use crate::requests::ConnId;
use crate::state_file::EverRegistered;
use crate::store::{Restored, Store};

mod ask_human;
mod away;
mod detach;
mod grace;
mod races;
mod restart;
mod timers;

/// A broker without listeners, its state files in a temporary directory.
pub(super) struct Harness {
    pub broker: Arc<Broker>,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// A broker with `config.yaml` text `yaml` and no store.
    pub fn start(yaml: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let broker = build(yaml, dir.path(), Store::disabled());
        Harness { broker, _dir: dir }
    }

    /// A broker started again after a crash, with what its store had (`restored`) put back.
    pub fn restarted(yaml: &str, restored: Restored) -> Harness {
        let harness = Harness::start(yaml);
        harness.broker.restore(restored);
        harness
    }

    /// An app's provider stream, as `GET /api/v1/events?client_tools=1` opens it.
    pub fn app(&self) -> FakeApp {
        FakeApp::open(&self.broker, None).unwrap()
    }

    /// A sidecar session of `agent`, as its hello opens it.
    pub fn agent(&self, agent: &str) -> FakeAgent {
        let conn = self.broker.session_open(
            agent,
            &format!("{agent}-1"),
            None,
            Mode::Native,
            Default::default(),
        );
        FakeAgent {
            broker: self.broker.clone(),
            conn,
        }
    }
}

fn build(yaml: &str, dir: &Path, store: Store) -> Arc<Broker> {
    let config = Config::parse(yaml).unwrap();
    let ever = EverRegistered::load(&dir.join("client-tools.json")).unwrap();
    let history = History::open(&dir.join("history.db"), &config.history).unwrap();
    Broker::new(Arc::new(config), ever, store, history)
}

/// A tool named `name` with `timeout_s` (`None`: the configured default; `Some(0)`: a handoff
/// that never times out).
pub fn tool(name: &str, timeout_s: Option<u64>) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object"}),
        timeout_s,
        ..ToolDef::default()
    }
}

/// The principal every fake app's stream is opened by, and so the caller of its operations
/// (a client id belongs to the principal whose stream it names).
pub(super) const APP_PRINCIPAL: &str = "operator";

/// An app: its provider stream (dropping it is the stream closing) and what it was sent.
pub(super) struct FakeApp {
    broker: Arc<Broker>,
    opened: Opened,
}

impl FakeApp {
    /// Opens a provider stream, resuming with `key` if given.
    pub fn open(broker: &Arc<Broker>, key: Option<&str>) -> Result<FakeApp, Refusal> {
        let opened = broker.open_stream(
            true,
            APP_PRINCIPAL.into(),
            Some("app".into()),
            None,
            key.map(str::to_owned),
        )?;
        Ok(FakeApp {
            broker: broker.clone(),
            opened,
        })
    }

    pub fn id(&self) -> &str {
        &self.opened.guard.client_id
    }

    /// The key that resumes this client after its stream closed.
    pub fn resume_key(&self) -> String {
        self.opened.hello.resume.clone().unwrap()
    }

    pub fn register(&self, group: &str, tools: Vec<ToolDef>) {
        self.broker
            .register(
                APP_PRINCIPAL,
                RegisterBody {
                    client_id: self.id().into(),
                    group: group.into(),
                    tools,
                    agents: None,
                    prompts: Vec::new(),
                    resources: Vec::new(),
                    resource_templates: Vec::new(),
                },
            )
            .unwrap();
    }

    /// The events published since the last look, as `(kind, data)`, without waiting.
    pub fn events(&mut self) -> Vec<(&'static str, Value)> {
        let mut out = Vec::new();
        while let Ok(e) = self.opened.subscription.rx.try_recv() {
            out.push((e.kind, serde_json::from_str(e.data(true)).unwrap()));
        }
        out
    }

    /// The ids of the `client_tool.request` events since the last look.
    pub fn offered(&mut self) -> Vec<String> {
        self.events_of("client_tool.request")
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The events of `kind` since the last look.
    pub fn events_of(&mut self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, data)| data)
            .collect()
    }

    pub async fn claim(&self, id: &str) -> Result<(), Refusal> {
        self.broker
            .claim(id, self.id(), APP_PRINCIPAL)
            .await
            .map(drop)
    }

    /// Posts a text result (claiming the call in the same step with `claim`).
    pub async fn answer(&self, id: &str, text: &str, claim: bool) -> Result<(), Refusal> {
        let body = serde_json::from_value(json!({
            "client_id": self.id(),
            "ok": true,
            "claim": claim,
            "content": [{"type": "text", "text": text}],
        }))
        .unwrap();
        self.broker
            .post_result(id, body, APP_PRINCIPAL)
            .await
            .map(drop)
    }
}

/// A sidecar session.
pub(super) struct FakeAgent {
    broker: Arc<Broker>,
    pub conn: ConnId,
}

impl FakeAgent {
    /// Calls `tool`; the call's id at the broker and where its one outcome comes.
    pub fn call(&self, local_id: u64, tool: &str) -> (String, oneshot::Receiver<RawOutcome>) {
        self.call_with(local_id, tool, json!({}))
    }

    pub fn call_with(
        &self,
        local_id: u64,
        tool: &str,
        arguments: Value,
    ) -> (String, oneshot::Receiver<RawOutcome>) {
        self.broker
            .call(self.conn, local_id, tool, arguments, None)
            .unwrap()
    }

    pub fn cancel(&self, local_id: u64) {
        self.broker.cancel_call(self.conn, local_id);
    }

    pub fn close(&self) {
        self.broker.session_closed(self.conn);
    }
}

/// The outcome on `rx` if there is one yet.
pub fn outcome_now(rx: &mut oneshot::Receiver<RawOutcome>) -> Option<RawOutcome> {
    match rx.try_recv() {
        Ok(o) => Some(o),
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Closed) => panic!("the call's sender was dropped without an outcome"),
    }
}

/// An outcome's error code, or `""` for content.
pub fn code(outcome: &RawOutcome) -> String {
    match outcome {
        RawOutcome::Error { error } => error.code.clone(),
        RawOutcome::Content { .. } => String::new(),
    }
}

/// The text of an outcome's first block.
pub fn text(outcome: &RawOutcome) -> String {
    match outcome {
        RawOutcome::Content { content, .. } => {
            let block: Value = serde_json::from_str(content[0].get()).unwrap();
            block["text"].as_str().unwrap().to_owned()
        }
        RawOutcome::Error { error } => panic!("an error, not content: {error:?}"),
    }
}

/// Asserts that `result` is the refusal `want`, and returns its message.
pub fn refused<T: std::fmt::Debug>(result: Result<T, Refusal>, want: ErrorCode) -> String {
    match result {
        Err(r) if r.code == want => r.message,
        other => panic!("expected {want:?}, got {other:?}"),
    }
}

/// The reasons of the `client_tool.cancelled` events among `events`.
pub fn cancel_reasons(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_owned())
        .collect()
}

/// Moves paused time on by `ms` milliseconds and lets every task that woke run.
pub async fn advance_ms(ms: u64) {
    tokio::time::advance(Duration::from_millis(ms)).await;
    // `advance` yields once; a woken timer task may need one more turn to take the lock.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}
