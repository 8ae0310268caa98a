//! One request to the broker's HTTP API over `run/leo.sock`, with the operator token: the GETs
//! of `leo status` and `leo requests`, and the POST of `leo cancel`.
//!
//! The request is written by hand as HTTP/1.0 rather than through an HTTP client: the CLI
//! makes a handful of requests, and an HTTP/1.0 request makes the server answer with a plain body
//! that ends when the connection does (no chunked encoding, no keep-alive), so reading it is a
//! bounded `read_to_end`. Every answer is bounded in size and time, and a refusal carries the
//! broker's own `error` message. The token is read at each call, so a command started before
//! the broker's first run (`leo status --watch`) picks it up once it exists.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

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

/// The broker's HTTP API as the operator sees it.
#[derive(Debug, Clone)]
pub struct Api {
    socket: PathBuf,
    token: PathBuf,
}

impl Api {
    pub fn new(home: &Home) -> Api {
        Api {
            socket: home.api_socket(),
            token: home.operator_token(),
        }
    }

    /// `GET route`, answered `{ok: true, data}`: the data as `T`.
    pub fn get<T: DeserializeOwned>(&self, route: &str) -> Result<T, GetError> {
        self.send("GET", route)
    }

    /// `POST route` with an empty JSON object, answered `{ok: true, data}`: the data as `T`.
    pub fn post<T: DeserializeOwned>(&self, route: &str) -> Result<T, GetError> {
        self.send("POST", route)
    }

    fn send<T: DeserializeOwned>(&self, method: &str, path: &str) -> Result<T, GetError> {
        let route = format!("{method} {path}");
        let body = self.raw(method, path, &route)?;
        serde_json::from_slice::<Success<T>>(&body)
            .map(|s| s.data)
            .map_err(|e| GetError::Malformed {
                route,
                reason: e.to_string(),
            })
    }

    /// `route` is `METHOD path`, for messages.
    fn raw(&self, method: &str, path: &str, route: &str) -> Result<Vec<u8>, GetError> {
        let token = read_token(&self.token, "operator")?;
        let io = |source: std::io::Error| match source.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => GetError::Timeout {
                route: route.to_owned(),
            },
            _ => GetError::Io {
                socket: self.socket.clone(),
                source,
            },
        };
        let mut stream = UnixStream::connect(&self.socket)
            .map_err(|source| Unreachable::connecting(&self.socket, source))?;
        stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let body = if method == "GET" { "" } else { "{}" };
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .map_err(io)?;
        let mut raw = Vec::new();
        stream
            .take(MAX_RESPONSE_BYTES + 1)
            .read_to_end(&mut raw)
            .map_err(io)?;
        if raw.len() as u64 > MAX_RESPONSE_BYTES {
            return Err(GetError::TooLarge {
                route: route.to_owned(),
            });
        }
        let (status, body) = split_response(&raw).map_err(|reason| GetError::Malformed {
            route: route.to_owned(),
            reason: reason.to_owned(),
        })?;
        if status == 200 {
            return Ok(body.to_vec());
        }
        // The envelope names what went wrong; a body that is not one is shown as text.
        let message = match serde_json::from_slice::<Failure>(body) {
            Ok(f) => format!("{}: {}", f.code.as_str(), f.error),
            Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
        };
        Err(GetError::Refused {
            route: route.to_owned(),
            status,
            message,
        })
    }
}

/// The status code and the body of a whole HTTP/1.x response.
fn split_response(raw: &[u8]) -> Result<(u16, &[u8]), &'static str> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or("no HTTP status line")?;
    let mut body = &raw[end + 4..];
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") && !value.eq_ignore_ascii_case("identity")
        {
            return Err("unexpected transfer encoding");
        }
        if name.eq_ignore_ascii_case("content-length") {
            let len: usize = value.parse().map_err(|_| "bad content-length")?;
            body = body
                .get(..len)
                .ok_or("body shorter than its content-length")?;
        }
    }
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::split_response;

    #[test]
    fn splits_status_and_body() {
        let raw = b"HTTP/1.0 404 Not Found\r\ncontent-length: 2\r\n\r\n{}trailing";
        assert_eq!(split_response(raw), Ok((404, &b"{}"[..])));
        let raw = b"HTTP/1.1 200 OK\r\n\r\nbody";
        assert_eq!(split_response(raw), Ok((200, &b"body"[..])));
        for bad in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"SPDY 200\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        ] {
            assert!(
                split_response(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
