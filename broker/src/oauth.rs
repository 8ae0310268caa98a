//! OAuth 2.1 for `/mcp`: Leo as its own authorization server, so that an MCP client that
//! follows the MCP authorization specification (or cannot send a custom header) connects
//! after a person consents in the web console, and no token is carried by hand.
//!
//! The rules live here, without HTTP (`http::oauth` is the endpoints): which clients may
//! register, what an authorization request must hold (PKCE S256 only, a redirect URI that
//! matches a registered one exactly, loopback ones on any port as RFC 8252 §7.3 says, the
//! resource, RFC 8707, being this broker's `/mcp`), what a consent makes (a grant: this client
//! may act as this agent at this resource), and what each token opens:
//!
//! - an authorization code lives [`CODE_TTL`], is used once, and only with the verifier of its
//!   challenge, by the client it was issued to, for the redirect URI it was issued with;
//! - an access token lives `auth.access_ttl_s` and opens `/mcp` as its grant's agent, at its
//!   grant's resource only (its `aud`);
//! - a refresh token lives `auth.refresh_ttl_s` and is exchanged once: each use returns a new
//!   one, and a used one presented again revokes the whole grant (OAuth 2.1 §4.3.1), since
//!   one of its two holders is a thief.
//!
//! Tokens are 32 random bytes; only their SHA-256 is kept, in memory and in the store
//! (`leo_store::oauth`), so a restart, and a cluster's next leader, keep every grant, and a
//! copy of the database opens nothing. The book in memory is this core's: with a cluster, the
//! followers forward every request to the leader, so its book is the one that decides, and a
//! revocation there holds at once on every instance. A code and a consent that waits for a
//! person live only in memory (a minute at most; a restart asks again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use leo_protocol::names::AgentName;
use leo_protocol::oauth::{ACCESS_PREFIX, ClientMetadata, REFRESH_PREFIX};
use leo_store::oauth::{Change, Client, Grant, Saved, Token};
use sha2::{Digest, Sha256};

pub mod cimd;
pub mod parse;

pub use parse::{AuthError, check_redirect_uri, err, redirect_matches, verifier_is_well_formed};

/// How long an authorization code may wait for its exchange.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// How long a consent may wait for a person.
pub const CONSENT_TTL: Duration = Duration::from_secs(600);
/// At most this many consents wait at once, and this many clients register (a flood of
/// registrations by anonymous callers must not fill the memory or the store).
pub const MAX_PENDING: usize = 256;
pub const MAX_CLIENTS: usize = 10_000;

/// `auth.*` as the rules use it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub dynamic_registration: bool,
    /// Clients known by their metadata document (`cimd`).
    pub metadata_documents: bool,
    /// Metadata documents may be fetched from loopback and private addresses (tests).
    pub allow_private_fetch: bool,
    pub access_ttl: Duration,
    pub refresh_ttl: Duration,
}

/// Where the book is kept.
pub enum Persist {
    Sqlite(Arc<leo_store::oauth::Sqlite>),
    Postgres(leo_store::postgres::Database),
}

/// Why the grants could not be read at a core's start. PostgreSQL's error keeps its type, so
/// that a database gone away as an instance starts to lead is an outage it waits out
/// (`BrokerError::is_outage`), not a reason to exit.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Sqlite(String),
    #[error(transparent)]
    Postgres(leo_store::postgres::PgError),
}

/// An authorization request that waits for a person's consent.
#[derive(Debug, Clone)]
pub struct Pending {
    pub request: PendingRequest,
    at: Instant,
}

struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    grant_id: String,
    at: Instant,
}

#[derive(Default)]
struct Book {
    clients: HashMap<String, Client>,
    grants: HashMap<String, Grant>,
    tokens: HashMap<String, Token>,
    pending: HashMap<String, Pending>,
    codes: HashMap<String, Code>,
}

/// The authorization server's state and rules.
pub struct OAuth {
    pub settings: Settings,
    persist: Option<Persist>,
    documents: cimd::Documents,
    book: Mutex<Book>,
}

/// What a valid access token opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub agent: AgentName,
    pub grant_id: String,
    pub client_id: String,
}

