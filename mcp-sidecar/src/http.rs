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
use leo_protocol::ipc::Transport;
use leo_protocol::names::AgentName;
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

/// The header that names an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// A response's body.
pub type Body = BoxBody<Bytes, Infallible>;

/// Who a request is from, as the broker checked it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub agent: AgentName,
    /// The token the request presented; the session's `hello` presents it again.
    pub token: String,
}

tokio::task_local! {
    /// The caller of the request being handled, for the session factory rmcp calls while it
    /// handles an `initialize` (it takes no arguments).
    static CALLER: Caller;
}

/// `/mcp`'s MCP server; cheap to clone.
#[derive(Clone)]
pub struct Http {
    service: StreamableHttpService<Sidecar, LocalSessionManager>,
    /// Which agent opened each session.
    owners: Arc<Mutex<HashMap<String, AgentName>>>,
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
            .with_cancellation_token(stop);
        let service = StreamableHttpService::new(
            move || {
                let caller = CALLER
                    .try_with(Caller::clone)
                    .map_err(|_| std::io::Error::other("an MCP session opened without a caller"))?;
                Ok(session(&base, caller))
            },
            Arc::new(LocalSessionManager::default()),
            config,
        );
        Http {
            service,
            owners: Arc::default(),
        }
    }

    /// Serves one request of `caller`.
    pub async fn serve<B>(&self, caller: Caller, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
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
        let response = CALLER.scope(caller, self.service.handle(request)).await;
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
    tokio::spawn(crate::reconnect::run(
        settings.clone(),
        id,
        link.clone(),
        gone,
    ));
    Sidecar::new(settings, link).ending_with(ended)
}

/// rmcp's answer to an unknown session, word for word.
fn not_found() -> Response<Body> {
    use http_body_util::{BodyExt, Full};
    let mut response =
        Response::new(Full::new(Bytes::from("Not Found: Session not found")).boxed());
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}
