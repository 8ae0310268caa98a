//! A minimal OTLP/HTTP trace receiver: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest` (decoded by the maintained `opentelemetry-proto` types), on
//! 127.0.0.1 and an ephemeral port. It keeps every span it is sent, flattened for assertions.
//! It is the collector's side of the wire, not a Leo part, so the exporters under test speak
//! to it exactly as they would to a real collector.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;

use crate::WAIT;

/// One received span. Ids are lower-case hex; `parent_span_id` is empty for a root.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The resource's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// OTLP's `SpanKind` number (2 is SERVER).
    pub kind: i32,
    /// Attribute values as text (`"7"` for an int).
    pub attributes: BTreeMap<String, String>,
    pub events: Vec<String>,
    /// OTLP's status code (2 is ERROR).
    pub status: i32,
}

impl ReceivedSpan {
    /// The attribute `key`, if the span has it.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// SERVER, in OTLP's numbering.
pub const KIND_SERVER: i32 = 2;

/// The receiver, serving until dropped.
pub struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Listens on 127.0.0.1, port 0.
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let kept = kept.clone();
                let service = hyper::service::service_fn(move |req| handle(req, kept.clone()));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        Receiver { addr, spans, task }
    }

    /// The base URL, as `telemetry.otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` take it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (up to `WAIT`) until a received span matches `want`, and returns it.
    pub async fn wait_for(&self, what: &str, want: impl Fn(&ReceivedSpan) -> bool) -> ReceivedSpan {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| want(s)) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no span {what} within {WAIT:?}; received: {:#?}",
                self.spans()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    kept: Arc<Mutex<Vec<ReceivedSpan>>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/x-protobuf"),
        );
        Ok(r)
    };
    if req.method() != hyper::Method::POST || req.uri().path() != "/v1/traces" {
        return reply(StatusCode::NOT_FOUND, Vec::new());
    }
    let Ok(body) = req.into_body().collect().await else {
        return reply(StatusCode::BAD_REQUEST, Vec::new());
    };
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return reply(StatusCode::BAD_REQUEST, Vec::new());
    };
    kept.lock().unwrap().extend(flatten(export));
    reply(
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn flatten(export: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in export.resource_spans {
        let resource = rs.resource.map(|r| attributes(&r.attributes));
        let service = resource
            .and_then(|mut r| r.remove("service.name"))
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            out.push(ReceivedSpan {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                kind: span.kind,
                attributes: attributes(&span.attributes),
                events: span.events.into_iter().map(|e| e.name).collect(),
                status: span.status.map_or(0, |s| s.code),
            });
        }
    }
    out
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
