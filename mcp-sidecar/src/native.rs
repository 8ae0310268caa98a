//! Native mode: every client tool is an MCP tool, and changes are announced.
//!
//! Tools are shown as registered: name, description, `inputSchema`, `title` (the app's `title`,
//! else its `label`), `annotations` and `outputSchema`. The broker already coalesces tool-set changes to at most one `tools` frame a second
//! per session with the last state always sent, so the notifier only has to turn each change of
//! what this harness would see into one `notifications/tools/list_changed`. It compares with
//! what the harness was last shown (listed or notified), so a revision that changes nothing for
//! this agent, or a reconnect to the same tool set, makes no noise.

use std::sync::{Arc, Mutex};

use leo_protocol::ipc::AgentTool;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use rmcp::{Peer, RoleServer};
use tokio::sync::{Notify, watch};
use tracing::debug;

use crate::view::View;

/// An MCP tool for a client tool.
pub fn to_mcp_tool(tool: &AgentTool) -> Tool {
    let schema: JsonObject = match &tool.input_schema {
        serde_json::Value::Object(map) => map.clone(),
        // The broker only accepts object schemas; keep the harness safe if that ever changes.
        _ => {
            let mut map = JsonObject::new();
            map.insert("type".into(), "object".into());
            map
        }
    };
    let mut out = Tool::new(
        tool.name.clone(),
        tool.description.clone(),
        Arc::new(schema),
    );
    out.title = tool.title.clone();
    out.annotations = tool.annotations.map(|a| {
        let mut mcp = ToolAnnotations::default();
        mcp.read_only_hint = a.read_only_hint;
        mcp.destructive_hint = a.destructive_hint;
        mcp.idempotent_hint = a.idempotent_hint;
        mcp.open_world_hint = a.open_world_hint;
        mcp
    });
    if let Some(serde_json::Value::Object(map)) = &tool.output_schema {
        out.output_schema = Some(Arc::new(map.clone()));
    }
    out
}

/// What the harness was last shown, to decide whether a change is worth a notification.
///
/// Nothing is notified before the first `tools/list`: a client lists right after
/// `initialized` anyway. A listing wakes the notifier, which compares it with the view once
/// more, so a change that raced with the listing is still announced.
#[derive(Debug, Default)]
pub struct Shown {
    tools: Mutex<Option<Vec<AgentTool>>>,
    relisted: Notify,
}

impl Shown {
    /// Records a `tools/list` answer.
    pub fn listed(&self, tools: &[AgentTool]) {
        *self.lock() = Some(tools.to_vec());
        self.relisted.notify_one();
    }

    /// Records `tools` and says whether the harness should be told (it listed before, and
    /// they differ from what it was shown).
    pub fn changed_to(&self, tools: &[AgentTool]) -> bool {
        let mut shown = self.lock();
        match shown.as_deref() {
            None => false,
            Some(s) if s == tools => false,
            Some(_) => {
                *shown = Some(tools.to_vec());
                true
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<AgentTool>>> {
        self.tools.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sends `list_changed` whenever the visible tools change, until the client goes away.
/// `visible` computes what `tools/list` would answer for a view.
pub async fn notify_changes(
    peer: Peer<RoleServer>,
    mut views: watch::Receiver<Arc<View>>,
    shown: Arc<Shown>,
    visible: impl Fn(&View) -> Vec<AgentTool> + Send + 'static,
) {
    loop {
        tokio::select! {
            changed = views.changed() => if changed.is_err() { return },
            () = shown.relisted.notified() => {}
        }
        let tools = visible(&views.borrow_and_update());
        if !shown.changed_to(&tools) {
            continue;
        }
        debug!(
            tools = tools.len(),
            "tool list changed; notifying the harness"
        );
        if peer.notify_tool_list_changed().await.is_err() {
            debug!("the client is gone; notifier stops");
            return;
        }
    }
}

/// 2026-07-28: sends `list_changed` on one `subscriptions/listen` stream whenever the visible
/// tools differ from what they were when it opened or last notified, until it is cancelled.
pub async fn listen(
    context: &rmcp::service::SubscriptionContext,
    mut views: watch::Receiver<Arc<View>>,
    visible: impl Fn(&View) -> Vec<AgentTool>,
) {
    let mut last = visible(&views.borrow_and_update());
    loop {
        tokio::select! {
            () = context.cancelled() => return,
            changed = views.changed() => if changed.is_err() { return },
        }
        let tools = visible(&views.borrow_and_update());
        if tools == last {
            continue;
        }
        last = tools;
        debug!(
            tools = last.len(),
            "tool list changed; notifying the listen stream"
        );
        if context.sink().notify_tool_list_changed().await.is_err() {
            debug!("the listen stream is closed");
            return;
        }
    }
}
