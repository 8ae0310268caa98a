//! `/mcp`: this very MCP server over Streamable HTTP, run inside the broker.
//!
//! A harness that cannot launch `leo-mcp` next to the broker (it runs in a container, on
//! another host) speaks MCP over HTTP to the broker's `/mcp` route instead. The broker checks
//! who calls (Host, Origin, the agent's token) and hands the request here, with the agent it
//! is from (`Caller`); the `leo` binary makes the connection (`leo-cli`'s `broker` module), so
//! that neither library depends on the other.
//!
//! What the agent sees is not a second implementation: each MCP session is a `Sidecar` (the
//! `server` of stdio, with the same `link`, `reconnect`, modes, calls, questions, tasks,
//! shaping and sanitizer), and its broker connection is a sidecar session that reaches the
//! broker's door through an in-process pipe (`dial::Dial::InProcess`), says `hello` with the
//! caller's token and `transport: http`, and so appears in status, history and audit like any
//! other. Only the MCP transport differs: rmcp's Streamable HTTP server in place of stdio.
//!
//! **Decision: the broker session ends with the MCP session.** rmcp holds the session's server
//! while the session lives; when it lets go (the client's `DELETE`, five minutes without a
//! message, the broker stopping), it first cancels the session's requests, which `call` turns
//! into `cancel` frames (`cancelled_by_agent`: the client ended them), then the last clone of
//! the `Sidecar` drops its `ended` sender, and the reconnect task closes the broker connection,
//! which ends anything left as `agent_gone`, as when a harness closes `leo-mcp`'s stdin.
//!
//! **Decision: every refusal is JSON-RPC.** A body is read whole (at most the broker's body
//! limit) and checked to be one JSON-RPC message before rmcp sees it, so that malformed JSON
//! is `400` with JSON-RPC's parse error and the place at fault, not rmcp's `415`; and rmcp's
//! own plain-text refusals (an unknown session, a missing header) keep their status and get
//! the JSON-RPC error body of the broker's refusals (`leo_protocol::jsonrpc`).
//!
//! **Decision: no resumption.** A call's stream that drops cancels the call, so the streams
//! carry no event ids or `retry:` that would promise to resume it, and a new standalone
//! stream carries only what no earlier one delivered (`streams`).
//!
//! **Decision: a session belongs to the agent that opened it.** A request naming an
//! `Mcp-Session-Id` that another agent's token opened is answered `404` as an unknown session
//! would be, so one agent cannot act in another's session even if it learns its id.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use leo_protocol::ErrorCode;
use leo_protocol::ipc::Transport;
use leo_protocol::jsonrpc::{ErrorResponse, INVALID_REQUEST, PARSE_ERROR};
use leo_protocol::names::AgentName;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, RequestId};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::cli::{ModeChoice, Settings};
use crate::dial::{Dial, Pipe};
use crate::home::Home;
use crate::link::BrokerLink;
use crate::server::Sidecar;
use crate::streams::Sessions;

/// The header that names an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// A response's body.
pub type Body = BoxBody<Bytes, Infallible>;

/// Who a request is from, as the broker checked it.
#[derive(Clone)]
pub struct Caller {
    pub agent: AgentName,
    /// The token the request presented; the session's `hello` presents it again.
    pub token: String,
    /// What the broker gave a request that may open a session (its place in the broker's
    /// limits): a session it opens keeps it until the session ends.
    pub hold: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
}

tokio::task_local! {
    /// The caller of the request being handled, for the session factory rmcp calls while it
    /// handles an `initialize` (it takes no arguments).
    static CALLER: Caller;
}

/// `/mcp`'s MCP server; cheap to clone.
#[derive(Clone)]
pub struct Http {
    service: StreamableHttpService<Sidecar, Sessions<LocalSessionManager>>,
    /// Which agent opened each session.
    owners: Arc<Mutex<HashMap<String, AgentName>>>,
    max_body: usize,
}

