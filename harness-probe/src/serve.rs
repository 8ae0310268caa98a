//! `harness-probe serve`: the MCP server a harness launches.
//!
//! It declares `tools.listChanged: true` and three tools. A while (`--notify-delay-ms`, 1 s by
//! default) after it answered the client's first `tools/list`, it adds a fourth tool,
//! `probe_new_tool`, whose description asks the model to call it, and sends
//! `notifications/tools/list_changed`: on the session for clients that used
//! `initialize`, or on every `subscriptions/listen` stream that asked for tool changes for
//! 2026-07-28 clients. Everything the client does is appended to the record file (see
//! [`crate::record`]); [`crate::verdict`] turns that into yes/no/unknown.
//!
//! **Invariant:** stdout is the MCP protocol; logs go to stderr.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
    ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, ServerResult, SubscriptionFilter, Tool,
};
use rmcp::service::{
    NotificationContext, RequestContext, RoleServer, Service, ServiceExt, SubscriptionContext,
    SubscriptionSink,
};
use rmcp::{ErrorData as McpError, Peer, ServerHandler};
use serde_json::{Value, json};

use crate::record::Log;

/// The tool added after the first `tools/list`.
pub const NEW_TOOL: &str = "probe_new_tool";
/// Returns an image block.
pub const IMAGE_TOOL: &str = "probe_image";
/// Returns `isError: true`.
pub const ERROR_TOOL: &str = "probe_error";
/// Returns its text.
pub const ECHO_TOOL: &str = "probe_echo";

/// A 1×1 PNG.
const PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// After the notification, the probe writes a `waited` record at these offsets while the client
/// is still connected, so a verdict survives a client that kills the probe without a goodbye.
const WAIT_MARKS_MS: &[u64] = &[
    1_000, 2_000, 3_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000, 600_000,
];

/// Options of one `serve` process.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub out: PathBuf,
    /// Delay between answering the first `tools/list` and changing the list, so the
    /// notification cannot overtake the response.
    pub notify_delay: Duration,
}

/// Shared state of the probe.
#[derive(Default)]
struct State {
    /// Set once the list has changed (the notification was due).
    changed: bool,
    /// `t_ms` of the notification that reached the client, if any.
    notified_at: Option<u64>,
    /// The change happened but there was no channel to tell the client (a 2026-07-28 session
    /// without a subscription); the next subscription gets it.
    notify_pending: bool,
    tools_lists: u32,
    relisted: bool,
    new_tool_called: bool,
    client_recorded: bool,
    sinks: Vec<SubscriptionSink>,
}

/// The probe server.
#[derive(Clone)]
pub struct Probe {
    log: Arc<Log>,
    state: Arc<Mutex<State>>,
    notify_delay: Duration,
}

