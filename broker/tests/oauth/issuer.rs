//! An outside authorization server (`auth.issuer`): the test is the identity provider. It
//! makes a P-256 key, serves its OpenID metadata and JWKS on loopback, and signs JWTs; a good
//! one lists and calls an app's tool over `/mcp` as the agent its `sub` names, and each bad one
//! is a `401` with RFC 6750's `invalid_token` and the metadata's URL.

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use leo_testkit::{Broker, mcp};
use serde_json::{Value, json};

use super::served::Served;
use super::{anonymous, sends_to_metadata_of};
use crate::support::App;

const PUBLIC_URL: &str = "http://leo.test";
const AUDIENCE: &str = "http://leo.test/mcp";

/// A signing key of the identity provider, and its JWK.
struct Signer {
    kid: &'static str,
    key: EncodingKey,
    jwk: Value,
}

impl Signer {
    fn new(kid: &'static str) -> Signer {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        // The uncompressed point: 0x04, then x and y.
        let point = pair.public_key_raw();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        Signer {
            kid,
            key: EncodingKey::from_ec_der(&pair.serialize_der()),
            jwk: json!({"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                        "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.to_owned());
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `tools/list` in `session`: the tools' names.
async fn tools(http: &leo_testkit::Http, session: &str) -> Vec<String> {
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let r = http
        .send(
            "POST",
            "/mcp",
            body.to_string().into(),
            &mcp::in_session(session),
        )
        .await;
    mcp::response_of(&r, 2)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_issuers_tokens_open_mcp_and_bad_ones_are_refused() {
    let idp = Served::http().await;
    let issuer = idp.url("");
    let signer = Signer::new("k1");
    idp.json(
        "/.well-known/openid-configuration",
        &json!({"issuer": issuer, "jwks_uri": idp.url("/jwks")}),
    );
    idp.json("/jwks", &json!({"keys": [signer.jwk]}));
    let config = format!("auth:\n  issuer: {issuer}\n  public_url: {PUBLIC_URL}\n");
    let broker = Broker::start_with(&config).await;

    // The resource metadata names the outside issuer; Leo's own server is off.
    let http = anonymous(&broker);
    let prm = http.get("/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!(prm.status, 200, "{prm:?}");
    assert_eq!(prm.body["resource"], AUDIENCE);
    assert_eq!(prm.body["authorization_servers"], json!([issuer]));
    let asm = http.get("/.well-known/oauth-authorization-server").await;
    assert_eq!(asm.status, 404, "{asm:?}");
    let none = mcp::client(broker.addr, "x").with_token(None);
    let r = none.post("/mcp", &mcp::initialize("raw")).await;
    sends_to_metadata_of(PUBLIC_URL, &r, false);

    // A good token: the agent is its `sub`.
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([leo_testkit::app::tool("echo")]))
        .await;
    let good = json!({"iss": issuer, "aud": AUDIENCE, "sub": "idp-agent",
                      "exp": now() + 300, "iat": now()});
    let client = mcp::client(broker.addr, &signer.sign(&good));
    let session = mcp::open_session(&client, "claude-code").await;
    assert!(tools(&client, &session).await.contains(&"echo".to_owned()));
    let calling = tokio::spawn({
        let (client, session) = (client.clone(), session.clone());
        async move { mcp::call_in(&client, &session, 3, "echo").await }
    });
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "idp-agent");
    let id = req.data["id"].as_str().unwrap().to_owned();
    app.serve(&id, json!([{"type": "text", "text": "from the idp"}]))
        .await;
    let answer = calling.await.unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "from the idp");

    // Each bad token: 401, invalid_token, the metadata's URL.
    let with = |changes: Value| {
        let mut claims = good.clone();
        for (k, v) in changes.as_object().unwrap() {
            claims[k] = v.clone();
        }
        claims
    };
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let stranger = Signer::new("k2");
    let hmac = {
        // The public key's bytes as an HMAC secret: the classic algorithm confusion.
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        let secret = signer.jwk["x"].as_str().unwrap().as_bytes().to_vec();
        jsonwebtoken::encode(&header, &good, &EncodingKey::from_secret(&secret)).unwrap()
    };
    for (what, token) in [
        ("expired", signer.sign(&with(json!({"exp": now() - 600})))),
        (
            "another audience",
            signer.sign(&with(json!({"aud": "http://other.test/mcp"}))),
        ),
        (
            "another issuer",
            signer.sign(&with(json!({"iss": "https://evil.example"}))),
        ),
        ("an unknown key", stranger.sign(&good)),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(&json!({"alg": "none", "typ": "JWT", "kid": "k1"})),
                b64(&good)
            ),
        ),
        ("alg HS256 against an EC key", hmac),
        (
            "no agent name",
            signer.sign(&with(json!({"sub": "not an agent/name"}))),
        ),
    ] {
        let r = mcp::client(broker.addr, &token)
            .post("/mcp", &mcp::initialize("raw"))
            .await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
        sends_to_metadata_of(PUBLIC_URL, &r, true);
    }
    // The keys were fetched once: the unknown key asked for them again within the floor.
    assert_eq!(idp.hits("/jwks"), 1);
    assert_eq!(idp.hits("/.well-known/openid-configuration"), 1);
}
