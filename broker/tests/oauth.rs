//! OAuth 2.1 at `/mcp` against the real broker: the metadata documents' required fields, the
//! `401` that sends a client to them, the flow through the console's consent page (by hand,
//! and with the official Python SDK's OAuth client), and each refusal with the error code its
//! RFC names.

use leo_testkit::{Broker, Http, Reply, Script, mcp, require};
use serde_json::{Value, json};

use crate::support::{App, Console};

mod cimd;
mod issuer;
mod served;

const REDIRECT: &str = "http://127.0.0.1:33418/callback";
/// A verifier and its S256 challenge (RFC 7636, appendix B).
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

fn anonymous(broker: &Broker) -> Http {
    broker.http().with_token(None)
}

fn base(broker: &Broker) -> String {
    format!("http://{}", broker.addr)
}

/// The query parameters of `url`.
fn query(url: &str) -> std::collections::BTreeMap<String, String> {
    let q = url.split_once('?').map_or("", |(_, q)| q);
    form_urlencoded::parse(q.as_bytes()).into_owned().collect()
}

async fn register(broker: &Broker) -> String {
    let body = json!({"client_name": "Test Client", "redirect_uris": [REDIRECT],
                      "token_endpoint_auth_method": "none"});
    let r = anonymous(broker).post("/oauth/register", &body).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body["token_endpoint_auth_method"], "none");
    assert!(r.body.get("client_secret").is_none(), "{r:?}");
    r.body["client_id"].as_str().unwrap().to_owned()
}

