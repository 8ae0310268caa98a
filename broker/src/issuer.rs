//! An outside authorization server (`auth.issuer`): for a team with an identity provider
//! (Keycloak, Dex…), Leo is then only a resource server. `/mcp` accepts the JWT access tokens
//! that issuer signs, checked by its published keys (JWKS), and the agent a token opens is the
//! claim `auth.agent_claim` names (`sub` by default). Leo's own authorization server is off.
//!
//! A token is accepted when all hold: its signature verifies with a key of the issuer's JWKS
//! found by its `kid`, with that key's algorithm (a token's `alg` is never believed over its
//! key's: `none` and an HMAC `alg` against a public key, the classic forgeries, are refused,
//! and symmetric keys in a JWKS are ignored); `iss` is `auth.issuer`; `aud` holds this broker's
//! `/mcp` resource URL (`auth.public_url` + `/mcp`, so the broker's name is fixed, not taken
//! from a request); `exp` is in the future (with [`LEEWAY`]); and the agent claim is a valid
//! agent name.
//!
//! The keys are fetched at the first token, from `auth.jwks_uri` or else from the `jwks_uri`
//! of the issuer's `/.well-known/openid-configuration`, through `fetch` (size and time capped,
//! no redirects; private addresses allowed, since the operator named the issuer). They are
//! kept [`KEYS_TTL`], and fetched again sooner when a token names a `kid` they lack (the
//! issuer rotated its keys), but at most once per [`REFETCH_FLOOR`], so tokens with made-up
//! `kid`s cannot make the broker hammer the issuer.
//!
//! Crate: `jsonwebtoken` 9 (see the workspace's Cargo.toml for why that line).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use leo_protocol::names::AgentName;
use serde_json::Value;

use crate::fetch::{self, Limits};

/// How long fetched keys are used before they are fetched again.
pub const KEYS_TTL: Duration = Duration::from_secs(3600);
/// How soon keys may be fetched again for a token whose `kid` they lack.
pub const REFETCH_FLOOR: Duration = Duration::from_secs(30);
/// The clock skew allowed on `exp` and `nbf`.
pub const LEEWAY: u64 = 30;
const LIMITS: Limits = Limits {
    max_bytes: 256 * 1024,
    timeout: Duration::from_secs(5),
    allow_private: true,
    allow_http: true,
};

/// One verification key of the issuer.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

#[derive(Default)]
struct Keys {
    keys: Vec<Key>,
    fetched: Option<Instant>,
    jwks_uri: Option<String>,
}

/// The outside issuer whose tokens `/mcp` accepts.
pub struct Issuer {
    pub issuer: String,
    /// The `aud` a token must hold: this broker's `/mcp` resource URL.
    pub audience: String,
    pub agent_claim: String,
    keys: Mutex<Keys>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

/// Whether `token` has the shape of a JWT (three base64url parts, a JSON header): so the door
/// knows which check a bearer token gets.
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.split('.').count() == 3
}

impl Issuer {
    pub fn new(
        issuer: String,
        audience: String,
        agent_claim: String,
        jwks_uri: Option<String>,
    ) -> Issuer {
        Issuer {
            issuer,
            audience,
            agent_claim,
            keys: Mutex::new(Keys {
                jwks_uri,
                ..Keys::default()
            }),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The agent `token` opens, or why none (the RFC 6750 `invalid_token` description).
    pub async fn verify(&self, token: &str) -> Result<AgentName, String> {
        let kid = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("not a JWT this broker accepts: {e}"))?
            .kid;
        if let Some(done) = self.with_cached(token, kid.as_deref(), false) {
            return done;
        }
        self.refresh().await?;
        self.with_cached(token, kid.as_deref(), true)
            .unwrap_or_else(|| Err(format!("no key {kid:?} in the issuer's JWKS")))
    }

    /// The verification by the keys already fetched: `None` when they are stale or lack the
    /// token's key (unless `last`, when the keys are as fresh as they will get).
    fn with_cached(
        &self,
        token: &str,
        kid: Option<&str>,
        last: bool,
    ) -> Option<Result<AgentName, String>> {
        let keys = self.keys();
        let fresh = keys.fetched.is_some_and(|at| at.elapsed() < KEYS_TTL);
        if !fresh && !last {
            return None;
        }
        let key = keys
            .keys
            .iter()
            .find(|k| kid.is_none_or(|kid| k.kid.as_deref() == Some(kid)))?;
        Some(self.check(token, key))
    }

    fn check(&self, token: &str, key: &Key) -> Result<AgentName, String> {
        let mut v = Validation::new(key.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.leeway = LEEWAY;
        let claims = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key.key, &v)
            .map_err(|e| format!("the token is refused: {e}"))?
            .claims;
        let name = claims
            .get(&self.agent_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the token has no {:?} claim", self.agent_claim))?;
        AgentName::parse(name).map_err(|e| {
            format!(
                "the token's {:?} claim is not an agent name: {e}",
                self.agent_claim
            )
        })
    }

    /// Fetches the keys again, unless they were fetched within [`REFETCH_FLOOR`].
    async fn refresh(&self) -> Result<(), String> {
        let _one = self.fetching.lock().await;
        let (recent, uri) = {
            let k = self.keys();
            let recent = k.fetched.is_some_and(|at| at.elapsed() < REFETCH_FLOOR);
            (recent, k.jwks_uri.clone())
        };
        if recent {
            return Ok(());
        }
        let uri = match uri {
            Some(uri) => uri,
            None => self.discover().await?,
        };
        let body = fetch::get(&uri, &LIMITS)
            .await
            .map_err(|e| format!("cannot fetch the issuer's keys from {uri}: {e}"))?;
        let keys = parse_jwks(&body).map_err(|e| format!("the issuer's JWKS at {uri}: {e}"))?;
        tracing::info!(uri, keys = keys.len(), "fetched the issuer's keys");
        let mut k = self.keys();
        k.keys = keys;
        k.fetched = Some(Instant::now());
        k.jwks_uri = Some(uri);
        Ok(())
    }

    /// The `jwks_uri` of the issuer's OpenID Provider metadata, whose `issuer` must be ours.
    async fn discover(&self) -> Result<String, String> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let body = fetch::get(&url, &LIMITS)
            .await
            .map_err(|e| format!("cannot fetch the issuer's metadata {url}: {e}"))?;
        let meta: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("the issuer's metadata {url} is not JSON: {e}"))?;
        if meta["issuer"].as_str() != Some(self.issuer.as_str()) {
            return Err(format!(
                "the metadata at {url} names issuer {}, not {}",
                meta["issuer"], self.issuer
            ));
        }
        meta["jwks_uri"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("the metadata at {url} names no jwks_uri"))
    }
}

