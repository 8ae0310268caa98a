//! OpenTelemetry traces (`telemetry.otlp_endpoint`): one span per call, from park to its end.
//!
//! A call's life crosses the core lock, an HTTP handler (the claim, the result) and maybe a
//! timer, so no `tracing` span covers it; its span lives here instead, keyed by request id,
//! opened in `park` and ended where history records the ending (`History::settled` and
//! `History::failed`, which every ending passes exactly once). Its parent is the sidecar's
//! `tools/call` span when the `call` frame carries `traceparent`, and its own context goes to
//! the app in `client_tool.request`.
//!
//! Without an endpoint nothing is started: `parked` returns at the first branch and the table
//! stays empty. Calls re-attached after a restart (see `core::restore`) have no span: the
//! span died with the process that opened it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use leo_protocol::otel::{self, Exporter};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, global};

use crate::requests::Call;

struct Live {
    exporter: Exporter,
    spans: Mutex<HashMap<String, Context>>,
}

static LIVE: OnceLock<Live> = OnceLock::new();

/// Starts exporting when `telemetry.otlp_endpoint` (or a standard `OTEL_EXPORTER_OTLP_*`
/// variable) names an endpoint. Called once, inside the runtime.
pub fn start(configured: Option<&str>) {
    let Some(endpoint) = otel::endpoint(configured) else {
        return;
    };
    if let Some(exporter) = Exporter::start(&endpoint, "leo-broker") {
        let _ = LIVE.set(Live {
            exporter,
            spans: Mutex::new(HashMap::new()),
        });
    }
}

/// Exports what is left, at shutdown; the spans of calls still open end now.
pub async fn shutdown() {
    if let Some(live) = LIVE.get() {
        let open: Vec<Context> = lock(live).drain().map(|(_, cx)| cx).collect();
        for cx in open {
            cx.span().end();
        }
        live.exporter.shutdown().await;
    }
}

fn lock(live: &Live) -> std::sync::MutexGuard<'_, HashMap<String, Context>> {
    live.spans.lock().unwrap_or_else(|p| p.into_inner())
}

/// `call` was parked: opens its span under `traceparent` (the sidecar's), and returns the
/// span's own context for `client_tool.request`.
pub fn parked(call: &Call, traceparent: Option<&str>) -> Option<String> {
    let live = LIVE.get()?;
    let id = call.id.as_str();
    let parent = otel::parent(traceparent, None);
    let attributes = vec![
        KeyValue::new("mcp.method.name", "tools/call"),
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", call.tool.clone()),
        KeyValue::new("mcp.session.id", call.session.clone()),
        KeyValue::new("network.transport", "unix"),
        KeyValue::new("leo.request.id", id.to_owned()),
        KeyValue::new("leo.agent", call.agent.clone()),
        KeyValue::new("leo.group", call.group.clone()),
    ];
    let tracer = global::tracer("leo-broker");
    let span = tracer
        .span_builder(format!("client_tool.request {}", call.tool))
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(&tracer, &parent);
    let cx = parent.with_span(span);
    let own = otel::traceparent(&cx);
    lock(live).insert(id.to_owned(), cx);
    own
}

/// An app claimed call `id`.
pub fn claimed(id: &str, client_id: &str) {
    let Some(live) = LIVE.get() else { return };
    if let Some(cx) = lock(live).get(id) {
        let span = cx.span();
        span.add_event(
            "claimed",
            vec![KeyValue::new("leo.client.id", client_id.to_owned())],
        );
        span.set_attribute(KeyValue::new("leo.client.id", client_id.to_owned()));
    }
}

/// How a call ended, for its span.
pub struct Ending<'a> {
    /// The history's outcome, as its serde name.
    pub outcome: leo_protocol::outcome::CallOutcome,
    /// The app's error code, or the broker's reason it ended the call.
    pub error: Option<&'a str>,
    /// The client that answered, when one did.
    pub by: Option<&'a str>,
}

/// Call `id` ended: its span gets the outcome and ends.
pub fn ended(id: &str, ending: Ending<'_>) {
    let Some(live) = LIVE.get() else { return };
    let Some(cx) = lock(live).remove(id) else {
        return;
    };
    let span = cx.span();
    span.set_attribute(KeyValue::new("leo.outcome", ending.outcome.as_str()));
    if let Some(by) = ending.by {
        span.set_attribute(KeyValue::new("leo.client.id", by.to_owned()));
    }
    if let Some(error) = ending.error {
        span.set_attribute(KeyValue::new("error.type", error.to_owned()));
        span.set_status(Status::error(error.to_owned()));
    }
    span.end();
}
