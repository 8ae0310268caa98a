//! The sidecar's handle on the broker: the live connection (if any), the calls in flight, the
//! harness it reported, and the tool view.
//!
//! The connection and the in-flight table sit under one lock so that "send a call" and "the
//! connection dropped" cannot interleave badly: a call is either registered on a live
//! connection (and then ended by its `result` frame or by `detached`), or refused at once with
//! the reason the broker is unreachable. That is what makes "every call ends" hold.
//!
//! **Architecture Invariant:** only `reconnect` attaches or detaches a connection; the MCP side
//! only starts and cancels calls and reports the harness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leo_protocol::ipc::{BrokerFrame, Harness, Mode, Outcome, SidecarFrame};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use crate::pending::Pending;
use crate::view::View;

/// Why calls fail while no broker is connected.
pub const NOT_RUNNING: &str = "broker not running";
/// What calls in flight get when the connection drops.
pub const CONNECTION_LOST: &str = "broker connection lost";

/// Frames queued for the connection's writer.
pub type Outbox = mpsc::UnboundedSender<SidecarFrame>;

#[derive(Debug)]
struct State {
    conn: Option<Outbox>,
    pending: Pending,
    harness: Option<(Harness, Mode)>,
    down_reason: String,
}

/// Shared by the MCP server and the reconnect task.
#[derive(Debug)]
pub struct BrokerLink {
    state: Mutex<State>,
    view: watch::Sender<View>,
    settled: watch::Sender<bool>,
    next_id: AtomicU64,
}

impl BrokerLink {
    pub fn new() -> Arc<BrokerLink> {
        Arc::new(BrokerLink {
            state: Mutex::new(State {
                conn: None,
                pending: Pending::default(),
                harness: None,
                down_reason: NOT_RUNNING.to_owned(),
            }),
            view: watch::channel(View::default()).0,
            settled: watch::channel(false).0,
            next_id: AtomicU64::new(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves State consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ----- read by the MCP server -----

    /// The current tool view.
    pub fn view(&self) -> View {
        self.view.borrow().clone()
    }

    /// A receiver that wakes on every view change.
    pub fn subscribe(&self) -> watch::Receiver<View> {
        self.view.subscribe()
    }

    /// Waits until the first connection attempt has succeeded or failed, at most `max`; a
    /// `tools/list` right after start then sees the broker's answer, not an empty view.
    pub async fn wait_settled(&self, max: Duration) {
        let mut rx = self.settled.subscribe();
        let _ = tokio::time::timeout(max, rx.wait_for(|s| *s)).await;
    }

    /// Sends a call to the broker. `Err` carries the message of an immediate `no_client`.
    pub fn start_call(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<(u64, oneshot::Receiver<Outcome>), String> {
        let mut state = self.lock();
        let Some(conn) = state.conn.clone() else {
            return Err(state.down_reason.clone());
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rx = state.pending.insert(id);
        let frame = SidecarFrame::Call {
            id,
            tool: tool.to_owned(),
            arguments,
        };
        if conn.send(frame).is_err() {
            state.pending.forget(id);
            return Err(CONNECTION_LOST.to_owned());
        }
        debug!(call = id, tool, "call sent");
        Ok((id, rx))
    }

    /// The harness cancelled call `id`: tell the broker and stop waiting for it.
    pub fn cancel(&self, id: u64) {
        let mut state = self.lock();
        state.pending.forget(id);
        if let Some(conn) = &state.conn {
            let _ = conn.send(SidecarFrame::Cancel { id });
        }
        debug!(call = id, "call cancelled by the harness");
    }

    /// Records the harness seen in `initialize` and tells the broker if connected.
    pub fn set_harness(&self, harness: Harness, mode: Mode) {
        let mut state = self.lock();
        state.harness = Some((harness.clone(), mode));
        if let Some(conn) = &state.conn {
            let _ = conn.send(SidecarFrame::Harness { harness, mode });
        }
    }

    /// The harness and mode to put in `hello`, if known.
    pub fn harness(&self) -> Option<(Harness, Mode)> {
        self.lock().harness.clone()
    }

    /// Why calls fail now, or `None` while connected.
    pub fn down_reason(&self) -> Option<String> {
        let state = self.lock();
        match state.conn {
            Some(_) => None,
            None => Some(state.down_reason.clone()),
        }
    }

    /// How many calls wait for a result.
    pub fn in_flight(&self) -> usize {
        self.lock().pending.len()
    }

    // ----- driven by the reconnect task -----

    /// A connection reached `welcome`. `hello_harness` is what the hello carried, so a harness
    /// learned meanwhile is reported at once.
    pub fn attached(&self, conn: Outbox, welcome: &BrokerFrame, hello_harness: Option<&Harness>) {
        let mut state = self.lock();
        if let Some((harness, mode)) = &state.harness
            && hello_harness != Some(harness)
        {
            let _ = conn.send(SidecarFrame::Harness {
                harness: harness.clone(),
                mode: *mode,
            });
        }
        state.conn = Some(conn);
        self.view.send_modify(|v| *v = v.apply(welcome));
        drop(state);
        self.mark_settled();
        info!("connected to the broker");
    }

    /// A frame arrived on the live connection.
    pub fn apply(&self, frame: BrokerFrame) {
        match frame {
            BrokerFrame::Result { id, outcome } => {
                if !self.lock().pending.settle(id, outcome) {
                    debug!(call = id, "result for a call nobody waits for");
                }
            }
            BrokerFrame::Tools { .. } => self.view.send_modify(|v| *v = v.apply(&frame)),
            BrokerFrame::Error { code, message } => {
                warn!(
                    code,
                    message, "the broker reported an error on this session"
                );
            }
            BrokerFrame::Welcome { .. } => {
                warn!("unexpected second welcome; ignored");
            }
            // Frames of features this sidecar does not serve yet (messages) are not errors.
            other => debug!(frame = ?other, "broker frame ignored"),
        }
    }

    /// The connection ended (or never reached `welcome`): fail what was in flight.
    pub fn detached(&self, down_reason: &str) {
        let mut state = self.lock();
        let was_connected = state.conn.take().is_some();
        let failed = state.pending.fail_all("no_client", CONNECTION_LOST);
        state.down_reason = down_reason.to_owned();
        drop(state);
        if was_connected {
            self.view.send_modify(|v| *v = v.disconnected());
            warn!(failed, "lost the broker connection");
        }
        self.mark_settled();
    }

    fn mark_settled(&self) {
        self.settled
            .send_if_modified(|s| !std::mem::replace(s, true));
    }
}
