//! `harness-probe rmcp-client`: rmcp's own client as a reference client.
//!
//! rmcp's `ClientHandler::on_tool_list_changed` does nothing by default: the SDK delivers the
//! notification and the application decides. In `relist` mode this client lists tools again when
//! the notification arrives (and calls the new tool); in `ignore` mode it stays connected and
//! does nothing, which must read as `no`. It launches `$HARNESS_PROBE_BIN serve` itself, like
//! the TypeScript and Python clients in `harness-probe/clients/`, so `harness-probe run` drives
//! it like any other client.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation,
};
use rmcp::service::{NotificationContext, RoleClient, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use tokio::sync::Notify;

use crate::record::write_side;
use crate::serve::{ERROR_TOOL, IMAGE_TOOL, NEW_TOOL};

/// The rmcp release this crate is built against (see `Cargo.lock`).
pub const RMCP_VERSION: &str = "3.11";

/// What the client does with `notifications/tools/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientMode {
    Relist,
    Ignore,
}

struct Handler {
    name: String,
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(self.name.clone(), RMCP_VERSION),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

fn content_types(result: &CallToolResult) -> Vec<&'static str> {
    result
        .content
        .iter()
        .map(|c| match c {
            ContentBlock::Text(_) => "text",
            ContentBlock::Image(_) => "image",
            ContentBlock::Audio(_) => "audio",
            ContentBlock::Resource(_) => "resource",
            ContentBlock::ResourceLink(_) => "resource_link",
            _ => "other",
        })
        .collect()
}

/// Runs the reference client against `$HARNESS_PROBE_BIN serve`.
pub async fn run(mode: ClientMode) -> anyhow::Result<()> {
    let bin = match std::env::var_os("HARNESS_PROBE_BIN") {
        Some(b) => PathBuf::from(b),
        None => std::env::current_exe()?,
    };
    let out = std::env::var_os("HARNESS_PROBE_OUT").map(PathBuf::from);
    let grace_ms: u64 = std::env::var("HARNESS_PROBE_GRACE_MS")
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(5_000);
    let name = match mode {
        ClientMode::Relist => "harness-probe-rmcp-client-relist",
        ClientMode::Ignore => "harness-probe-rmcp-client-ignore",
    };
    let side = |event: &str, fields: serde_json::Value| {
        if let Some(out) = &out {
            let mut fields = fields;
            fields["client_name"] = json!(name);
            write_side(out, "client", event, fields);
        }
    };
    let changed = Arc::new(Notify::new());
    let handler = Handler {
        name: name.to_owned(),
        changed: changed.clone(),
    };
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg("serve");
    let client = handler.serve(TokioChildProcess::new(cmd)?).await?;
    let tools = client.list_all_tools().await?;
    tracing::info!(count = tools.len(), "listed tools");
    for tool in [IMAGE_TOOL, ERROR_TOOL] {
        match client.call_tool(CallToolRequestParams::new(tool)).await {
            Ok(result) => side(
                "client_saw",
                json!({"tool": tool, "content_types": content_types(&result),
                       "is_error": result.is_error.unwrap_or(false),
                       "note": "rmcp returns the CallToolResult to the application as sent"}),
            ),
            Err(e) => side(
                "client_saw",
                json!({"tool": tool, "error": e.to_string(), "note": "rmcp returned an error, not a result"}),
            ),
        }
    }
    let notified = tokio::time::timeout(Duration::from_secs(20), changed.notified())
        .await
        .is_ok();
    side(
        "client_note",
        json!({"text": if notified {
            "rmcp delivered notifications/tools/list_changed to ClientHandler::on_tool_list_changed; the SDK does not re-list by itself"
        } else {
            "no notifications/tools/list_changed within 20 s"
        }}),
    );
    match mode {
        ClientMode::Relist if notified => {
            let tools = client.list_all_tools().await?;
            side(
                "client_note",
                json!({"text": "the script listed tools again on the notification"}),
            );
            if tools.iter().any(|t| t.name == NEW_TOOL) {
                client
                    .call_tool(CallToolRequestParams::new(NEW_TOOL))
                    .await?;
            }
        }
        _ => tokio::time::sleep(Duration::from_millis(grace_ms + 2_000)).await,
    }
    client.cancel().await?;
    Ok(())
}
