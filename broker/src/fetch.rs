//! One `GET` of a foreign URL by the broker, with the limits a server needs when a URL it
//! fetches may be chosen by someone else: a client's metadata document (`oauth::cimd`, whose
//! URL is any caller's `client_id`), an outside issuer's metadata and keys (`issuer`).
//!
//! - **Time**: connecting, the TLS handshake and the whole answer share one deadline.
//! - **Size**: the body is read up to a cap; a longer one is an error, not a truncation.
//! - **No redirects**: a `3xx` is an error. A redirect would be a second URL nobody checked,
//!   the usual way to reach an internal address through a public one.
//! - **Addresses**: the host is resolved once, the first address the rule admits is the one
//!   connected to (a name cannot resolve to a public address at the check and a private one
//!   at the connection), and loopback, private, link-local and other non-public addresses are
//!   refused unless the caller allows them (tests, and an issuer the operator named).
//! - `https` through `leo_protocol::tls::Connector`, the one client TLS rule (system roots and
//!   `LEO_CA_FILE`); `http` only when the caller allows it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::http::header::{ACCEPT, HOST, LOCATION, USER_AGENT};
use axum::http::{Request, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;

/// What a fetch may do.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest body read.
    pub max_bytes: usize,
    /// For everything: resolving, connecting, TLS, the answer read whole.
    pub timeout: Duration,
    /// Loopback, private and link-local addresses may be connected to.
    pub allow_private: bool,
    /// `http://` is allowed (else `https://` only).
    pub allow_http: bool,
}

/// Why a fetch returned nothing.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url:?} is not a URL this broker fetches: {why}")]
    Url { url: String, why: String },
    #[error("{host:?} resolves to {ip}, which is not a public address")]
    Private { host: String, ip: IpAddr },
    #[error("cannot resolve {host:?}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host:?} resolves to no address")]
    NoAddress { host: String },
    #[error("cannot connect to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP with {addr} failed")]
    Http {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("the answer is a redirect ({status}, to {location:?}); redirects are not followed")]
    Redirect { status: u16, location: String },
    #[error("the answer's status is {0}")]
    Status(u16),
    #[error("the answer is larger than {max} bytes")]
    TooLarge { max: usize },
}

/// `GET url` within `limits`: the body of a `200`.
pub async fn get(url: &str, limits: &Limits) -> Result<Bytes, FetchError> {
    tokio::time::timeout(limits.timeout, get_unbounded(url, limits))
        .await
        .map_err(|_| FetchError::Timeout(limits.timeout))?
}

/// The parts of a URL a fetch uses: scheme is https, host, port, path and query.
struct Target {
    https: bool,
    host: String,
    port: u16,
    authority: String,
    path: String,
}

fn parse(url: &str, limits: &Limits) -> Result<Target, FetchError> {
    let refused = |why: &str| FetchError::Url {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let uri: Uri = url.parse().map_err(|_| refused("it does not parse"))?;
    if url.contains('#') {
        return Err(refused("it has a fragment"));
    }
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") if limits.allow_http => false,
        _ => return Err(refused("it is not https")),
    };
    let authority = uri.authority().ok_or_else(|| refused("it has no host"))?;
    if authority.as_str().contains('@') {
        return Err(refused("it holds a user or password"));
    }
    let host = bare_host(authority);
    if host.is_empty() {
        return Err(refused("it has no host"));
    }
    let port = match authority.port_u16() {
        Some(0) => return Err(refused("port 0")),
        Some(p) => p,
        None if authority.as_str().ends_with(':') => return Err(refused("an empty port")),
        None if https => 443,
        None => 80,
    };
    Ok(Target {
        https,
        host,
        port,
        authority: authority.as_str().to_owned(),
        path: uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
    })
}

/// The host an authority names, lowercase, without an IPv6 address's brackets.
pub fn bare_host(authority: &axum::http::uri::Authority) -> String {
    authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether `ip` is an address on the public internet: not loopback, private (RFC 1918,
/// RFC 4193), link-local, shared (RFC 6598), unspecified, multicast or documentation.
pub fn is_public(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (18..20).contains(&b))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

/// Why a host has no address a rule admits.
#[derive(Debug)]
pub enum NoAddress {
    /// It cannot be resolved.
    Resolve(std::io::Error),
    /// Every address it has is refused; one of them.
    Refused(IpAddr),
    /// It resolves to nothing.
    Empty,
}

/// Resolves `host` (a name, or an IP address without brackets) once and returns the first
/// address `admits`: the address then connected to, so a name cannot pass the check and
/// resolve elsewhere at the connection.
pub async fn first_admitted(
    host: &str,
    port: u16,
    admits: impl Fn(IpAddr) -> bool,
) -> Result<SocketAddr, NoAddress> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return if admits(ip) {
            Ok(SocketAddr::new(ip, port))
        } else {
            Err(NoAddress::Refused(ip))
        };
    }
    let found = tokio::net::lookup_host((host, port))
        .await
        .map_err(NoAddress::Resolve)?;
    let mut refused = None;
    for addr in found {
        if admits(addr.ip()) {
            return Ok(addr);
        }
        refused = Some(addr.ip());
    }
    Err(refused.map_or(NoAddress::Empty, NoAddress::Refused))
}

