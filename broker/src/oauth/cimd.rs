//! Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, which the MCP
//! authorization specification of 2026-07-28 prefers to registration): a client whose
//! `client_id` is an `https` URL is the JSON document at that URL, fetched by the broker when
//! the client first asks, so a client reaches any broker without registering with each.
//!
//! Anyone can send any URL as a `client_id`, so the fetch is the usual server-side risk: it
//! goes through `fetch` (one deadline, a size cap, no redirects, no loopback or private
//! address unless `auth.allow_private_fetch` says so, which is for tests), at most
//! [`MAX_FETCHES`] at once, and a document is kept [`CACHE_TTL`] so a flood of requests for
//! one URL fetches it once. The document is believed only about itself: its `client_id` must
//! be its own URL, it has no secret (a public document cannot hold one), and its
//! `redirect_uris` are checked like a registration's; the authorization request's redirect
//! URI must then be one of them, exactly (loopback on any port, RFC 8252 §7.3).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leo_protocol::oauth::ClientMetadata;
use leo_store::oauth::Client;
use tokio::sync::Semaphore;

use super::{AuthError, check_redirect_uri, client_name, err};
use crate::fetch::{self, Limits};

/// The largest document read: the draft's recommended limit.
pub const MAX_BYTES: usize = 5 * 1024;
/// How long fetching a document may take, all included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a fetched document is believed.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// At most this many documents are kept, and fetched at once.
pub const MAX_CACHED: usize = 256;
pub const MAX_FETCHES: usize = 4;
/// What `Client::how` says of a client known by its document.
pub const HOW: &str = "cimd";

/// Whether `client_id` names a metadata document rather than a registration.
pub fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

pub use super::parse::check_url;

/// The documents fetched lately, and the fetches under way.
pub struct Documents {
    limits: Limits,
    cache: Mutex<HashMap<String, (Client, Instant)>>,
    fetches: Semaphore,
}

impl Documents {
    pub fn new(allow_private: bool) -> Documents {
        Documents {
            limits: Limits {
                max_bytes: MAX_BYTES,
                timeout: FETCH_TIMEOUT,
                allow_private,
                allow_http: allow_private,
            },
            cache: Mutex::new(HashMap::new()),
            fetches: Semaphore::new(MAX_FETCHES),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Client, Instant)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The client `url` names: from the cache, or fetched and checked.
    pub async fn client(&self, url: &str) -> Result<Client, AuthError> {
        if let Some((c, _)) = self
            .cache()
            .get(url)
            .filter(|(_, at)| at.elapsed() < CACHE_TTL)
        {
            return Ok(c.clone());
        }
        check_url(url, self.limits.allow_private).map_err(|why| err("invalid_client", why))?;
        let _permit = self.fetches.try_acquire().map_err(|_| {
            err(
                "temporarily_unavailable",
                "too many client metadata documents are being fetched; retry",
            )
        })?;
        let body = fetch::get(url, &self.limits).await.map_err(|e| {
            tracing::info!(url, error = %e, "a client metadata document is refused");
            err(
                "invalid_client",
                format!("cannot fetch the client metadata document: {e}"),
            )
        })?;
        let client = read(url, &body)?;
        let mut cache = self.cache();
        cache.retain(|_, (_, at)| at.elapsed() < CACHE_TTL);
        if cache.len() < MAX_CACHED {
            cache.insert(url.to_owned(), (client.clone(), Instant::now()));
        }
        Ok(client)
    }
}

/// The client the document `body` at `url` describes, if it may be believed.
fn read(url: &str, body: &[u8]) -> Result<Client, AuthError> {
    let bad = |why: String| {
        err(
            "invalid_client",
            format!("the client metadata document {why}"),
        )
    };
    let meta: ClientMetadata =
        serde_json::from_slice(body).map_err(|e| bad(format!("is not valid: {e}")))?;
    if meta.client_id.as_deref() != Some(url) {
        return Err(bad(format!(
            "names client_id {:?}, not its own URL",
            meta.client_id.as_deref().unwrap_or("")
        )));
    }
    let method = meta.token_endpoint_auth_method.as_deref().unwrap_or("none");
    if method != "none" {
        return Err(bad(format!(
            "asks for token_endpoint_auth_method {method:?}; only \"none\" is supported"
        )));
    }
    if meta.redirect_uris.is_empty() {
        return Err(bad("has no redirect_uris".into()));
    }
    for uri in &meta.redirect_uris {
        check_redirect_uri(uri).map_err(|why| bad(format!("has a bad redirect URI: {why}")))?;
    }
    Ok(Client {
        client_id: url.to_owned(),
        name: client_name(meta.client_name.as_deref()),
        redirect_uris: meta.redirect_uris,
        secret_hash: None,
        how: HOW.to_owned(),
        created_ms: leo_store::now_ms(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_believed_only_about_itself() {
        let url = "https://app.example/c.json";
        let doc = |v: serde_json::Value| v.to_string().into_bytes();
        let good = doc(serde_json::json!({"client_id": url, "client_name": "App",
            "redirect_uris": ["http://127.0.0.1/cb"]}));
        let c = read(url, &good).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((c.name.as_str(), c.how.as_str()), ("App", HOW));
        for bad in [
            serde_json::json!({"client_id": "https://other.example/c.json",
                "redirect_uris": ["http://127.0.0.1/cb"]}),
            serde_json::json!({"client_id": url, "redirect_uris": []}),
            serde_json::json!({"client_id": url, "redirect_uris": ["http://evil.example/cb"]}),
            serde_json::json!({"client_id": url, "redirect_uris": ["http://127.0.0.1/cb"],
                "token_endpoint_auth_method": "client_secret_basic"}),
        ] {
            assert_eq!(
                read(url, &doc(bad.clone())).map_err(|e| e.error),
                Err("invalid_client"),
                "{bad}"
            );
        }
    }
}
