//! The OAuth rules that read text and nothing else: a query or form's parameters, a redirect
//! URI and whether one matches another, a PKCE verifier, a client ID metadata document's URL.
//! No I/O and no state, so the `oauth_params` fuzz target compiles this file alone
//! (`fuzz/fuzz_targets/oauth_params.rs`) and holds the rules to each other on any input.

use std::collections::BTreeMap;

/// An error the RFCs name, with its description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthError {
    pub error: &'static str,
    pub description: String,
}

pub fn err(error: &'static str, description: impl Into<String>) -> AuthError {
    AuthError {
        error,
        description: description.into(),
    }
}

/// The parameters of a query or form, each at most once (RFC 6749 §3.1: a parameter sent
/// twice is an `invalid_request`).
pub fn params(text: &[u8]) -> Result<BTreeMap<String, String>, AuthError> {
    let mut out = BTreeMap::new();
    for (name, value) in form_urlencoded::parse(text) {
        if out.insert(name.to_string(), value.to_string()).is_some() {
            return Err(err(
                "invalid_request",
                format!("the parameter {name:?} is sent more than once"),
            ));
        }
    }
    Ok(out)
}

/// Whether `verifier` has the RFC 7636 §4.1 form: 43 to 128 unreserved characters.
pub fn verifier_is_well_formed(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// The parts of a redirect URI these rules look at: scheme, host, port, and the rest.
/// Hand-written (a dozen lines) rather than a URL crate: only exact comparison and the
/// loopback rule are needed, and both compare the text the client registered.
fn split_uri(uri: &str) -> Option<(&str, &str, Option<&str>, &str)> {
    let (scheme, rest) = uri.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') || authority.is_empty() {
        return None;
    }
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    Some((scheme, host, port, tail))
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "[::1]" | "localhost")
}

/// A redirect URI a client may register: `https`, or `http` on a loopback address (RFC 8252
/// §7.3), without a fragment.
pub fn check_redirect_uri(uri: &str) -> Result<(), String> {
    // Stored as text, so the one rule of what text may be stored holds here, at the edge.
    if leo_protocol::names::storable(uri).is_err() {
        return Err(format!("{uri:?} holds a NUL character"));
    }
    // A URI is visible ASCII (RFC 3986), and this one becomes a `Location` header.
    if !uri.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{uri:?} holds a space, a control or a non-ASCII character; percent-encode it"
        ));
    }
    let Some((scheme, host, port, tail)) = split_uri(uri) else {
        return Err(format!("{uri:?} is not an absolute URI"));
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("{uri:?} has a port that is not a number"));
    }
    if tail.contains('#') {
        return Err(format!("{uri:?} has a fragment"));
    }
    match scheme {
        "https" => Ok(()),
        "http" if is_loopback(host) => Ok(()),
        _ => Err(format!(
            "{uri:?}: a redirect URI is https, or http on a loopback address"
        )),
    }
}

/// Whether `presented` is the registered redirect URI `registered`: the same text, but that
/// a loopback `http` one may name any port (RFC 8252 §7.3).
pub fn redirect_matches(registered: &str, presented: &str) -> bool {
    if registered == presented {
        return true;
    }
    match (split_uri(registered), split_uri(presented)) {
        (Some(("http", h1, _, t1)), Some(("http", h2, _, t2))) => {
            // Any port, but a port: what is sent back to must itself be a good redirect URI.
            is_loopback(h1) && h1 == h2 && t1 == t2 && check_redirect_uri(presented).is_ok()
        }
        _ => false,
    }
}

/// The draft's rules of a `client_id` URL (§3): `https` with a path, no fragment, no user or
/// password, no dot segments; `http` only to a loopback host when private fetches are allowed.
pub fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    if url.len() > 2000 || leo_protocol::names::storable(url).is_err() {
        return Err("the client_id URL is too long or holds a NUL".into());
    }
    let rest = match url.split_once("://") {
        Some(("https", rest)) => rest,
        Some(("http", rest)) if allow_private => {
            let authority = rest.split(['/', '?']).next().unwrap_or_default();
            let host = match authority.rfind(':') {
                Some(i) if !authority[i..].contains(']') => &authority[..i],
                _ => authority,
            };
            if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
                return Err("an http client_id URL must be on a loopback host".into());
            }
            rest
        }
        _ => return Err("a client_id URL must be https".into()),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') || url.contains('#') {
        return Err("a client_id URL holds no user, password or fragment".into());
    }
    if path.len() <= 1 {
        return Err("a client_id URL has a path".into());
    }
    let path = path.split('?').next().unwrap_or_default();
    if path.split('/').any(|s| s == "." || s == "..") {
        return Err("a client_id URL has no . or .. segments".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_urls_follow_the_drafts_rules() {
        for (url, ok) in [
            ("https://app.example/client.json", true),
            ("https://app.example/c?v=1", true),
            ("https://app.example", false),
            ("https://app.example/", false),
            ("https://app.example/a/../b", false),
            ("https://app.example/./b", false),
            ("https://u@app.example/c", false),
            ("https://app.example/c#f", false),
            ("http://app.example/c", false),
            ("http://127.0.0.1:9/c", false),
        ] {
            assert_eq!(check_url(url, false).is_ok(), ok, "{url}");
        }
        assert!(check_url("http://127.0.0.1:9/c", true).is_ok());
        assert!(check_url("http://evil.example/c", true).is_err());
    }
}