/// The address to connect to for `t`.
async fn resolve(t: &Target, limits: &Limits) -> Result<SocketAddr, FetchError> {
    let host = || t.host.clone();
    first_admitted(&t.host, t.port, |ip| limits.allow_private || is_public(ip))
        .await
        .map_err(|e| match e {
            NoAddress::Resolve(source) => FetchError::Resolve {
                host: host(),
                source,
            },
            NoAddress::Refused(ip) => FetchError::Private { host: host(), ip },
            NoAddress::Empty => FetchError::NoAddress { host: host() },
        })
}

async fn get_unbounded(url: &str, limits: &Limits) -> Result<Bytes, FetchError> {
    let t = parse(url, limits)?;
    let addr = resolve(&t, limits).await?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| FetchError::Connect { addr, source })?;
    let _ = tcp.set_nodelay(true);
    if t.https {
        let tls = leo_protocol::tls::Connector::from_env()
            .map_err(|e| FetchError::Connect {
                addr,
                source: std::io::Error::other(e),
            })?
            .connect(&t.host, tcp)
            .await
            .map_err(|source| FetchError::Connect { addr, source })?;
        exchange(TokioIo::new(tls), &t, addr, limits).await
    } else {
        exchange(TokioIo::new(tcp), &t, addr, limits).await
    }
}

async fn exchange<IO>(
    io: IO,
    t: &Target,
    addr: SocketAddr,
    limits: &Limits,
) -> Result<Bytes, FetchError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let http = |source| FetchError::Http { addr, source };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(http)?;
    let conn = tokio::spawn(conn);
    let req = Request::get(t.path.as_str())
        .header(HOST, t.authority.as_str())
        .header(ACCEPT, "application/json")
        .header(
            USER_AGENT,
            concat!("leo-broker/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<Bytes>::new())
        .map_err(|e| FetchError::Url {
            url: t.path.clone(),
            why: e.to_string(),
        })?;
    let answer = async {
        let resp = sender.send_request(req).await.map_err(http)?;
        let status = resp.status();
        if status.is_redirection() {
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            return Err(FetchError::Redirect {
                status: status.as_u16(),
                location,
            });
        }
        if status != axum::http::StatusCode::OK {
            return Err(FetchError::Status(status.as_u16()));
        }
        let declared = resp
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limits.max_bytes as u64) {
            return Err(FetchError::TooLarge {
                max: limits.max_bytes,
            });
        }
        Limited::new(resp.into_body(), limits.max_bytes)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(|_| FetchError::TooLarge {
                max: limits.max_bytes,
            })
    }
    .await;
    conn.abort();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for (ip, public) in [
            ("127.0.0.1", false),
            ("10.1.2.3", false),
            ("172.16.0.1", false),
            ("192.168.1.1", false),
            ("169.254.169.254", false),
            ("100.64.0.1", false),
            ("0.0.0.0", false),
            ("::1", false),
            ("::ffff:10.0.0.1", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("8.8.8.8", true),
            ("2606:4700::1111", true),
        ] {
            let parsed: IpAddr = ip.parse().unwrap_or_else(|e| panic!("{ip}: {e}"));
            assert_eq!(is_public(parsed), public, "{ip}");
        }
    }

    #[test]
    fn urls_are_checked_before_anything_is_sent() {
        let strict = Limits {
            max_bytes: 1,
            timeout: Duration::from_secs(1),
            allow_private: false,
            allow_http: false,
        };
        for url in [
            "http://example.com/x",
            "https://u:p@example.com/x",
            "https://example.com/x#f",
            "https://example.com:0/x",
            "ftp://example.com/x",
        ] {
            assert!(parse(url, &strict).is_err(), "{url}");
        }
        let t = parse("https://Example.com/a?b=1", &strict).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("example.com", 443, "/a?b=1")
        );
    }
}