impl OAuth {
    /// The book as `saved` held it.
    pub fn new(settings: Settings, persist: Option<Persist>, saved: Saved) -> OAuth {
        let mut book = Book::default();
        for c in saved.clients {
            book.clients.insert(c.client_id.clone(), c);
        }
        for g in saved.grants.into_iter().filter(|g| !g.revoked) {
            book.grants.insert(g.id.clone(), g);
        }
        for t in saved.tokens {
            if book.grants.contains_key(&t.grant_id) {
                book.tokens.insert(t.hash.clone(), t);
            }
        }
        OAuth {
            documents: cimd::Documents::new(settings.allow_private_fetch),
            settings,
            persist,
            book: Mutex::new(book),
        }
    }

    /// Reads the book from where it is kept.
    pub async fn load(settings: Settings, persist: Persist) -> Result<OAuth, LoadError> {
        let now = leo_store::now_ms();
        let saved = match &persist {
            Persist::Sqlite(db) => {
                let db = db.clone();
                tokio::task::spawn_blocking(move || db.load(now))
                    .await
                    .map_err(|e| LoadError::Sqlite(e.to_string()))?
                    .map_err(|e| LoadError::Sqlite(e.to_string()))?
            }
            Persist::Postgres(db) => {
                db.run(move |client| async move {
                    leo_store::oauth::load_postgres(&**client, now).await
                })
                .await
                .map_err(LoadError::Postgres)?
            }
        };
        Ok(OAuth::new(settings, Some(persist), saved))
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `changes` where the book is kept; off the runtime's thread.
    async fn save(&self, changes: Vec<Change>) -> Result<(), AuthError> {
        let failed = |e: String| {
            tracing::warn!(error = %e, "cannot write an OAuth change");
            err("server_error", "the broker cannot record this now; retry")
        };
        match &self.persist {
            None => Ok(()),
            Some(Persist::Sqlite(db)) => {
                let db = db.clone();
                tokio::task::spawn_blocking(move || db.apply(&changes))
                    .await
                    .map_err(|e| failed(e.to_string()))?
                    .map_err(|e| failed(e.to_string()))
            }
            Some(Persist::Postgres(db)) => db
                .fenced(move |tx| {
                    Box::pin(async move {
                        leo_store::oauth::apply_postgres(tx, &changes)
                            .await
                            .map_err(leo_store::postgres::PgError::doing("write an OAuth change"))
                    })
                })
                .await
                .map_err(|e| failed(e.to_string())),
        }
    }

    /// RFC 7591: registers a client; its secret too when it asked for one.
    pub async fn register(
        &self,
        meta: ClientMetadata,
    ) -> Result<(Client, Option<String>), AuthError> {
        if !self.settings.dynamic_registration {
            return Err(err(
                "access_denied",
                "dynamic client registration is off (auth.dynamic_registration)",
            ));
        }
        if meta.redirect_uris.is_empty() {
            return Err(err("invalid_redirect_uri", "redirect_uris is required"));
        }
        for uri in &meta.redirect_uris {
            check_redirect_uri(uri).map_err(|why| err("invalid_redirect_uri", why))?;
        }
        let method = meta.token_endpoint_auth_method.as_deref().unwrap_or("none");
        if !["none", "client_secret_post", "client_secret_basic"].contains(&method) {
            return Err(err(
                "invalid_client_metadata",
                format!("token_endpoint_auth_method {method:?} is not supported"),
            ));
        }
        let grants = meta.grant_types.clone().unwrap_or_default();
        if let Some(g) = grants
            .iter()
            .find(|g| !["authorization_code", "refresh_token"].contains(&g.as_str()))
        {
            return Err(err(
                "invalid_client_metadata",
                format!("grant type {g:?} is not supported"),
            ));
        }
        if let Some(r) = meta
            .response_types
            .iter()
            .flatten()
            .find(|r| r.as_str() != "code")
        {
            return Err(err(
                "invalid_client_metadata",
                format!("response type {r:?} is not supported"),
            ));
        }
        let name = client_name(meta.client_name.as_deref());
        let secret = (method != "none").then(|| secret("leo_cs_"));
        let client = Client {
            client_id: crate::tokens::random_id("oc_"),
            name,
            redirect_uris: meta.redirect_uris,
            secret_hash: secret.as_deref().map(hash),
            how: format!("dcr:{method}"),
            created_ms: leo_store::now_ms(),
        };
        {
            let mut book = self.book();
            if book.clients.len() >= MAX_CLIENTS {
                return Err(err("server_error", "too many registered clients"));
            }
            book.clients
                .insert(client.client_id.clone(), client.clone());
        }
        self.save(vec![Change::Client(client.clone())]).await?;
        Ok((client, secret))
    }

    /// The registered client `client_id`.
    pub fn client(&self, client_id: &str) -> Option<Client> {
        self.book().clients.get(client_id).cloned()
    }

    /// The authorization request's checks that decide whether the client may be sent back
    /// an error at all (RFC 6749 §4.1.2.1): a known client and a redirect URI of its own.
    pub async fn redirect_for(
        &self,
        client_id: &str,
        redirect_uri: Option<&str>,
    ) -> Result<(Client, String), AuthError> {
        let client = if cimd::is_document_url(client_id) {
            if !self.settings.metadata_documents {
                return Err(err(
                    "invalid_client",
                    "client ID metadata documents are off (auth.metadata_documents)",
                ));
            }
            self.documents.client(client_id).await?
        } else {
            self.client(client_id)
                .ok_or_else(|| err("invalid_client", format!("unknown client_id {client_id:?}")))?
        };
        let uri = match redirect_uri {
            Some(uri) => uri.to_owned(),
            None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
            None => return Err(err("invalid_request", "redirect_uri is required")),
        };
        if !client
            .redirect_uris
            .iter()
            .any(|r| redirect_matches(r, &uri))
        {
            return Err(err(
                "invalid_request",
                "redirect_uri is not one this client registered",
            ));
        }
        Ok((client, uri))
    }

    /// Keeps a checked authorization request until a person decides; its id.
    pub fn wait_for_consent(&self, pending: PendingRequest) -> Result<String, AuthError> {
        let mut book = self.book();
        book.pending.retain(|_, p| p.at.elapsed() < CONSENT_TTL);
        if book.pending.len() >= MAX_PENDING {
            return Err(err(
                "temporarily_unavailable",
                "too many authorization requests wait for consent",
            ));
        }
        let id = secret("");
        book.pending.insert(
            id.clone(),
            Pending {
                request: pending,
                at: Instant::now(),
            },
        );
        Ok(id)
    }

    /// The consent `id` waits for, if it still does.
    pub fn pending(&self, id: &str) -> Option<Pending> {
        self.book()
            .pending
            .get(id)
            .filter(|p| p.at.elapsed() < CONSENT_TTL)
            .cloned()
    }

    /// A person's decision on consent `id`: approved as `agent`, a grant and a code; denied,
    /// nothing. Either way the consent is over. The code, when approved.
    pub async fn decide(
        &self,
        id: &str,
        agent: Option<&AgentName>,
        approved_by: &str,
    ) -> Result<(PendingRequest, Option<String>), AuthError> {
        let pending = self
            .book()
            .pending
            .remove(id)
            .filter(|p| p.at.elapsed() < CONSENT_TTL)
            .ok_or_else(|| err("invalid_request", "no such authorization request waits"))?;
        let Some(agent) = agent else {
            return Ok((pending.request, None));
        };
        let pending = pending.request;
        let mut changes = vec![];
        if pending.client.how == cimd::HOW {
            // Kept, so the token endpoint knows the client and the grants list names it.
            self.book()
                .clients
                .insert(pending.client.client_id.clone(), pending.client.clone());
            changes.push(Change::Client(pending.client.clone()));
        }
        let grant = Grant {
            id: crate::tokens::random_id("og_"),
            client_id: pending.client.client_id.clone(),
            agent: agent.to_string(),
            resource: pending.resource.clone(),
            approved_by: approved_by.to_owned(),
            created_ms: leo_store::now_ms(),
            revoked: false,
        };
        changes.push(Change::Grant(grant.clone()));
        self.save(changes).await?;
        let code = secret("");
        let mut book = self.book();
        book.codes.retain(|_, c| c.at.elapsed() < CODE_TTL);
        book.codes.insert(
            hash(&code),
            Code {
                client_id: pending.client.client_id.clone(),
                redirect_uri: pending.redirect_uri.clone(),
                challenge: pending.challenge.clone(),
                grant_id: grant.id.clone(),
                at: Instant::now(),
            },
        );
        book.grants.insert(grant.id.clone(), grant);
        Ok((pending, Some(code)))
    }

    /// Checks the client's own credentials at the token endpoint: a confidential client's
    /// secret (constant time), or none for a public one.
    fn authenticate(&self, client_id: &str, secret: Option<&str>) -> Result<Client, AuthError> {
        let client = self
            .client(client_id)
            .filter(|c| c.how != cimd::HOW || self.settings.metadata_documents)
            .ok_or_else(|| err("invalid_client", "unknown client_id"))?;
        match (&client.secret_hash, secret) {
            (None, _) => Ok(client),
            (Some(want), Some(got)) if crate::agent_tokens::ct_eq(want, &hash(got)) => Ok(client),
            (Some(_), _) => Err(err("invalid_client", "wrong or missing client_secret")),
        }
    }

    /// `grant_type=authorization_code`: the code, once, with its verifier, for the client and
    /// redirect URI it was issued to; the grant's first tokens.
    pub async fn exchange_code(
        &self,
        client: (&str, Option<&str>),
        code: &str,
        verifier: &str,
        redirect_uri: Option<&str>,
        resource: Option<&str>,
    ) -> Result<(String, String, Access), AuthError> {
        let client = self.authenticate(client.0, client.1)?;
        // Removed before any check: a code is used once, whatever the outcome.
        let code = self
            .book()
            .codes
            .remove(&hash(code))
            .filter(|c| c.at.elapsed() < CODE_TTL)
            .ok_or_else(|| err("invalid_grant", "unknown, used or expired code"))?;
        if code.client_id != client.client_id {
            return Err(err(
                "invalid_grant",
                "the code was issued to another client",
            ));
        }
        if redirect_uri.is_some_and(|r| r != code.redirect_uri) {
            return Err(err(
                "invalid_grant",
                "redirect_uri differs from the authorization request's",
            ));
        }
        if !crate::agent_tokens::ct_eq(&challenge_of(verifier), &code.challenge) {
            return Err(err(
                "invalid_grant",
                "code_verifier does not match the code_challenge",
            ));
        }
        self.issue(&code.grant_id, resource).await
    }

    /// `grant_type=refresh_token`: the refresh token, once; a new pair. A used one presented
    /// again revokes its grant.
    pub async fn refresh(
        &self,
        client: (&str, Option<&str>),
        refresh: &str,
        resource: Option<&str>,
    ) -> Result<(String, String, Access), AuthError> {
        let client = self.authenticate(client.0, client.1)?;
        let h = hash(refresh);
        let token = self.book().tokens.get(&h).cloned();
        let Some(token) = token.filter(|t| t.kind == "refresh") else {
            return Err(err(
                "invalid_grant",
                "unknown, revoked or expired refresh token",
            ));
        };
        let grant = self.grant(&token.grant_id)?;
        if grant.client_id != client.client_id {
            return Err(err(
                "invalid_grant",
                "the refresh token was issued to another client",
            ));
        }
        if token.used {
            tracing::warn!(
                grant = %grant.id,
                agent = %grant.agent,
                "a used refresh token came back; the grant is revoked"
            );
            self.revoke(&grant.id).await?;
            return Err(err(
                "invalid_grant",
                "this refresh token was used already; its grant is revoked",
            ));
        }
        if token.expires_ms <= leo_store::now_ms() {
            return Err(err("invalid_grant", "the refresh token expired"));
        }
        if resource.is_some_and(|r| r != grant.resource) {
            // Refused before the token is spent: asking for the wrong resource is no theft.
            return Err(err("invalid_target", "the grant is for another resource"));
        }
        if let Some(t) = self.book().tokens.get_mut(&h) {
            t.used = true;
        }
        self.save(vec![Change::Used(h)]).await?;
        self.issue(&grant.id, resource).await
    }

    fn grant(&self, id: &str) -> Result<Grant, AuthError> {
        self.book()
            .grants
            .get(id)
            .cloned()
            .ok_or_else(|| err("invalid_grant", "the grant was revoked"))
    }

    /// A new access and refresh token of grant `id`, for its resource.
    async fn issue(
        &self,
        id: &str,
        resource: Option<&str>,
    ) -> Result<(String, String, Access), AuthError> {
        let grant = self.grant(id)?;
        if resource.is_some_and(|r| r != grant.resource) {
            return Err(err("invalid_target", "the grant is for another resource"));
        }
        let agent = AgentName::parse(&grant.agent)
            .map_err(|_| err("server_error", "the grant's agent name is not valid"))?;
        let access = secret(ACCESS_PREFIX);
        let refresh = secret(REFRESH_PREFIX);
        let now = leo_store::now_ms();
        let token = |t: &str, kind: &str, ttl: Duration| Token {
            hash: hash(t),
            grant_id: grant.id.clone(),
            kind: kind.to_owned(),
            expires_ms: now + ttl.as_millis() as i64,
            used: false,
        };
        let a = token(&access, "access", self.settings.access_ttl);
        let r = token(&refresh, "refresh", self.settings.refresh_ttl);
        {
            let mut book = self.book();
            book.tokens.retain(|_, t| t.expires_ms > now);
            book.tokens.insert(a.hash.clone(), a.clone());
            book.tokens.insert(r.hash.clone(), r.clone());
        }
        let changes = vec![Change::Expired(now), Change::Token(a), Change::Token(r)];
        self.save(changes).await?;
        let opened = Access {
            agent,
            grant_id: grant.id,
            client_id: grant.client_id,
        };
        Ok((access, refresh, opened))
    }

    /// What `token` opens at `resource`: `Err` with the RFC 6750 reason when nothing.
    pub fn verify(&self, token: &str, resource: &str) -> Result<Access, AuthError> {
        let invalid = |why: &str| err("invalid_token", why);
        let book = self.book();
        // Looked up by its hash: a timing difference tells nothing of a token's bytes.
        let t = book
            .tokens
            .get(&hash(token))
            .filter(|t| t.kind == "access")
            .ok_or_else(|| invalid("unknown or revoked access token"))?;
        if t.expires_ms <= leo_store::now_ms() {
            return Err(invalid("the access token expired"));
        }
        let grant = book
            .grants
            .get(&t.grant_id)
            .ok_or_else(|| invalid("the grant was revoked"))?;
        if grant.resource != resource {
            return Err(invalid("the access token is for another resource (aud)"));
        }
        let agent = AgentName::parse(&grant.agent)
            .map_err(|_| invalid("the grant's agent is not valid"))?;
        Ok(Access {
            agent,
            grant_id: grant.id.clone(),
            client_id: grant.client_id.clone(),
        })
    }

    /// Revokes grant `id` and every token of it, at once.
    pub async fn revoke(&self, id: &str) -> Result<bool, AuthError> {
        let found = {
            let mut book = self.book();
            book.tokens.retain(|_, t| t.grant_id != id);
            book.codes.retain(|_, c| c.grant_id != id);
            book.grants.remove(id).is_some()
        };
        if found {
            self.save(vec![Change::Revoke(id.to_owned())]).await?;
        }
        Ok(found)
    }

    /// The grants in force, oldest first, with their client's name.
    pub fn grants(&self) -> Vec<leo_protocol::oauth::GrantInfo> {
        let book = self.book();
        let mut out: Vec<_> = book
            .grants
            .values()
            .map(|g| leo_protocol::oauth::GrantInfo {
                id: g.id.clone(),
                agent: g.agent.clone(),
                client_id: g.client_id.clone(),
                client_name: book
                    .clients
                    .get(&g.client_id)
                    .map(|c| c.name.clone())
                    .unwrap_or_default(),
                resource: g.resource.clone(),
                approved_by: g.approved_by.clone(),
                created_ms: g.created_ms,
            })
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        out
    }
}

/// A checked authorization request, before a person sees it.
#[derive(Debug, Clone)]
pub struct PendingRequest {
    pub client: Client,
    pub redirect_uri: String,
    pub state: Option<String>,
    pub challenge: String,
    pub resource: String,
    /// Where the request came from: the browser's address and user agent.
    pub from: String,
    pub issuer: String,
}

impl crate::agent_tokens::AccessTokens for OAuth {
    fn recognizes(&self, token: &str) -> bool {
        token.starts_with(ACCESS_PREFIX)
    }