impl Http {
    /// The server for the broker at `home`, whose sessions open through `pipe`, refusing
    /// bodies over `max_body` bytes and ending every session when `stop` is cancelled.
    pub fn new(home: PathBuf, pipe: Pipe, stop: CancellationToken, max_body: usize) -> Http {
        let base = Settings {
            // Each session's own agent replaces it.
            agent: AgentName::parse("mcp").unwrap_or_else(|_| unreachable!("a valid name")),
            mode: ModeChoice::Auto,
            home: Home::new(home),
            progress_every: crate::cli::progress_from_env(),
            channels: false,
            token_file: None,
            discover: true,
            broker: Some(Dial::InProcess(pipe)),
            token: None,
            transport: Transport::Http,
        };
        let config = StreamableHttpServerConfig::default()
            // The broker checked Host and Origin, against its own allowed names.
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_max_request_body_bytes(max_body)
            // No resumption is offered (`streams`): no priming events announce it.
            .with_sse_retry(None)
            .with_cancellation_token(stop);
        let mut local = LocalSessionManager::default();
        local.session_config.sse_retry = None;
        let service = StreamableHttpService::new(
            move || {
                let caller = CALLER
                    .try_with(Caller::clone)
                    .map_err(|_| std::io::Error::other("an MCP session opened without a caller"))?;
                Ok(session(&base, caller))
            },
            Arc::new(Sessions::new(local)),
            config,
        );
        Http {
            service,
            owners: Arc::default(),
            max_body,
        }
    }

    /// Serves one request of `caller`.
    pub async fn serve<B>(&self, caller: Caller, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (request, call) = match self.read(request).await {
            Ok(read) => read,
            Err(refused) => return refused.response(),
        };
        let named = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(id) = &named
            && self.owner(id).is_some_and(|owner| owner != caller.agent)
        {
            debug!(agent = %caller.agent, "a session of another agent was named");
            return not_found();
        }
        let delete = request.method() == Method::DELETE;
        let agent = caller.agent.clone();
        let version = request
            .headers()
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let response = CALLER.scope(caller, self.service.handle(request)).await;
        let mut response = as_json_rpc(response).await;
        if delete && response.status() == StatusCode::ACCEPTED {
            // rmcp says 202; clients (the Python SDK) take anything but 200 and 204 for a
            // termination that failed.
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        if let (Some(session), Some(call)) = (&named, call)
            && response.status() == StatusCode::OK
        {
            response = self.cancel_if_abandoned(response, session.clone(), version, call);
        }
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            owners.insert(id.to_owned(), agent);
        }
        if let Some(id) = named
            && (response.status() == StatusCode::NOT_FOUND
                || delete && response.status().is_success())
        {
            owners.remove(&id);
        }
        response
    }

    /// The request with its body read (at most `max_body` bytes), checked to be one JSON-RPC
    /// message when it is a `POST`.
    /// `response`, the stream of call `call` in `session`, cancelling the call if the stream
    /// is dropped before its end (see `abandon`).
    fn cancel_if_abandoned(
        &self,
        response: Response<Body>,
        session: String,
        version: Option<String>,
        call: RequestId,
    ) -> Response<Body> {
        let service = self.service.clone();
        response.map(|body| {
            let watched = crate::abandon::Watched::new(body, move || {
                debug!(
                    session,
                    ?call,
                    "a call's stream was dropped; cancelling the call"
                );
                let cancel = crate::abandon::cancel(&session, version.as_deref(), &call);
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let answer = service.handle(cancel).await;
                        debug!(status = %answer.status(), "the call's cancel was handed over");
                    });
                }
            });
            watched.boxed()
        })
    }

    /// The request with its body read (at most `max_body` bytes), checked to be one JSON-RPC
    /// message when it is a `POST`, and the id of the `tools/call` it is, if it is one.
    async fn read<B>(
        &self,
        request: Request<B>,
    ) -> Result<(Request<Full<Bytes>>, Option<RequestId>), Refused>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let bytes = match Limited::new(body, self.max_body).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => {
                let message = format!("the body is larger than {} bytes", self.max_body);
                return Err(Refused(INVALID_REQUEST, ErrorCode::BodyTooLarge, message));
            }
            Err(e) => {
                let message = format!("the body could not be read: {e}");
                return Err(Refused(
                    INVALID_REQUEST,
                    ErrorCode::InvalidParameter,
                    message,
                ));
            }
        };
        let call = match parts.method {
            Method::POST => check_message(&bytes)?,
            _ => None,
        };
        Ok((Request::from_parts(parts, Full::new(bytes)), call))
    }

    fn owner(&self, id: &str) -> Option<AgentName> {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.get(id).cloned()
    }
}