impl Probe {
    fn new(log: Arc<Log>, notify_delay: Duration) -> Probe {
        Probe {
            log,
            state: Arc::new(Mutex::new(State::default())),
            notify_delay,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                ECHO_TOOL,
                "Returns the text it is given.",
                schema(json!({"type": "object", "properties": {"text": {"type": "string"}}})),
            ),
            Tool::new(
                IMAGE_TOOL,
                "Returns a 1x1 PNG image. harness-probe uses it to see what the client does with an image result.",
                schema(json!({"type": "object", "properties": {}})),
            ),
            Tool::new(
                ERROR_TOOL,
                "Always fails with a tool error (isError: true). harness-probe uses it to see what the client does with a tool error.",
                schema(json!({"type": "object", "properties": {}})),
            ),
        ];
        if self.state().changed {
            tools.push(Tool::new(
                NEW_TOOL,
                "This tool was added after your first tools/list. Call it now, with no arguments: harness-probe counts the call as proof that your client picked up the changed tool list.",
                schema(json!({"type": "object", "properties": {}})),
            ));
        }
        tools
    }

    /// Changes the tool list and tells the client, once.
    fn schedule_change(&self, peer: Peer<RoleServer>) {
        let probe = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(probe.notify_delay).await;
            probe.state().changed = true;
            probe.log.write(
                "tools_changed",
                json!({"added": NEW_TOOL, "legacy_session": peer.peer_info().is_some()}),
            );
            if peer.peer_info().is_some() {
                let at = probe.sending();
                let result = peer.notify_tool_list_changed().await;
                probe.notified(
                    "session",
                    at,
                    result.as_ref().err().map(ToString::to_string),
                );
            } else {
                probe.notify_subscriptions().await;
            }
        });
    }

    /// Sends the notification on every subscription that accepted tool changes; with none,
    /// leaves it pending for the next one.
    async fn notify_subscriptions(&self) {
        let sinks = self.state().sinks.clone();
        if sinks.is_empty() {
            self.state().notify_pending = true;
            self.log.write(
                "list_changed_undeliverable",
                json!({"reason": "2026-07-28 session with no subscriptions/listen stream for toolsListChanged"}),
            );
            return;
        }
        let at = self.sending();
        let mut error = None;
        let mut delivered = false;
        for sink in sinks {
            match sink.notify_tool_list_changed().await {
                Ok(()) => delivered = true,
                Err(e) => error = Some(e.to_string()),
            }
        }
        self.state().notify_pending = false;
        self.notified("subscription", at, if delivered { None } else { error });
    }

    /// Marks the notification as going out now, before it is written: a fast client may answer
    /// it before the write returns. Returns the mark.
    fn sending(&self) -> u64 {
        let at = self.log.elapsed_ms();
        self.state().notified_at = Some(at);
        at
    }

    fn notified(&self, via: &str, at: u64, error: Option<String>) {
        let ok = error.is_none();
        self.log.write(
            "list_changed_sent",
            json!({"via": via, "ok": ok, "error": error, "sent_at_ms": at}),
        );
        if !ok {
            self.state().notified_at = None;
            return;
        }
        let log = self.log.clone();
        tokio::spawn(async move {
            let mut slept = 0;
            for mark in WAIT_MARKS_MS {
                tokio::time::sleep(Duration::from_millis(mark - slept)).await;
                slept = *mark;
                log.write("waited", json!({"after_notify_ms": mark}));
            }
        });
    }

    /// The milliseconds since the notification, if it was sent.
    fn since_notify(&self) -> Option<u64> {
        let at = self.state().notified_at?;
        Some(self.log.elapsed_ms().saturating_sub(at))
    }
}

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(serde_json::Map::new()),
    }
}

