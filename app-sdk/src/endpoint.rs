//! Where the broker is and which token to present.
//!
//! The default is what a local app wants with no configuration at all: the unix socket
//! `$LEO_HOME/run/leo.sock` (`LEO_HOME` defaults to `~/.leo`) and the operator token in
//! `$LEO_HOME/state/operator.token`. The token is read at every connection attempt, not once,
//! so an app started before the broker's very first start (which creates the token) connects
//! as soon as the broker is up.

use std::fmt;
use std::path::{Path, PathBuf};

use leo_protocol::home::Home;

use crate::error::{Error, Result};

/// `$LEO_HOME`, else `~/.leo`.
pub fn default_home() -> PathBuf {
    Home::from_env().root
}

/// How to reach the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// The broker's unix socket (`run/leo.sock`).
    Unix(PathBuf),
    /// The broker's TCP listener. `authority` is `host:port`, sent as the Host header, which
    /// the broker checks before anything else.
    Tcp { authority: String },
    /// The broker's TCP listener with `web.tls`: HTTPS, the certificate checked for the host
    /// of `authority` (see `leo_app::http::connector` for the CA it trusts).
    Https { authority: String },
}

impl Endpoint {
    /// `$home/run/leo.sock`.
    pub fn in_home(home: &Path) -> Endpoint {
        Endpoint::Unix(Home::new(home).api_socket())
    }

    /// Parses `http://host:port` or `https://host:port` (a trailing `/` is allowed; the port is
    /// required, because the broker's Host check wants it).
    pub fn from_url(url: &str) -> Result<Endpoint> {
        let bad = |why: &str| Error::Config(format!("invalid broker URL {url:?}: {why}"));
        let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            (None, None) => return Err(bad("expected http:// or https://")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
            return Err(bad("expected http://host:port"));
        }
        let need_port = || bad("a port is required, such as http://127.0.0.1:8370");
        let (host, port) = authority.rsplit_once(':').ok_or_else(need_port)?;
        let bracketed = host.starts_with('[') && host.ends_with(']');
        if host.is_empty() || (host.contains(':') && !bracketed) {
            return Err(bad("expected http://host:port"));
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(need_port());
        }
        let authority = authority.to_owned();
        Ok(if tls {
            Endpoint::Https { authority }
        } else {
            Endpoint::Tcp { authority }
        })
    }

    /// The Host header for this endpoint.
    pub(crate) fn host(&self) -> &str {
        match self {
            Endpoint::Unix(_) => "localhost",
            Endpoint::Tcp { authority } | Endpoint::Https { authority } => authority,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            Endpoint::Tcp { authority } => write!(f, "http://{authority}"),
            Endpoint::Https { authority } => write!(f, "https://{authority}"),
        }
    }
}

/// Which token to present.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenSource {
    /// This token.
    Value(String),
    /// The token in this file (trimmed).
    File(PathBuf),
}

impl TokenSource {
    /// The operator token of `home`.
    pub fn operator(home: &Path) -> TokenSource {
        TokenSource::File(Home::new(home).operator_token())
    }

    /// The token of paired device `name` in `home` (`leo device pair NAME`).
    pub fn device(home: &Path, name: &str) -> TokenSource {
        TokenSource::File(Home::new(home).device_token(name))
    }

    /// Reads the token now.
    pub(crate) fn read(&self) -> Result<String> {
        match self {
            TokenSource::Value(token) => Ok(token.clone()),
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| Error::Token {
                    path: path.clone(),
                    source,
                })?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(Error::Config(format!(
                        "the token file {} is empty",
                        path.display()
                    )));
                }
                Ok(token.to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_http_or_https_and_a_port() {
        for (url, authority) in [
            ("http://127.0.0.1:8370", "127.0.0.1:8370"),
            ("http://localhost:9/", "localhost:9"),
            ("http://[::1]:8370", "[::1]:8370"),
        ] {
            assert_eq!(
                Endpoint::from_url(url).ok(),
                Some(Endpoint::Tcp {
                    authority: authority.into()
                }),
                "{url}"
            );
        }
        assert_eq!(
            Endpoint::from_url("https://box.lan:8370/").ok(),
            Some(Endpoint::Https {
                authority: "box.lan:8370".into()
            })
        );
        for url in [
            "https://127.0.0.1",
            "ftp://127.0.0.1:8370",
            "http://127.0.0.1",
            "http://127.0.0.1:0",
            "http://127.0.0.1:x",
            "http://:8370",
            "http://[::1]",
            "http://h:1/api",
            "127.0.0.1:8370",
        ] {
            assert!(Endpoint::from_url(url).is_err(), "{url} was accepted");
        }
    }
}