/// A new MCP session of `caller`: a `Sidecar` with its own link, whose reconnect task opens
/// its broker connection through the pipe, until rmcp drops the server.
fn session(base: &Settings, caller: Caller) -> Sidecar {
    let settings = Settings {
        agent: caller.agent,
        token: Some(caller.token),
        ..base.clone()
    };
    let link = BrokerLink::new();
    let id = crate::session::new_session_id(&settings.agent);
    let (ended, gone) = watch::channel(false);
    let running = crate::reconnect::run(settings.clone(), id, link.clone(), gone);
    let hold = caller.hold;
    tokio::spawn(async move {
        running.await;
        drop(hold);
    });
    Sidecar::new(settings, link).ending_with(ended)
}

/// A refusal made here: the JSON-RPC error code, Leo's code, the message.
struct Refused(i64, ErrorCode, String);

impl Refused {
    fn response(self) -> Response<Body> {
        refusal(self.0, self.1, &self.2)
    }
}

/// A POST's body must be JSON, and one JSON-RPC message; the id of a `tools/call`.
fn check_message(bytes: &[u8]) -> Result<Option<RequestId>, Refused> {
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        let message = format!("the body is not JSON: {e}");
        return Err(Refused(PARSE_ERROR, ErrorCode::InvalidParameter, message));
    }
    match leo_protocol::envelope::parse_json::<ClientJsonRpcMessage>(bytes) {
        Ok(ClientJsonRpcMessage::Request(r))
            if matches!(r.request, ClientRequest::CallToolRequest(_)) =>
        {
            Ok(Some(r.id))
        }
        Ok(_) => Ok(None),
        Err(e) => {
            let message = format!(
                "the body is not one JSON-RPC request, notification or response ({})",
                e.message
            );
            Err(Refused(
                INVALID_REQUEST,
                ErrorCode::InvalidParameter,
                message,
            ))
        }
    }
}

/// rmcp's plain-text refusals, with the JSON-RPC error body of every other refusal; any other
/// response as it is.
async fn as_json_rpc(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let json = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if status.is_success() || json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match body.collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(never) => match never {},
    };
    let code = match status {
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::BodyTooLarge,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        s if s.is_client_error() => ErrorCode::InvalidParameter,
        _ => ErrorCode::Internal,
    };
    let mut refused = refusal(INVALID_REQUEST, code, &text);
    *refused.status_mut() = status;
    for (name, value) in &parts.headers {
        if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            refused.headers_mut().insert(name, value.clone());
        }
    }
    refused
}

/// A JSON-RPC error body (`leo_protocol::jsonrpc`) with the status of `code`.
fn refusal(rpc: i64, code: ErrorCode, message: &str) -> Response<Body> {
    let body = serde_json::to_vec(&ErrorResponse::new(rpc, code, message)).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() =
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a session that is not the caller's: an unknown session's, as rmcp words it.
fn not_found() -> Response<Body> {
    refusal(
        INVALID_REQUEST,
        ErrorCode::NotFound,
        "Not Found: Session not found",
    )
}