/// `GET /oauth/authorize` with the usual parameters, `extra` replacing or adding some.
async fn authorize(broker: &Broker, client: &str, extra: &[(&str, &str)]) -> Reply {
    let mut params: Vec<(&str, &str)> = vec![
        ("response_type", "code"),
        ("client_id", client),
        ("redirect_uri", REDIRECT),
        ("state", "st4te"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
    ];
    for (k, v) in extra {
        params.retain(|(p, _)| p != k);
        params.push((k, v));
    }
    let q = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    anonymous(broker)
        .get(&format!("/oauth/authorize?{q}"))
        .await
}

/// Decides the consent that `authorized` sent the person to; the redirect the browser follows.
async fn decide(console: &Console, authorized: &Reply, approve: bool) -> String {
    assert_eq!(authorized.status, 303, "{authorized:?}");
    let page = authorized.header("location").unwrap().to_owned();
    assert!(page.starts_with("/console/oauth/consent/"), "{page}");
    let shown = console.http.get(&page).await;
    assert_eq!(shown.status, 200, "{shown:?}");
    let html = shown.body.as_str().unwrap();
    assert!(
        html.contains("Test Client") && html.contains(REDIRECT),
        "{html}"
    );
    let r = console
        .post(&page, &json!({"approve": approve, "agent": "scout"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    r.data()["redirect"].as_str().unwrap().to_owned()
}

/// A code of a new consent for `client`.
async fn code(broker: &Broker, console: &Console, client: &str) -> String {
    code_from(broker, console, client, &base(broker)).await
}

/// [`code`] from a broker whose issuer is `issuer`.
async fn code_from(broker: &Broker, console: &Console, client: &str, issuer: &str) -> String {
    let back = decide(console, &authorize(broker, client, &[]).await, true).await;
    let q = query(&back);
    assert!(back.starts_with(REDIRECT), "{back}");
    assert_eq!(q["state"], "st4te");
    assert_eq!(q["iss"], issuer);
    q["code"].clone()
}

/// `leo ARGS` on the broker of `home`; what it printed.
fn leo(home: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(leo_testkit::bin("leo"))
        .args(args)
        .env("LEO_HOME", home)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

async fn token(broker: &Broker, form: &[(&str, &str)]) -> Reply {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    anonymous(broker)
        .send(
            "POST",
            "/oauth/token",
            body.into(),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await
}

async fn exchange(broker: &Broker, client: &str, code: &str, verifier: &str) -> Reply {
    let form = [
        ("grant_type", "authorization_code"),
        ("client_id", client),
        ("code", code),
        ("code_verifier", verifier),
        ("redirect_uri", REDIRECT),
    ];
    token(broker, &form).await
}

async fn refresh(broker: &Broker, client: &str, refresh: &str) -> Reply {
    let form = [
        ("grant_type", "refresh_token"),
        ("client_id", client),
        ("refresh_token", refresh),
    ];
    token(broker, &form).await
}

/// An RFC 6749 error answer with `status` and `code`.
fn oauth_error(r: &Reply, status: u16, code: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.body["error"], code, "{r:?}");
}

/// `initialize` on `/mcp` with `token`, as `host` names the broker.
async fn open_mcp(broker: &Broker, token: &str, host: Option<&str>) -> Reply {
    let mut http = mcp::client(broker.addr, token);
    if let Some(host) = host {
        http = http.with_host(host);
    }
    http.post("/mcp", &mcp::initialize("raw")).await
}

/// A `401` from `/mcp` that names the resource metadata (RFC 9728 §5.1).
fn sends_to_metadata(broker: &Broker, r: &Reply, invalid: bool) {
    sends_to_metadata_of(&base(broker), r, invalid);
}

/// [`sends_to_metadata`] for the broker as `base` names it.
fn sends_to_metadata_of(base: &str, r: &Reply, invalid: bool) {
    assert_eq!(r.status, 401, "{r:?}");
    let challenge = r.header("www-authenticate").unwrap();
    let want = format!("resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    assert!(
        challenge.starts_with("Bearer ") && challenge.contains(&want),
        "{challenge}"
    );
    assert_eq!(
        challenge.contains("error=\"invalid_token\""),
        invalid,
        "{challenge}"
    );
}

/// What the protected resource metadata `prm`, fetched for `resource`, and the authorization
/// server metadata `asm`, fetched for `issuer`, lack of what RFC 9728, RFC 8414 and the MCP
/// authorization specification require: one line each, none when they conform.
fn violations(prm: &Value, resource: &str, asm: &Value, issuer: &str) -> Vec<String> {
    let mut out = vec![];
    let mut need = |ok: bool, what: &str| {
        if !ok {
            out.push(what.to_owned());
        }
    };
    let strings = |v: &Value| {
        v.as_array().map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
    };
    let has = |v: &Value, want: &str| strings(v).is_some_and(|l| l.iter().any(|x| x == want));
    let url = |v: &Value| {
        v.as_str().is_some_and(|u| {
            (u.starts_with("https://") || u.starts_with("http://")) && !u.contains(['?', '#'])
        })
    };
    // RFC 9728 §2 and §3.3: `resource` is required and is the resource it was fetched for.
    need(
        prm["resource"] == resource,
        "RFC 9728 §3.3: resource is the one fetched for",
    );
    need(
        strings(&prm["authorization_servers"]).is_some_and(|l| l == [issuer]),
        "RFC 9728 §2: authorization_servers names the issuer (MCP: at least one)",
    );
    need(
        strings(&prm["bearer_methods_supported"]).is_some_and(|l| {
            l.iter()
                .all(|m| ["header", "body", "query"].contains(&m.as_str()))
        }),
        "RFC 9728 §2: bearer_methods_supported holds RFC 6750's methods",
    );
    // RFC 8414 §2: the required members, and §3.3: issuer is the one fetched for.
    need(
        asm["issuer"] == issuer && url(&asm["issuer"]),
        "RFC 8414 §3.3: issuer",
    );
    for field in ["authorization_endpoint", "token_endpoint"] {
        need(url(&asm[field]), &format!("RFC 8414 §2: {field} is a URL"));
    }
    if !asm["registration_endpoint"].is_null() {
        need(
            url(&asm["registration_endpoint"]),
            "RFC 8414 §2: registration_endpoint",
        );
    }
    need(
        has(&asm["response_types_supported"], "code"),
        "RFC 8414 §2: response_types_supported",
    );
    // OAuth 2.1 and the MCP authorization spec: the code flow, PKCE S256 (a client must refuse
    // a server that does not list it), public clients, refresh, and RFC 9207's `iss`.
    need(
        has(&asm["grant_types_supported"], "authorization_code"),
        "grant_types_supported",
    );
    need(
        strings(&asm["code_challenge_methods_supported"]).is_some_and(|l| l == ["S256"]),
        "MCP: code_challenge_methods_supported is S256 (never plain)",
    );
    need(
        has(&asm["token_endpoint_auth_methods_supported"], "none"),
        "MCP: public clients (token_endpoint_auth_methods_supported has none)",
    );
    need(
        asm["authorization_response_iss_parameter_supported"] == true,
        "RFC 9207: authorization_response_iss_parameter_supported",
    );
    need(
        asm["client_id_metadata_document_supported"].is_boolean(),
        "MCP 2026-07-28: client_id_metadata_document_supported",
    );
    out
}

#[test]
fn the_conformance_check_finds_what_is_missing() {
    let prm = json!({"resource": "http://a/mcp", "authorization_servers": ["http://a"],
                     "bearer_methods_supported": ["header"]});
    let asm = json!({"issuer": "http://a", "authorization_endpoint": "http://a/authorize",
        "token_endpoint": "http://a/token", "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true,
        "client_id_metadata_document_supported": false});
    assert_eq!(
        violations(&prm, "http://a/mcp", &asm, "http://a"),
        Vec::<String>::new()
    );
    for (field, bad) in [
        ("code_challenge_methods_supported", json!(["plain", "S256"])),
        ("issuer", json!("http://b")),
        ("token_endpoint", json!("http://a/token#x")),
        ("response_types_supported", json!(["token"])),
        (
            "authorization_response_iss_parameter_supported",
            Value::Null,
        ),
    ] {
        let mut broken = asm.clone();
        broken[field] = bad;
        assert_eq!(
            violations(&prm, "http://a/mcp", &broken, "http://a").len(),
            1,
            "{field}"
        );
    }
    assert_eq!(
        violations(&prm, "http://a/other", &asm, "http://a").len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_documents_hold_what_the_rfcs_require() {
    let broker = Broker::start().await;
    let http = anonymous(&broker);
    let base = base(&broker);
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let prm = http.get(path).await;
        assert_eq!(prm.status, 200, "{prm:?}");
        // RFC 9728 §2: `resource` is required, and names the resource the client asked about.
        assert_eq!(prm.body["resource"], format!("{base}/mcp"));
        assert_eq!(prm.body["authorization_servers"], json!([base]));
    }
    let asm = http.get("/.well-known/oauth-authorization-server").await;
    assert_eq!(asm.status, 200, "{asm:?}");
    assert_eq!(asm.header("content-type"), Some("application/json"));
    let prm = http.get("/.well-known/oauth-protected-resource/mcp").await;
    let found = violations(&prm.body, &format!("{base}/mcp"), &asm.body, &base);
    assert!(found.is_empty(), "{found:?}");
    // RFC 8414 §2 (required: issuer, authorization_endpoint, token_endpoint,
    // response_types_supported) and §3.3 (issuer is the one the document was fetched for).
    let m = &asm.body;
    assert_eq!(m["issuer"], base);
    assert_eq!(
        m["authorization_endpoint"],
        format!("{base}/oauth/authorize")
    );
    assert_eq!(m["token_endpoint"], format!("{base}/oauth/token"));
    assert_eq!(m["registration_endpoint"], format!("{base}/oauth/register"));
    assert_eq!(m["response_types_supported"], json!(["code"]));
    // The MCP authorization spec: PKCE S256 must be listed; RFC 9207's flag.
    assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(m["authorization_response_iss_parameter_supported"], true);

    // No token, and a token that is no token: 401 with the metadata's URL.
    let none = mcp::client(broker.addr, "x").with_token(None);
    sends_to_metadata(
        &broker,
        &none.post("/mcp", &mcp::initialize("raw")).await,
        false,
    );
    let bad = open_mcp(&broker, &format!("leo_at_{}", "A".repeat(43)), None).await;
    sends_to_metadata(&broker, &bad, true);
    // The shared agent token still opens `/mcp` as before.
    let agent = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "old");
    let opened = agent.post("/mcp", &mcp::initialize("raw")).await;
    assert_eq!(opened.status, 200, "{opened:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wrong_step_is_refused_with_its_rfc_code() {
    let broker = Broker::start_with("auth:\n  access_ttl_s: 2\n").await;
    let console = Console::login(&broker).await;
    let client = register(&broker).await;

    // A redirect URI the client did not register: never redirected to (RFC 6749 §4.1.2.1).
    let r = authorize(
        &broker,
        &client,
        &[("redirect_uri", "http://127.0.0.1:1/evil")],
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.body.as_str().unwrap().starts_with("invalid_request"),
        "{r:?}"
    );
    let r = authorize(&broker, "oc_nobody", &[]).await;
    assert_eq!(r.status, 400, "{r:?}");
    // A loopback redirect URI on "any port" whose port is no port (here a line break, which
    // would make a broken Location header): not the client's.
    for bad in [
        "http://127.0.0.1:\n/callback",
        "http://127.0.0.1:x/callback",
    ] {
        let r = authorize(
            &broker,
            &client,
            &[("redirect_uri", bad), ("response_type", "token")],
        )
        .await;
        assert_eq!(r.status, 400, "{bad:?}: {r:?}");
    }
    // The client's own redirect URI on another loopback port is its (RFC 8252 §7.3).
    let other_port = authorize(
        &broker,
        &client,
        &[("redirect_uri", "http://127.0.0.1:5/callback")],
    )
    .await;
    assert_eq!(other_port.status, 303, "{other_port:?}");
    // PKCE S256 only, and the resource must be this broker's `/mcp`: the error goes back to
    // the client, with its state and the issuer.
    for (extra, want) in [
        (("code_challenge_method", "plain"), "invalid_request"),
        (
            ("resource", "https://elsewhere.example/mcp"),
            "invalid_target",
        ),
        (("response_type", "token"), "unsupported_response_type"),
    ] {
        let r = authorize(&broker, &client, &[extra]).await;
        assert_eq!(r.status, 303, "{r:?}");
        let q = query(r.header("location").unwrap());
        assert_eq!(q["error"], want, "{q:?}");
        assert_eq!(
            (q["state"].as_str(), q["iss"].as_str()),
            ("st4te", base(&broker).as_str())
        );
    }
    let r = authorize(&broker, &client, &[("code_challenge", "")]).await;
    assert_eq!(
        query(r.header("location").unwrap())["error"],
        "invalid_request"
    );

    // Consent denied: access_denied, with the state.
    let back = decide(&console, &authorize(&broker, &client, &[]).await, false).await;
    let q = query(&back);
    assert_eq!(
        (q["error"].as_str(), q["state"].as_str()),
        ("access_denied", "st4te")
    );
    assert!(!q.contains_key("code"));

    // A wrong verifier: invalid_grant, and the code is spent.
    let c = code(&broker, &console, &client).await;
    oauth_error(
        &exchange(&broker, &client, &c, &"x".repeat(43)).await,
        400,
        "invalid_grant",
    );
    oauth_error(
        &exchange(&broker, &client, &c, VERIFIER).await,
        400,
        "invalid_grant",
    );
    // A good exchange, then the same code again.
    let c = code(&broker, &console, &client).await;
    let tokens = exchange(&broker, &client, &c, VERIFIER).await;
    assert_eq!(tokens.status, 200, "{tokens:?}");
    assert_eq!(tokens.body["token_type"], "Bearer");
    assert_eq!(tokens.header("cache-control"), Some("no-store"));
    oauth_error(
        &exchange(&broker, &client, &c, VERIFIER).await,
        400,
        "invalid_grant",
    );
    // Another client cannot use the code's client's tokens; an unknown one is invalid_client.
    oauth_error(
        &refresh(&broker, "oc_nobody", "x").await,
        401,
        "invalid_client",
    );
    let access = tokens.body["access_token"].as_str().unwrap().to_owned();
    let rt = tokens.body["refresh_token"].as_str().unwrap().to_owned();

    // The access token opens `/mcp` as its agent, for this resource only (its aud): the same
    // broker named `localhost` is another resource.
    let opened = open_mcp(&broker, &access, None).await;
    assert_eq!(opened.status, 200, "{opened:?}");
    let elsewhere = format!("localhost:{}", broker.addr.port());
    let r = open_mcp(&broker, &access, Some(&elsewhere)).await;
    sends_to_metadata_of(&format!("http://{elsewhere}"), &r, true);
    let as_other = mcp::client(broker.addr, &access).with_header("leo-agent", "rocket");
    let r = as_other.post("/mcp", &mcp::initialize("raw")).await;
    assert_eq!(r.status, 403, "{r:?}");
    let wrong_target = [
        ("grant_type", "refresh_token"),
        ("client_id", client.as_str()),
        ("refresh_token", rt.as_str()),
        ("resource", "https://elsewhere.example/mcp"),
    ];
    oauth_error(&token(&broker, &wrong_target).await, 400, "invalid_target");

    // Refresh rotates; the old refresh token again revokes the whole grant.
    let second = refresh(&broker, &client, &rt).await;
    assert_eq!(second.status, 200, "{second:?}");
    let access2 = second.body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(open_mcp(&broker, &access2, None).await.status, 200);
    oauth_error(&refresh(&broker, &client, &rt).await, 400, "invalid_grant");
    sends_to_metadata(&broker, &open_mcp(&broker, &access2, None).await, true);
    let rt2 = second.body["refresh_token"].as_str().unwrap();
    oauth_error(&refresh(&broker, &client, rt2).await, 400, "invalid_grant");

    // An expired access token.
    let c = code(&broker, &console, &client).await;
    let tokens = exchange(&broker, &client, &c, VERIFIER).await;
    let access = tokens.body["access_token"].as_str().unwrap();
    assert_eq!(open_mcp(&broker, access, None).await.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    sends_to_metadata(&broker, &open_mcp(&broker, access, None).await, true);

    // The audit trail has each step.
    let audit = broker.http().get("/api/v1/audit").await;
    let actions: Vec<&str> = audit.data()["entries"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["action"].as_str()).collect())
        .unwrap_or_default();
    for want in [
        "oauth_register",
        "oauth_consent",
        "oauth_refused",
        "oauth_issue",
        "oauth_refresh",
    ] {
        assert!(actions.contains(&want), "{want} not in {actions:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_survives_a_restart_and_its_revocation_holds_at_once() {
    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let client = register(&broker).await;
    let c = code(&broker, &console, &client).await;
    let tokens = exchange(&broker, &client, &c, VERIFIER).await;
    let access = tokens.body["access_token"].as_str().unwrap().to_owned();
    // The same port: the resource (the token's aud) is the broker's URL.
    let port = broker.addr.port();
    let home = broker.stop_keep_home().await.1;
    let broker = Broker::start_in_on(home, port).await;
    assert_eq!(open_mcp(&broker, &access, None).await.status, 200);

    let listed = broker.http().get("/api/v1/oauth/grants").await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let grants = listed.data()["grants"].as_array().unwrap().clone();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0]["agent"], "scout");
    assert_eq!(grants[0]["client_name"], "Test Client");
    let id = grants[0]["id"].as_str().unwrap();
    // `leo agent grants` lists it, `leo agent revoke` ends it at once.
    let printed = leo(broker.home(), &["agent", "grants"]);
    assert!(
        printed.contains(id) && printed.contains("agent scout"),
        "{printed}"
    );
    let printed = leo(broker.home(), &["agent", "revoke", id]);
    assert!(printed.contains(id), "{printed}");
    sends_to_metadata(&broker, &open_mcp(&broker, &access, None).await, true);
    assert_eq!(
        leo(broker.home(), &["agent", "grants"]),
        "No OAuth grants.\n"
    );
}

/// A token's status on `/mcp` of `broker`.
async fn mcp_status(broker: &Broker, token: &str) -> u16 {
    open_mcp(broker, token, None).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_grants_are_the_databases_and_a_revocation_holds_everywhere() {
    let Some(db) = leo_testkit::postgres::database().await else {
        return;
    };
    // One public URL for every instance: the issuer and the tokens' resource.
    let issuer = "http://leo.test";
    let config = format!("{}auth:\n  public_url: {issuer}\n", db.config());
    let mut all = leo_testkit::cluster::start(&config, 2).await;
    let (a, b) = (&all[0], &all[1]);
    // Two grants, made through the follower B (which forwards to the leader A).
    let console = Console::login(b).await;
    let client = register(b).await;
    let mut access = vec![];
    for _ in 0..2 {
        let c = code_from(b, &console, &client, issuer).await;
        let tokens = exchange(b, &client, &c, VERIFIER).await;
        assert_eq!(tokens.status, 200, "{tokens:?}");
        access.push(tokens.body["access_token"].as_str().unwrap().to_owned());
    }
    for token in &access {
        assert_eq!(mcp_status(a, token).await, 200);
        assert_eq!(mcp_status(b, token).await, 200);
    }
    // Revoked on B: refused on A within 2 s (at once: the leader decides every request).
    let listed = leo(b.home(), &["agent", "grants"]);
    let first = listed.split_whitespace().next().unwrap().to_owned();
    leo(b.home(), &["agent", "revoke", &first]);
    let revoked_at = std::time::Instant::now();
    let gone = loop {
        let mut refused = vec![];
        for (i, token) in access.iter().enumerate() {
            if mcp_status(a, token).await == 401 {
                refused.push(i);
            }
        }
        if let [i] = refused[..] {
            break access.remove(i);
        }
        assert!(refused.is_empty(), "both grants were revoked");
        assert!(revoked_at.elapsed() < std::time::Duration::from_secs(2));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(mcp_status(b, &gone).await, 401);
    assert_eq!(mcp_status(b, &access[0]).await, 200);

    // The leader stops: B leads, reads the grants from the database, and keeps both the grant
    // in force and the revocation.
    let a = all.remove(0);
    drop(a.stop_keep_home().await);
    let b = &all[0];
    crate::support::eventually(|| async { mcp_status(b, &access[0]).await == 200 }).await;
    assert_eq!(mcp_status(b, &gone).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_logs_in_through_the_console_and_calls_a_tool() {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start().await;
    let client_id = sdk_login(&broker, &python, None).await;
    assert!(client_id.starts_with("oc_"), "{client_id}");
}

/// The Python SDK's OAuth client logs in to `broker` (by the metadata document at `cimd`, or
/// else by registering), approved in the console as agent `sdk-agent`, then lists and calls an
/// app's tool over `/mcp`; the client_id it used.
async fn sdk_login(broker: &Broker, python: &std::path::Path, cimd: Option<&str>) -> String {
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([leo_testkit::app::tool("echo")]))
        .await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oauth/sdk_client.py");
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(script)
        .env("LEO_MCP_URL", format!("{}/mcp", base(broker)));
    if let Some(url) = cimd {
        cmd.env("LEO_CIMD_URL", url);
    }
    let mut script = Script::spawn(cmd, &broker.home().join("sdk_client.stderr"));

    let url = script.step("authorize").await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = url.strip_prefix(&base(broker)).unwrap();
    let authorized = anonymous(broker).get(path).await;
    // Not logged in yet: the consent page sends the person to log in, and back.
    let page = authorized.header("location").unwrap().to_owned();
    let login = anonymous(broker).get(&page).await;
    assert_eq!(login.status, 303, "{login:?}");
    assert_eq!(
        login.header("location"),
        Some(format!("/login?next={page}").as_str())
    );
    let console = Console::login(broker).await;
    let shown = console.http.get(&page).await;
    assert!(
        shown.body.as_str().unwrap().contains("SDK Client"),
        "{shown:?}"
    );
    let r = console
        .post(&page, &json!({"approve": true, "agent": "sdk-agent"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    script
        .send_line(r.data()["redirect"].as_str().unwrap())
        .await;

    let connected = script.step("connected").await;
    assert!(connected["token"].as_str().unwrap().starts_with("leo_at_"));
    let listed = script.step("listed").await;
    let tools = listed["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("echo")), "{listed}");
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "sdk-agent");
    let id = req.data["id"].as_str().unwrap().to_owned();
    app.serve(&id, json!([{"type": "text", "text": "hi back"}]))
        .await;
    let called = script.step("called").await;
    assert_eq!(called["result"]["content"][0]["text"], "hi back");
    script.step("done").await;
    connected["client_id"].as_str().unwrap().to_owned()
}
