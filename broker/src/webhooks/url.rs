//! Where a webhook may be called: `http://` to a loopback host, or to a host the operator
//! named in `webhooks.allowed_hosts`. Nothing else, so a token holder cannot make the broker
//! call arbitrary addresses on its behalf.
//!
//! The url is checked when the webhook is created, and its host is resolved and checked again
//! at each delivery: the one address that passed is the one connected to (a name that resolves
//! to loopback at the check cannot be connected somewhere else afterwards, the DNS-rebinding
//! trick). A name that is not in `allowed_hosts` must resolve to loopback addresses only.
//!
//! The url the operator reads is where it delivers: what the parser would drop or read
//! otherwise (a fragment, userinfo, a port out of range, which it takes for no port and so 80)
//! is refused, not normalized.
//!
//! **Decision: plain `http://` only.** The broker carries no TLS client: it would add a
//! certificate store and a crypto backend to a daemon that otherwise listens on loopback only.
//! A delivery is signed (the app can tell it came from this broker, unchanged and recent) but
//! not encrypted; a webhook on another machine should be reached through a tunnel or a local
//! TLS-terminating proxy, whose host the operator allows.

use std::net::{IpAddr, SocketAddr};

use axum::http::Uri;

use crate::fetch::NoAddress;

/// Why a url is not a place the broker may deliver to. Each message names the part at fault,
/// for the operator reading `leo webhook add`'s refusal or the webhook's health.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    #[error("{url:?} is not a URL ({reason})")]
    NotUrl { url: String, reason: String },
    #[error("{url:?}: a fragment (#…) is never sent to the app; remove it")]
    Fragment { url: String },
    #[error(
        "{url:?}: the broker calls webhooks over plain http only (sign-checked, not encrypted); use http:// to a loopback host or a host in webhooks.allowed_hosts"
    )]
    Https { url: String },
    #[error("{url:?} must start with http://")]
    Scheme { url: String },
    #[error("{url:?} has no host")]
    NoHost { url: String },
    #[error("{url:?}: a user or password in the URL is not allowed")]
    Userinfo { url: String },
    #[error("host {host:?} of {url:?} is neither loopback nor in webhooks.allowed_hosts")]
    NotAllowed { host: String, url: String },
    #[error("{url:?}: port {port:?} is not a port number from 1 to 65535")]
    Port { url: String, port: String },
}

/// Why a checked url has no address to deliver to at this delivery.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    #[error("{ip} is not a loopback address")]
    NotLoopback { ip: IpAddr },
    #[error("cannot resolve {host:?}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error(
        "{host:?} resolves to {ip}, not a loopback address, and is not in webhooks.allowed_hosts"
    )]
    ResolvesElsewhere { host: String, ip: IpAddr },
    #[error("{host:?} resolves to no address")]
    NoAddress { host: String },
}

/// A checked webhook url.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host as written, lowercase, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// What the `Host` header says: the url's authority.
    pub authority: String,
    /// Path and query, `/` when the url has none.
    pub path: String,
    /// Named in `webhooks.allowed_hosts`: any address it resolves to may be called.
    pub allowed: bool,
}

impl Target {
    /// Checks `url` against the rule; the message names what is wrong.
    pub fn parse(url: &str, allowed_hosts: &[String]) -> Result<Target, UrlRefused> {
        let url_ = || url.to_owned();
        let uri: Uri = url.parse().map_err(|e| UrlRefused::NotUrl {
            url: url_(),
            reason: format!("{e}"),
        })?;
        if url.contains('#') {
            // The parser drops a fragment; what the operator reads must be where it delivers.
            return Err(UrlRefused::Fragment { url: url_() });
        }
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(UrlRefused::Https { url: url_() }),
            _ => return Err(UrlRefused::Scheme { url: url_() }),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| UrlRefused::NoHost { url: url_() })?;
        if authority.as_str().contains('@') {
            return Err(UrlRefused::Userinfo { url: url_() });
        }
        let host = crate::fetch::bare_host(authority);
        if host.is_empty() {
            return Err(UrlRefused::NoHost { url: url_() });
        }
        let allowed = allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host));
        let loopback = match host.parse::<IpAddr>() {
            Ok(ip) => is_loopback(ip),
            Err(_) => host == "localhost",
        };
        if !allowed && !loopback {
            return Err(UrlRefused::NotAllowed { host, url: url_() });
        }
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".to_owned());
        Ok(Target {
            host,
            port: port_of(url, authority)?,
            authority: authority.as_str().to_owned(),
            path,
            allowed,
        })
    }

    /// True when the broker may connect to `addr` for this url.
    pub fn admits(&self, addr: &SocketAddr) -> bool {
        self.allowed || is_loopback(addr.ip())
    }

    /// Resolves the host once and returns the first address the rule admits: the address the
    /// delivery then connects to.
    pub async fn resolve(&self) -> Result<SocketAddr, Unreachable> {
        let admits = |ip| self.admits(&SocketAddr::new(ip, self.port));
        let literal = self.host.parse::<IpAddr>().is_ok();
        let host = || self.host.clone();
        crate::fetch::first_admitted(&self.host, self.port, admits)
            .await
            .map_err(|e| match e {
                NoAddress::Refused(ip) if literal => Unreachable::NotLoopback { ip },
                NoAddress::Refused(ip) => Unreachable::ResolvesElsewhere { host: host(), ip },
                NoAddress::Resolve(source) => Unreachable::Resolve {
                    host: host(),
                    source,
                },
                NoAddress::Empty => Unreachable::NoAddress { host: host() },
            })
    }
}

