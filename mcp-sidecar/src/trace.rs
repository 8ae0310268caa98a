//! One OpenTelemetry span per `tools/call`, as OpenTelemetry's MCP semantic conventions
//! describe a server span: `leo-mcp` is the MCP server the harness talks to.
//!
//! The span's parent is the harness's own trace context when its request carries
//! `_meta.traceparent`; its context goes to the broker in the `call` frame, so the broker's
//! span for the call is its child. Exporting starts as soon as an endpoint is known: the
//! standard `OTEL_EXPORTER_OTLP_*` variables at start, else the broker's
//! `telemetry.otlp_endpoint` from the `welcome` frame. Until then, and without either, the
//! global tracer is OpenTelemetry's no-op one and a span costs nothing.

use std::sync::OnceLock;

use leo_protocol::otel::{self, Endpoint, Exporter};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, global};
use rmcp::RoleServer;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;

static EXPORTER: OnceLock<Option<Exporter>> = OnceLock::new();
static SESSION: OnceLock<String> = OnceLock::new();

/// At start: exports at once when the standard variables name an endpoint.
pub fn start_from_env() {
    if let Some(endpoint) = otel::endpoint(None) {
        EXPORTER.get_or_init(|| Exporter::start(&endpoint, "leo-mcp"));
    }
}

/// The broker's endpoint (from `welcome`), used unless one is already exporting.
pub fn start_from_welcome(endpoint: Option<&str>) {
    let Some(base) = endpoint else { return };
    if EXPORTER.get().is_some() {
        return;
    }
    if let Some(endpoint @ Endpoint::Base(_)) = otel::endpoint(Some(base)) {
        EXPORTER.get_or_init(|| Exporter::start(&endpoint, "leo-mcp"));
    }
}

/// This process's leo session id, the span's `mcp.session.id`.
pub fn set_session(session: &str) {
    let _ = SESSION.set(session.to_owned());
}

/// Exports what is left, at exit.
pub async fn shutdown() {
    if let Some(Some(exporter)) = EXPORTER.get() {
        exporter.shutdown().await;
    }
}

/// The `tools/call {name}` server span for request `ctx`, as the context the call runs in.
pub fn start_call(name: &str, ctx: &RequestContext<RoleServer>) -> Context {
    let parent = otel::parent(ctx.meta.get_traceparent(), ctx.meta.get_tracestate());
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", "tools/call"),
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", name.to_owned()),
        KeyValue::new("jsonrpc.request.id", ctx.id.to_string()),
        KeyValue::new("network.transport", "pipe"),
    ];
    if let Some(session) = SESSION.get() {
        attributes.push(KeyValue::new("mcp.session.id", session.clone()));
    }
    if let Some(version) = ctx.protocol_version() {
        attributes.push(KeyValue::new("mcp.protocol.version", version.to_string()));
    }
    let tracer = global::tracer("leo-mcp");
    let span = tracer
        .span_builder(format!("tools/call {name}"))
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(&tracer, &parent);
    parent.with_span(span)
}

/// Ends the call's span with what the harness is answered: a result with `isError` is
/// `error.type` `tool_error`, as the conventions say.
pub fn end_call(cx: &Context, response: &CallToolResponse) {
    let span = cx.span();
    if let CallToolResponse::Complete(result) = response
        && result.is_error == Some(true)
    {
        span.set_attribute(KeyValue::new("error.type", "tool_error"));
        span.set_status(Status::error("tool_error"));
    }
    span.end();
}

/// The W3C trace context of the span the current call runs in, for its `call` frame.
pub fn current_traceparent() -> Option<String> {
    otel::traceparent(&Context::current())
}

#[cfg(test)]
mod tests {
    /// Outside a call (or with no exporter and no harness context) no context is sent.
    #[test]
    fn outside_a_call_no_trace_context_is_sent() {
        assert_eq!(super::current_traceparent(), None);
    }
}