    fn opens(&self, token: &str, agent: &AgentName) -> bool {
        let book = self.book();
        book.tokens
            .get(&hash(token))
            .filter(|t| t.kind == "access" && t.expires_ms > leo_store::now_ms())
            .and_then(|t| book.grants.get(&t.grant_id))
            .is_some_and(|g| g.agent == agent.as_str())
    }
}

/// The name a client gives itself, as a person is shown it: one line, at most 100
/// characters.
fn client_name(given: Option<&str>) -> String {
    given
        .map(|n| {
            let n = leo_protocol::sanitize::sanitize(n, leo_protocol::sanitize::Lines::Join);
            n.chars().take(100).collect::<String>()
        })
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "unnamed client".to_owned())
}

/// SHA-256 of `text`, as hex: how tokens, codes and secrets are kept.
pub fn hash(text: &str) -> String {
    crate::tokens::hex(&Sha256::digest(text.as_bytes()))
}

/// The S256 challenge of `verifier` (RFC 7636 §4.2).
pub fn challenge_of(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// `prefix` and 32 random bytes, base64url.
fn secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    // A broker without randomness cannot run at all (its own tokens need it); this is not
    // the place to carry on without it.
    getrandom::fill(&mut bytes).unwrap_or_else(|e| panic!("no randomness: {e}"));
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The agent name a consent page proposes for a client: its name made a valid agent name.
pub fn proposed_agent(client_name: &str) -> String {
    let name: String = client_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-');
    let name = &name[..name.len().min(64)];
    if AgentName::parse(name).is_ok() {
        name.to_owned()
    } else {
        "oauth-client".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_redirects_match_on_any_port_and_others_exactly() {
        let r = "http://127.0.0.1:3000/callback";
        assert!(redirect_matches(r, "http://127.0.0.1:51234/callback"));
        assert!(redirect_matches(r, "http://127.0.0.1/callback"));
        assert!(!redirect_matches(r, "http://127.0.0.1:3000/other"));
        assert!(!redirect_matches(r, "http://localhost:3000/callback"));
        let h = "https://app.example/cb";
        assert!(redirect_matches(h, h));
        assert!(!redirect_matches(h, "https://app.example:444/cb"));
        assert!(!redirect_matches(h, "https://app.example/cb?x=1"));
        assert!(!redirect_matches(
            "http://evil.example/cb",
            "http://evil.example:1/cb"
        ));
        assert!(check_redirect_uri("http://evil.example/cb").is_err());
        assert!(check_redirect_uri("https://user@app.example/cb").is_err());
        assert!(check_redirect_uri("https://app.example/cb#x").is_err());
        assert!(check_redirect_uri("https://app.example/c\u{0}b").is_err());
        assert!(check_redirect_uri("http://[::1]:80/cb").is_ok());
        // What would make a bad `Location` header, or a port that is no port, is refused.
        assert!(!redirect_matches(r, "http://127.0.0.1:\n/callback"));
        assert!(!redirect_matches(r, "http://127.0.0.1:x/callback"));
        assert!(check_redirect_uri("https://app.example/c\nb").is_err());
        assert!(check_redirect_uri("https://app.example/cé").is_err());
        assert!(check_redirect_uri("http://127.0.0.1:/cb").is_err());
    }

    #[test]
    fn the_s256_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert!(verifier_is_well_formed(&"a".repeat(43)));
        assert!(!verifier_is_well_formed(&"a".repeat(42)));
        assert!(!verifier_is_well_formed(&format!("{}!", "a".repeat(43))));
    }

    #[test]
    fn a_client_name_proposes_an_agent_name() {
        assert_eq!(proposed_agent("Claude Code"), "claude-code");
        assert_eq!(proposed_agent("   "), "oauth-client");
        assert_eq!(proposed_agent("☃"), "oauth-client");
    }
}