/// `url` without its query, for the audit trail: a query may carry a credential of the app's.
pub fn shown(url: &str) -> &str {
    url.split_once('?').map_or(url, |(before, _)| before)
}

/// The port an authority names, 80 when it names none. A port the parser would read as none
/// (out of range, empty, signed, not a number) is refused rather than delivered to 80; so is
/// port 0, which nothing listens on.
fn port_of(url: &str, authority: &axum::http::uri::Authority) -> Result<u16, UrlRefused> {
    // Userinfo was refused before, so the authority starts with its host.
    let after_host = authority
        .as_str()
        .get(authority.host().len()..)
        .unwrap_or_default();
    let Some(text) = after_host.strip_prefix(':') else {
        return Ok(80);
    };
    match text.parse::<u16>() {
        Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(UrlRefused::Port {
            url: url.to_owned(),
            port: text.to_owned(),
        }),
    }
}

/// Loopback, also when written as an IPv4-mapped IPv6 address.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_allowed_hosts_pass_and_nothing_else() {
        let allowed = vec!["hooks.internal".to_owned()];
        for (url, ok) in [
            ("http://127.0.0.1:9000/hook", true),
            ("http://127.9.9.9/", true),
            ("http://[::1]:8080/x?y=1", true),
            ("http://[::ffff:127.0.0.1]:1/", true),
            ("http://localhost:1/", true),
            ("http://LOCALHOST:1/", true),
            ("http://hooks.internal/x", true),
            ("http://HOOKS.internal:81/x", true),
            ("https://127.0.0.1/", false),
            ("ftp://127.0.0.1/", false),
            ("http://example.com/", false),
            ("http://10.0.0.1/", false),
            ("http://0.0.0.0:80/", false),
            ("http://user@127.0.0.1/", false),
            ("http://localhost.example.com/", false),
            ("127.0.0.1:80", false),
            ("/relative", false),
            ("", false),
            ("http://127.0.0.1:99999/", false),
            ("http://127.0.0.1:65536/", false),
            ("http://127.0.0.1:0/", false),
            ("http://127.0.0.1:/", false),
            ("http://127.0.0.1:+80/", false),
            ("http://127.0.0.1:-1/", false),
            ("http://[::1]:99999/", false),
            ("http://127.0.0.1:80#@evil.example/", false),
            ("http://127.0.0.1/hook#frag", false),
            ("http://127.0.0.1/a?b#", false),
            ("http://u:p@127.0.0.1/", false),
            ("http://127.0.0.1:65535/", true),
            ("http://127.0.0.1:1/", true),
            ("http://127.0.0.1/@x", true),
            ("http://localhost:1/", true),
        ] {
            assert_eq!(Target::parse(url, &allowed).is_ok(), ok, "{url}");
        }
        let t = Target::parse("http://[::1]:8080", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 8080, "/")
        );
        assert_eq!(t.authority, "[::1]:8080");
        let port = |url: &str| Target::parse(url, &[]).map(|t| t.port);
        assert_eq!(port("http://127.0.0.1/"), Ok(80));
        assert_eq!(port("http://[::1]/"), Ok(80));
        assert_eq!(port("http://127.0.0.1:65535/"), Ok(65535));
    }

    /// What is refused says why, so the operator can tell a bad port from a fragment.
    #[test]
    fn a_refusal_names_the_part_at_fault() {
        let why = |url: &str| {
            Target::parse(url, &[])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(why("http://127.0.0.1:99999/").contains("port \"99999\""));
        assert!(why("http://127.0.0.1:80#@evil.example/").contains("fragment"));
        assert!(why("http://u@127.0.0.1/").contains("user or password"));
    }

    #[tokio::test]
    async fn resolution_admits_loopback_addresses_only_unless_allowed() {
        let t = Target::parse("http://localhost:9/", &[]).unwrap_or_else(|e| panic!("{e}"));
        let addr = t.resolve().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(addr.ip().is_loopback() && addr.port() == 9);
        assert!(!t.admits(&"10.0.0.1:9".parse().unwrap_or_else(|e| panic!("{e}"))));
        let allowed = Target::parse("http://h/", &["h".into()]).unwrap_or_else(|e| panic!("{e}"));
        assert!(allowed.admits(&"10.0.0.1:80".parse().unwrap_or_else(|e| panic!("{e}"))));
    }
}