impl ServerHandler for Probe {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("harness-probe", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "harness-probe measures whether this client re-lists tools after notifications/tools/list_changed. \
             If a tool named probe_new_tool appears, call it.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let first = {
            let mut state = self.state();
            state.tools_lists += 1;
            state.tools_lists == 1
        };
        if let Some(after) = self.since_notify() {
            let first_relist = {
                let mut state = self.state();
                !std::mem::replace(&mut state.relisted, true)
            };
            if first_relist {
                self.log.write("relisted", json!({"after_ms": after}));
            }
        }
        let tools = self.tools();
        if first {
            self.schedule_change(context.peer.clone());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let result = match name {
            ECHO_TOOL => {
                let text = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            IMAGE_TOOL => CallToolResult::success(vec![
                ContentBlock::image(PIXEL_PNG, "image/png"),
                ContentBlock::text("probe_image: the block before this one is a 1x1 PNG"),
            ]),
            ERROR_TOOL => CallToolResult::error(vec![ContentBlock::text(
                "probe_error: this tool always fails; harness-probe records what the client does with a tool error",
            )]),
            NEW_TOOL if self.state().changed => {
                let after = self.since_notify();
                let first = !std::mem::replace(&mut self.state().new_tool_called, true);
                if first {
                    self.log
                        .write("new_tool_called", json!({"after_notify_ms": after}));
                }
                CallToolResult::success(vec![ContentBlock::text(
                    "probe_new_tool: thank you, the changed tool list reached you",
                )])
            }
            _ => {
                return Err(McpError::invalid_params(
                    format!("unknown tool {name}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&ServerHandler::get_info(self).capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let tools = context.accepted().tools_list_changed == Some(true);
        self.log.write(
            "subscription_open",
            json!({"tools_list_changed": tools, "requested": context.requested()}),
        );
        if tools {
            let pending = {
                let mut state = self.state();
                state.sinks.push(context.sink().clone());
                state.notify_pending
            };
            if pending {
                self.notify_subscriptions().await;
            }
        }
        context.cancelled().await;
        self.log.write("subscription_closed", json!({}));
        Ok(())
    }
}

/// Wraps the probe so that every request and notification is recorded before it is handled.
struct Recording {
    probe: Probe,
}

impl Recording {
    fn record_client(&self, context: &RequestContext<RoleServer>) {
        if self.probe.state().client_recorded {
            return;
        }
        if let Some(info) = context.client_info() {
            self.probe.state().client_recorded = true;
            self.probe.log.write(
                "client",
                json!({
                    "via": "request _meta",
                    "client": info,
                    "capabilities": context.client_capabilities(),
                    "protocol_version": context.protocol_version(),
                }),
            );
        }
    }
}

impl Service<RoleServer> for Recording {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let method = request.method().to_owned();
        let id = serde_json::to_value(&context.id).unwrap_or(Value::Null);
        let mut fields = json!({"method": method, "id": id});
        match &request {
            ClientRequest::InitializeRequest(init) => {
                self.probe.state().client_recorded = true;
                self.probe.log.write(
                    "client",
                    json!({
                        "via": "initialize",
                        "client": init.params.client_info,
                        "capabilities": init.params.capabilities,
                        "protocol_version": init.params.protocol_version,
                    }),
                );
            }
            ClientRequest::CallToolRequest(call) => {
                fields["tool"] = Value::String(call.params.name.to_string());
                fields["has_progress_token"] = Value::Bool(
                    call.params
                        .meta
                        .as_ref()
                        .and_then(|m| m.get("progressToken"))
                        .is_some(),
                );
            }
            _ => {}
        }
        self.probe.log.write("request", fields);
        self.record_client(&context);
        let result = Service::handle_request(&self.probe, request, context).await;
        let mut fields = json!({"method": method, "id": id, "ok": result.is_ok()});
        match &result {
            Ok(ServerResult::ListToolsResult(list)) => {
                let names: Vec<&str> = list.tools.iter().map(|t| t.name.as_ref()).collect();
                fields["tools"] = json!(names);
            }
            Ok(ServerResult::CallToolResult(call)) => {
                fields["is_error"] = json!(call.is_error.unwrap_or(false));
            }
            Err(e) => fields["error_code"] = json!(e.code.0),
            _ => {}
        }
        self.probe.log.write("response", fields);
        result
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), McpError> {
        let method = serde_json::to_value(&notification)
            .ok()
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| "?".to_owned());
        let mut fields = json!({"method": method});
        if let ClientNotification::CancelledNotification(cancel) = &notification {
            fields["request_id"] =
                serde_json::to_value(&cancel.params.request_id).unwrap_or(Value::Null);
        }
        self.probe.log.write("notification", fields);
        Service::handle_notification(&self.probe, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.probe)
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        ServerHandler::supported_protocol_versions(&self.probe)
    }
}

/// Runs the probe on stdin/stdout until the client goes away.
pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    let session = format!("{}-{}", std::process::id(), crate::record::unix_ms());
    let log = Arc::new(Log::open(&options.out, session)?);
    log.write(
        "session_start",
        json!({"pid": std::process::id(), "probe_version": env!("CARGO_PKG_VERSION")}),
    );
    let probe = Probe::new(log.clone(), options.notify_delay);
    let service = Recording { probe };
    let running = match service.serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        Err(e) => {
            log.write(
                "closed",
                json!({"reason": format!("handshake failed: {e}")}),
            );
            return Err(e.into());
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let reason = tokio::select! {
        quit = running.waiting() => match quit {
            Ok(reason) => format!("{reason:?}"),
            Err(e) => format!("join error: {e}"),
        },
        _ = term.recv() => "SIGTERM".to_owned(),
        _ = tokio::signal::ctrl_c() => "SIGINT".to_owned(),
    };
    log.write("closed", json!({"reason": reason}));
    Ok(())
}
