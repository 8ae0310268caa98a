//! The console's CSRF defences, applied by `auth::authorize` to every state-changing console
//! request before its handler runs.
//!
//! Three layers: the session cookie is `SameSite=Strict`, so a cross-site page cannot make the
//! browser send it; an `Origin` header, when present, must be this very origin
//! (`http://<Host>`, or `https://<Host>` under `web.tls`), which also stops login CSRF, where no cookie exists yet; and a request
//! with a session must carry the session's CSRF token in `X-Leo-Csrf`, a header no cross-origin
//! form can set and no cross-origin script can send without a CORS preflight, which the broker
//! never grants. This very origin is `https://<Host>` when the TCP listener serves HTTPS
//! (`web.tls`), since a browser names the scheme it loaded the page over, and `http://<Host>`
//! otherwise; the other scheme is another origin.

use axum::http::{HeaderMap, header};
use leo_protocol::ErrorCode;

use super::session::{CSRF_HEADER, Session};
use crate::refusal::Refusal;

/// An `Origin` header, when present, must be the request's own Host with the listener's
/// scheme: `https://` when it serves HTTPS (`https`), else `http://`.
pub fn check_origin(headers: &HeaderMap, https: bool) -> Result<(), Refusal> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("?");
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let scheme = if https { "https://" } else { "http://" };
    let same = origin
        .strip_prefix(scheme)
        .is_some_and(|authority| !host.is_empty() && authority.eq_ignore_ascii_case(host));
    if same {
        Ok(())
    } else {
        Err(Refusal::new(
            ErrorCode::Forbidden,
            format!("cross-origin request refused: Origin {origin:?} is not {scheme}{host}"),
        ))
    }
}

/// The request must carry `session`'s CSRF token in `X-Leo-Csrf`.
pub fn check_csrf(headers: &HeaderMap, session: &Session) -> Result<(), Refusal> {
    let presented = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    match presented {
        Some(token) if session.csrf_matches(token) => Ok(()),
        Some(_) => Err(Refusal::new(
            ErrorCode::Forbidden,
            "the X-Leo-Csrf header does not match this session",
        )),
        None => Err(Refusal::new(
            ErrorCode::Forbidden,
            "missing X-Leo-Csrf header (send the token from the console page)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    #[test]
    fn origin_must_be_this_origin_when_present() {
        for (host, origin, ok) in [
            ("127.0.0.1:8370", None, true),
            ("127.0.0.1:8370", Some("http://127.0.0.1:8370"), true),
            ("localhost:8370", Some("http://LOCALHOST:8370"), true),
            ("[::1]:8370", Some("http://[::1]:8370"), true),
            ("127.0.0.1:8370", Some("null"), false),
            ("127.0.0.1:8370", Some("http://127.0.0.1:8371"), false),
            ("127.0.0.1:8370", Some("https://127.0.0.1:8370"), false),
            ("127.0.0.1:8370", Some("http://evil.example"), false),
            ("127.0.0.1:8370", Some("http://127.0.0.1:8370.evil"), false),
        ] {
            assert_eq!(
                check_origin(&headers(host, origin), false).is_ok(),
                ok,
                "{host} {origin:?}"
            );
        }
    }

    #[test]
    fn over_https_the_origin_is_https_and_http_is_another() {
        for (host, origin, ok) in [
            ("localhost:8370", None, true),
            ("localhost:8370", Some("https://localhost:8370"), true),
            ("leo.internal:8370", Some("https://LEO.internal:8370"), true),
            ("localhost:8370", Some("http://localhost:8370"), false),
            ("localhost:8370", Some("https://localhost:8371"), false),
            ("localhost:8370", Some("https://evil.example"), false),
            ("localhost:8370", Some("null"), false),
        ] {
            let checked = check_origin(&headers(host, origin), true);
            assert_eq!(checked.is_ok(), ok, "{host} {origin:?}");
            if let Err(e) = checked {
                assert!(e.message.contains("is not https://"), "{}", e.message);
            }
        }
    }
}