/// The signing keys of a JWKS: each key its algorithm (stated, or the one its curve or type
/// implies); encryption keys, symmetric keys and keys of unknown types are left out.
fn parse_jwks(body: &[u8]) -> Result<Vec<Key>, String> {
    let set: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let listed = set["keys"].as_array().ok_or("no \"keys\" array")?;
    let mut keys = vec![];
    for value in listed {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let Some(alg) = algorithm_of(&jwk) else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    Ok(keys)
}

/// The signature algorithm of a public key; `None` for a symmetric or unsupported one.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    let stated = jwk.common.key_algorithm.as_ref().map(|a| match a {
        KeyAlgorithm::ES256 => Some(Algorithm::ES256),
        KeyAlgorithm::ES384 => Some(Algorithm::ES384),
        KeyAlgorithm::RS256 => Some(Algorithm::RS256),
        KeyAlgorithm::RS384 => Some(Algorithm::RS384),
        KeyAlgorithm::RS512 => Some(Algorithm::RS512),
        KeyAlgorithm::PS256 => Some(Algorithm::PS256),
        KeyAlgorithm::PS384 => Some(Algorithm::PS384),
        KeyAlgorithm::PS512 => Some(Algorithm::PS512),
        KeyAlgorithm::EdDSA => Some(Algorithm::EdDSA),
        _ => None,
    });
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => Some(Algorithm::ES256),
            EllipticCurve::P384 => Some(Algorithm::ES384),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let alg = stated.unwrap_or(implied)?;
    // A stated algorithm must fit the key's type.
    let fits = matches!(
        (&jwk.algorithm, alg),
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ) | (
            AlgorithmParameters::EllipticCurve(_),
            Algorithm::ES256 | Algorithm::ES384
        ) | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
    );
    fits.then_some(alg)
}

impl crate::agent_tokens::AccessTokens for Issuer {
    fn recognizes(&self, token: &str) -> bool {
        looks_like_jwt(token)
    }

    /// A session's hello presents the token `/mcp` verified: checked again with the keys in
    /// hand (no fetch; `/mcp` fetched them if it had to).
    fn opens(&self, token: &str, agent: &AgentName) -> bool {
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return false;
        };
        self.with_cached(token, header.kid.as_deref(), true)
            .is_some_and(|r| r.is_ok_and(|a| a == *agent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_and_encryption_keys_are_never_used() {
        let jwks = serde_json::json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "h"},
            {"kty": "EC", "crv": "P-256", "use": "enc", "kid": "e",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "EC", "crv": "P-256", "kid": "s",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "EC", "crv": "P-256", "alg": "HS256", "kid": "lie",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "weird"}
        ]});
        let keys = parse_jwks(jwks.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let kept: Vec<_> = keys.iter().map(|k| (k.kid.as_deref(), k.alg)).collect();
        assert_eq!(kept, vec![(Some("s"), Algorithm::ES256)]);
        assert!(looks_like_jwt("eyJh.eyJi.c2ln"));
        assert!(!looks_like_jwt("leo_at_abc"));
    }
}
