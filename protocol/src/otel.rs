//! OpenTelemetry traces over OTLP/HTTP (protobuf), the one exporter setup the broker and
//! `leo-mcp` share, and the W3C `traceparent` that carries a call's trace between them.
//!
//! Why this shape:
//! - **Off costs nothing.** Without an endpoint no provider is built; the global tracer stays
//!   OpenTelemetry's no-op one, so a span started on every call is a few branches.
//! - **Export never blocks or fails a call.** Spans go to the SDK's batch processor (its own
//!   thread, a bounded queue that drops when full); a dead or slow endpoint only logs through
//!   `tracing` (target `opentelemetry_sdk`).
//! - **One HTTP stack.** The export goes through hyper's HTTP/1 client, which the parts already
//!   have, on the process's own tokio runtime: no reqwest, no TLS stack, no gRPC, no HTTP/2.
//!   So only `http://` endpoints work; a collector on loopback forwards to anywhere else. One
//!   connection per export (one every few seconds at most) keeps it free of a pool.
//! - **Standard variables.** `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER=none`,
//!   `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//!   `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`,
//!   `OTEL_RESOURCE_ATTRIBUTES` and the `OTEL_BSP_*` batch settings are read by the SDK.

use std::collections::HashMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The W3C trace-context key, in `_meta`, in IPC frames and in `client_tool.request`.
pub const TRACEPARENT: &str = "traceparent";
/// Its companion, passed on when present.
pub const TRACESTATE: &str = "tracestate";

/// How long one export may take before it is abandoned (`OTEL_EXPORTER_OTLP_TIMEOUT` wins).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a clean exit waits for the last spans to leave.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// Where traces go, once resolved from the config and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A configured base URL (`http://127.0.0.1:4318`); spans are posted to `/v1/traces`
    /// under it.
    Base(String),
    /// Only the standard `OTEL_EXPORTER_OTLP_*ENDPOINT` variables; the SDK resolves them.
    Env,
}

/// The endpoint to export to, if any: `configured` (a base URL) first, then the standard
/// variables; nothing when the SDK is disabled by `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none`.
pub fn endpoint(configured: Option<&str>) -> Option<Endpoint> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return None;
    }
    if let Some(base) = configured.filter(|b| !b.trim().is_empty()) {
        return Some(Endpoint::Base(base.trim().to_owned()));
    }
    (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some())
    .then_some(Endpoint::Env)
}

/// The URL spans are posted to for base URL `base`.
pub fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// A running exporter; `shutdown` flushes it.
#[derive(Debug, Clone)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Builds the exporter for `endpoint` and makes it the global tracer provider, for a
    /// process named `service` (unless `OTEL_SERVICE_NAME` says otherwise). Must be called
    /// within a tokio runtime, which carries the exports. An endpoint the SDK refuses is
    /// logged and leaves tracing off.
    pub fn start(endpoint: &Endpoint, service: &str) -> Option<Exporter> {
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let client = OnRuntime { handle };
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_http_client(client);
        if let Endpoint::Base(base) = endpoint {
            builder = builder.with_endpoint(traces_url(base));
        }
        let exporter = match builder.build() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "OpenTelemetry: cannot build the OTLP exporter");
                return None;
            }
        };
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service.to_owned());
        }
        let resource = resource
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        tracing::info!(?endpoint, "OpenTelemetry: exporting traces over OTLP/HTTP");
        Some(Exporter { provider })
    }

    /// Exports what is still queued, waiting a few seconds at most, off the runtime's
    /// threads (the export itself runs on the runtime).
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        let done =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT));
        if let Ok(Err(e)) = done.await {
            tracing::debug!(error = %e, "OpenTelemetry: flush at exit");
        }
    }
}

/// The SDK's batch processor exports from a thread of its own, with no tokio runtime: each
/// request runs as a task on the process's runtime and is awaited from there.
#[derive(Debug)]
struct OnRuntime {
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let sent = self.handle.spawn(async move {
            match tokio::time::timeout(EXPORT_TIMEOUT, post(request)).await {
                Ok(answer) => answer,
                Err(_) => Err(format!("no answer within {EXPORT_TIMEOUT:?}").into()),
            }
        });
        sent.await?
    }
}

/// The largest collector answer read (an OTLP answer is a few bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One POST on a connection of its own, in origin form with a `Host` header.
async fn post(request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
    let (mut parts, body) = request.into_parts();
    let host = parts
        .uri
        .host()
        .ok_or("the endpoint has no host")?
        .to_owned();
    let port = parts.uri.port_u16().unwrap_or(80);
    let authority = parts.uri.authority().map(|a| a.as_str().to_owned());
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = path.parse()?;
    if let Some(authority) = authority {
        parts
            .headers
            .insert(hyper::header::HOST, authority.parse()?);
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let answer = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = answer.into_parts();
    let body = Limited::new(body, MAX_ANSWER_BYTES)
        .collect()
        .await?
        .to_bytes();
    Ok(Response::from_parts(parts, body))
}

/// The remote parent named by `traceparent` (and `tracestate`), if it is a valid W3C trace
/// context; otherwise the empty context (a new trace).
pub fn parent(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    let Some(tp) = traceparent else {
        return Context::new();
    };
    let mut carrier = HashMap::from([(TRACEPARENT.to_owned(), tp.to_owned())]);
    if let Some(ts) = tracestate {
        carrier.insert(TRACESTATE.to_owned(), ts.to_owned());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// The W3C `traceparent` of `cx`'s span, when it is a real (sampled or not) span.
pub fn traceparent(cx: &Context) -> Option<String> {
    traceparent_of(cx.span().span_context())
}

/// The W3C `traceparent` of a span context, when it is valid.
pub fn traceparent_of(sc: &SpanContext) -> Option<String> {
    if !sc.is_valid() {
        return None;
    }
    let cx = Context::new().with_remote_span_context(sc.clone());
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_junk_starts_a_new_trace() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = parent(Some(tp), None);
        assert_eq!(traceparent(&cx).as_deref(), Some(tp));
        for junk in [
            "",
            "00-zz-00-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            assert_eq!(traceparent(&parent(Some(junk), None)), None, "{junk:?}");
        }
        assert_eq!(traceparent(&parent(None, None)), None);
    }

    #[test]
    fn a_base_url_gets_the_traces_path_once() {
        assert_eq!(traces_url("http://h:4318"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
    }
}
