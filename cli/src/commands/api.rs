//! One request to the broker's HTTP API over `run/leo.sock`, with the operator token: the GETs
//! of `leo status` and `leo requests`, the POSTs of `leo cancel` and `leo tools approve`, and
//! `leo webhook`'s.
//!
//! The request goes through the SDK's HTTP client (`leo_app::http`), the one every Leo client
//! uses, on a runtime of its own for the call: the CLI's commands are plain blocking code.
//! Every answer is bounded in size and time, and a refusal carries the broker's own `error`
//! message. The token is read at each call, so a command started before the broker's first
//! run (`leo status --watch`) picks it up once it exists.
//!
//! With `--url` (or `LEO_URL`) the same requests go to a broker on another host, over its TCP
//! listener (HTTPS when it has `web.tls`, trusting what `leo_app::http::connector` trusts), with
//! the token given for it. That target is [`Remote`], set once by `main` for the commands that
//! speak this API, so every one of them, and each request of `leo status --watch`, goes to the
//! same place without each command carrying it.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use leo_app::Endpoint;
use leo_app::http::{Answer, Client, connector};
use leo_broker::home::Home;
use leo_protocol::envelope::{Failure, Success};
use serde::de::DeserializeOwned;

use super::{Unreachable, read_token};

/// The largest answer read; the pending list carries every call's arguments (1 MiB each at most).
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
/// How long the broker may stay silent while answering.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request gave no data.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    #[error("the broker did not answer {route} within {} s", TIMEOUT.as_secs())]
    Timeout { route: String },
    #[error("cannot talk to the broker on {}", socket.display())]
    Io {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the broker answered {route} with {status}: {message}")]
    Refused {
        route: String,
        status: u16,
        message: String,
    },
    #[error("the broker's answer to {route} is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge { route: String },
    #[error("the broker's answer to {route} is malformed: {reason}")]
    Malformed { route: String, reason: String },
}

/// A broker on another host: its URL, the token presented to it, and the CA file trusted for
/// it (`None`: the one `LEO_CA_FILE` names, if any).
#[derive(Debug, Clone)]
pub struct Remote {
    pub endpoint: Endpoint,
    pub token: String,
    pub ca: Option<PathBuf>,
}

/// The `--url` target of this run, if any.
static REMOTE: OnceLock<Remote> = OnceLock::new();

/// Sends every request of this run to `remote` instead of `run/leo.sock`.
pub fn set_remote(remote: Remote) {
    let _ = REMOTE.set(remote);
}

/// The broker's HTTP API as the operator sees it.
#[derive(Debug, Clone)]
pub struct Api {
    socket: PathBuf,
    token: PathBuf,
    remote: Option<Remote>,
}

impl Api {
    /// The API of the broker on `home`, or of the `--url` broker when one was given.
    pub fn new(home: &Home) -> Api {
        Api {
            socket: home.api_socket(),
            token: home.operator_token(),
            remote: REMOTE.get().cloned(),
        }
    }

    /// `GET route`, answered `{ok: true, data}`: the data as `T`.
    pub fn get<T: DeserializeOwned>(&self, route: &str) -> Result<T, GetError> {
        self.send("GET", route, Vec::new())
    }

    /// `POST route` with an empty JSON object, answered `{ok: true, data}`: the data as `T`.
    pub fn post<T: DeserializeOwned>(&self, route: &str) -> Result<T, GetError> {
        self.send("POST", route, b"{}".to_vec())
    }

    /// `POST route` with `body` (JSON), answered `{ok: true, data}`: the data as `T`.
    pub fn post_body<T: DeserializeOwned>(
        &self,
        route: &str,
        body: Vec<u8>,
    ) -> Result<T, GetError> {
        self.send("POST", route, body)
    }

    /// `DELETE route`, answered `{ok: true, data}`: the data as `T`.
    pub fn delete<T: DeserializeOwned>(&self, route: &str) -> Result<T, GetError> {
        self.send("DELETE", route, Vec::new())
    }

    fn send<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<T, GetError> {
        let route = format!("{method} {path}");
        let body = self.raw(method, path, &route, body)?;
        serde_json::from_slice::<Success<T>>(&body)
            .map(|s| s.data)
            .map_err(|e| GetError::Malformed {
                route,
                reason: e.to_string(),
            })
    }

    /// `route` is `METHOD path`, for messages.
    fn raw(
        &self,
        method: &str,
        path: &str,
        route: &str,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, GetError> {
        let (endpoint, token) = match &self.remote {
            Some(r) => (r.endpoint.clone(), r.token.clone()),
            None => (
                Endpoint::Unix(self.socket.clone()),
                read_token(&self.token, "operator")?,
            ),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| GetError::Io {
                socket: self.socket.clone(),
                source,
            })?;
        let tls = match &self.remote {
            Some(r) if matches!(endpoint, Endpoint::Https { .. }) => {
                Some(connector(r.ca.as_deref()).map_err(|e| self.failed(route, e))?)
            }
            _ => None,
        };
        let client = Client::with_tls(endpoint, &token, tls)
            .map_err(|e| self.failed(route, e))?
            .with_timeout(TIMEOUT)
            .with_max_body(MAX_RESPONSE_BYTES as usize);
        let answer = runtime
            .block_on(async {
                match method {
                    "GET" => client.get(path).await,
                    "DELETE" => client.delete(path).await,
                    _ => client.post_json(path, body).await,
                }
            })
            .map_err(|e| self.failed(route, e))?;
        if answer.status() == 200 {
            return Ok(answer.body().to_vec());
        }
        Err(refused(route, &answer))
    }

    /// What a request that got no answer tells the operator.
    fn failed(&self, route: &str, e: leo_app::Error) -> GetError {
        match e {
            leo_app::Error::Connect { endpoint, source } if self.remote.is_some() => {
                Unreachable::Remote { endpoint, source }.into()
            }
            leo_app::Error::Connect { source, .. } => {
                Unreachable::connecting(&self.socket, source).into()
            }
            // The `--url` client could not be set up (a CA file that cannot be read): that
            // broker cannot be reached, and the local socket has nothing to do with it.
            leo_app::Error::Config(message) if let Some(remote) = &self.remote => {
                Unreachable::Remote {
                    endpoint: remote.endpoint.to_string(),
                    source: std::io::Error::other(message),
                }
                .into()
            }
            leo_app::Error::Timeout(_) => GetError::Timeout {
                route: route.to_owned(),
            },
            leo_app::Error::TooLarge(_) => GetError::TooLarge {
                route: route.to_owned(),
            },
            other => GetError::Io {
                socket: self.socket.clone(),
                source: std::io::Error::other(leo_protocol::chain::error_chain(&other)),
            },
        }
    }
}

/// A refusal: the envelope names what went wrong; a body that is not one is shown as text.
fn refused(route: &str, answer: &Answer) -> GetError {
    let body = answer.body();
    let message = match serde_json::from_slice::<Failure>(body) {
        Ok(f) => format!("{}: {}", f.code.as_str(), f.error),
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    };
    GetError::Refused {
        route: route.to_owned(),
        status: answer.status(),
        message,
    }
}
