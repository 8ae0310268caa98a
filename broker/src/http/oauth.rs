//! The OAuth endpoints (the rules are `crate::oauth`): the metadata documents, registration,
//! the authorization endpoint, which sends the person to the console's consent page, that
//! page and its decision, the token endpoint, and the operator's list and revocation of grants.
//!
//! Errors are the RFCs' own: a JSON `{error, error_description}` with `400` (`401` for
//! `invalid_client`) from the registration and token endpoints; from the authorization
//! endpoint, a redirect to the client with `error`, `state` and `iss` once the client and its
//! redirect URI are known good, and a plain `400` page before (RFC 6749 §4.1.2.1: never
//! redirect to a URI that is not the client's).

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use leo_protocol::ErrorCode;
use leo_protocol::names::AgentName;
use leo_protocol::oauth::{
    AUTHORIZE_PATH, ClientMetadata, Decided, Decision, Grants, MCP_RESOURCE_METADATA_PATH,
    OAuthError, REGISTER_PATH, Registered, ResourceMetadata, Revoked, ServerMetadata, TOKEN_PATH,
    Tokens,
};

use super::AppState;
use super::console::session::Session;
use super::reply::{ok, read_body};
use crate::oauth::parse::params;
use crate::oauth::{AuthError, OAuth, PendingRequest};
use crate::refusal::Refusal;

/// The largest body the registration and token endpoints read.
const FORM_BODY: usize = 16 * 1024;

/// The broker's base URL as this request names it: `auth.public_url`, else the scheme of the
/// listener and the request's Host (which the Host check has held to the allowed names).
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if state.https { "https" } else { "http" };
    format!("{scheme}://{host}")
}

/// `/mcp`'s resource URL (RFC 8707), the `aud` of its access tokens.
pub fn resource_url(state: &AppState, headers: &HeaderMap) -> String {
    format!("{}{}", base_url(state, headers), super::rules::MCP_PATH)
}

/// The `WWW-Authenticate` of a `401` from `/mcp` (RFC 9728 §5.1), with the RFC 6750 error
/// when a token was presented.
pub fn challenge(state: &AppState, headers: &HeaderMap, invalid: bool) -> String {
    let url = format!("{}{MCP_RESOURCE_METADATA_PATH}", base_url(state, headers));
    if invalid {
        format!("Bearer error=\"invalid_token\", resource_metadata=\"{url}\"")
    } else {
        format!("Bearer resource_metadata=\"{url}\"")
    }
}

fn oauth(state: &AppState) -> Result<&Arc<OAuth>, Refusal> {
    state.oauth.as_ref().ok_or_else(|| {
        Refusal::new(
            ErrorCode::NotFound,
            "this broker serves no OAuth (auth.oauth is off)",
        )
    })
}

/// An RFC 6749 §5.2 error body.
fn failed(e: &AuthError) -> Response {
    let status = match e.error {
        "invalid_client" => StatusCode::UNAUTHORIZED,
        "server_error" => StatusCode::INTERNAL_SERVER_ERROR,
        "temporarily_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    };
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(OAuthError {
            error: e.error.to_owned(),
            error_description: e.description.clone(),
        }),
    )
        .into_response()
}

fn bad(error: &'static str, description: impl Into<String>) -> AuthError {
    AuthError {
        error,
        description: description.into(),
    }
}

/// `GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728).
pub async fn resource_metadata(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // With an outside issuer, it is the one authorization server.
    let server = match (&state.issuer, oauth(&state)) {
        (Some(issuer), _) => issuer.issuer.clone(),
        (None, Ok(_)) => base_url(&state, &headers),
        (None, Err(e)) => return e.into_response(),
    };
    axum::Json(ResourceMetadata {
        resource: resource_url(&state, &headers),
        authorization_servers: vec![server],
        bearer_methods_supported: vec!["header".into()],
        resource_name: "Leo".into(),
    })
    .into_response()
}

/// `GET /.well-known/oauth-authorization-server` (RFC 8414).
pub async fn server_metadata(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let oauth = match oauth(&state) {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    let base = base_url(&state, &headers);
    let list = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    axum::Json(ServerMetadata {
        issuer: base.clone(),
        authorization_endpoint: format!("{base}{AUTHORIZE_PATH}"),
        token_endpoint: format!("{base}{TOKEN_PATH}"),
        registration_endpoint: oauth
            .settings
            .dynamic_registration
            .then(|| format!("{base}{REGISTER_PATH}")),
        response_types_supported: list(&["code"]),
        response_modes_supported: list(&["query"]),
        grant_types_supported: list(&["authorization_code", "refresh_token"]),
        token_endpoint_auth_methods_supported: list(&[
            "none",
            "client_secret_post",
            "client_secret_basic",
        ]),
        code_challenge_methods_supported: list(&["S256"]),
        authorization_response_iss_parameter_supported: true,
        client_id_metadata_document_supported: oauth.settings.metadata_documents,
    })
    .into_response()
}

/// The authorization server and the request's body, or the answer when there is none.
async fn oauth_and_body(state: &AppState, body: Body) -> Result<(Arc<OAuth>, Vec<u8>), Response> {
    let oauth = oauth(state).map_err(IntoResponse::into_response)?.clone();
    let bytes = read_body(body, FORM_BODY)
        .await
        .map_err(IntoResponse::into_response)?;
    Ok((oauth, bytes))
}

/// `POST /oauth/register` (RFC 7591).
pub async fn register(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let (oauth, bytes) = match oauth_and_body(&state, body).await {
        Ok(got) => got,
        Err(answer) => return answer,
    };
    let meta: ClientMetadata = match serde_json::from_slice(&bytes) {
        Ok(m) => m,
        Err(e) => return failed(&bad("invalid_client_metadata", e.to_string())),
    };
    let (client, secret) = match oauth.register(meta.clone()).await {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    let who = (client.client_id.clone(), "oauth_client");
    let detail = format!(
        "name {:?}, redirect_uris {:?}",
        client.name, client.redirect_uris
    );
    state
        .broker
        .history()
        .audit(who, "oauth_register", Some(&client.client_id), Some(detail));
    let method = client.how.trim_start_matches("dcr:").to_owned();
    let body = Registered {
        client_id: client.client_id,
        client_secret_expires_at: secret.as_ref().map(|_| 0),
        client_secret: secret,
        client_id_issued_at: client.created_ms / 1000,
        client_name: client.name,
        redirect_uris: client.redirect_uris,
        token_endpoint_auth_method: method,
        grant_types: vec!["authorization_code".into(), "refresh_token".into()],
        response_types: vec!["code".into()],
    };
    (
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(body),
    )
        .into_response()
}

/// The client's redirect URI with `query` added.
fn back_to(redirect_uri: &str, query: &[(&str, &str)]) -> String {
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for (k, v) in query {
        ser.append_pair(k, v);
    }
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    format!("{redirect_uri}{sep}{}", ser.finish())
}

/// An error sent back to a known client's redirect URI (RFC 6749 §4.1.2.1, RFC 9207).
fn redirect_error(uri: &str, e: &AuthError, state: Option<&str>, iss: &str) -> Response {
    let mut q = vec![
        ("error", e.error),
        ("error_description", e.description.as_str()),
    ];
    if let Some(s) = state {
        q.push(("state", s));
    }
    q.push(("iss", iss));
    Redirect::to(&back_to(uri, &q)).into_response()
}

/// A plain page for an authorization request that cannot go back to its client.
fn no_redirect(e: &AuthError) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{}: {}\n", e.error, e.description),
    )
        .into_response()
}

/// `GET /oauth/authorize`: checks the request, then sends the person to the consent page.
pub async fn authorize(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let oauth = match oauth(&state) {
        Ok(o) => o.clone(),
        Err(e) => return e.into_response(),
    };
    let p = match params(uri.query().unwrap_or("").as_bytes()) {
        Ok(p) => p,
        Err(e) => return no_redirect(&e),
    };
    let Some(client_id) = p.get("client_id") else {
        return no_redirect(&bad("invalid_request", "client_id is required"));
    };
    let (client, redirect_uri) = match oauth
        .redirect_for(client_id, p.get("redirect_uri").map(String::as_str))
        .await
    {
        Ok(r) => r,
        Err(e) => return no_redirect(&e),
    };
    let iss = base_url(&state, &headers);
    let st = p.get("state").map(String::as_str);
    let resource = resource_url(&state, &headers);
    let checked = (|| {
        if p.get("response_type").map(String::as_str) != Some("code") {
            return Err(bad(
                "unsupported_response_type",
                "response_type must be code",
            ));
        }
        let challenge = p
            .get("code_challenge")
            .filter(|c| crate::oauth::verifier_is_well_formed(c))
            .ok_or_else(|| bad("invalid_request", "a code_challenge (PKCE) is required"))?;
        if p.get("code_challenge_method").map(String::as_str) != Some("S256") {
            return Err(bad("invalid_request", "code_challenge_method must be S256"));
        }
        if p.get("resource").is_some_and(|r| *r != resource) {
            return Err(bad(
                "invalid_target",
                format!("this server is the resource {resource}"),
            ));
        }
        Ok(challenge.clone())
    })();
    let challenge = match checked {
        Ok(c) => c,
        Err(e) => return redirect_error(&redirect_uri, &e, st, &iss),
    };
    let from = format!(
        "{} ({})",
        headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("direct"),
        headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no user agent")
    );
    let pending = PendingRequest {
        client,
        redirect_uri: redirect_uri.clone(),
        state: st.map(str::to_owned),
        challenge,
        resource,
        from,
        issuer: iss.clone(),
    };
    match oauth.wait_for_consent(pending) {
        Ok(id) => Redirect::to(&format!("/console/oauth/consent/{id}")).into_response(),
        Err(e) => redirect_error(&redirect_uri, &e, st, &iss),
    }
}

/// `GET /console/oauth/consent/{id}`: who asks, from where, as which agent; approve or deny.
pub async fn consent_page(
    State(state): State<Arc<AppState>>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    let oauth = match oauth(&state) {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    let Some(p) = oauth.pending(&id).map(|p| p.request) else {
        return super::console::pages::page(
            StatusCode::NOT_FOUND,
            "<h1>No such request</h1><p>This authorization request is unknown or expired. \
             Start the login from the client again.</p>",
        );
    };
    let e = super::console::pages::escape;
    let how = if p.client.how == crate::oauth::cimd::HOW {
        "is described by the metadata document at that URL"
    } else {
        "registered itself with this broker (dynamic client registration)"
    };
    let body = format!(
        r#"<h1>Allow an MCP client?</h1>
<form id="consent" data-csrf="{csrf}">
<p><strong>{name}</strong> asks to use this broker's tools at <code>{resource}</code>.</p>
<dl>
<dt>Client</dt><dd><code>{client_id}</code>, which {how}</dd>
<dt>Sends you back to</dt><dd><code>{redirect}</code></dd>
<dt>From</dt><dd>{from}</dd>
</dl>
<label for="agent">It will act as the agent</label>
<input id="agent" name="agent" value="{agent}" required pattern="[A-Za-z0-9_.\-]{{1,64}}">
<p><button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button></p>
<p class="error" id="consent-error" role="alert"></p>
</form>
<script src="/console/consent.js"></script>"#,
        csrf = e(&session.csrf),
        name = e(&p.client.name),
        resource = e(&p.resource),
        client_id = e(&p.client.client_id),
        redirect = e(&p.redirect_uri),
        from = e(&p.from),
        agent = e(&crate::oauth::proposed_agent(&p.client.name)),
    );
    super::console::pages::page(StatusCode::OK, &body)
}

/// `POST /console/oauth/consent/{id}` with a [`Decision`]: the browser goes where the answer
/// says (the client's redirect URI, with a code or `access_denied`).
pub async fn consent_decide(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let oauth = match oauth(&state) {
        Ok(o) => o.clone(),
        Err(e) => return e.into_response(),
    };
    let decision: Decision = match read_body(body, FORM_BODY).await.and_then(|b| {
        leo_protocol::envelope::parse_json::<Decision>(&b)
            .map_err(|e| Refusal::new(ErrorCode::InvalidParameter, e.message))
    }) {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    let agent = match (decision.approve, decision.agent.as_deref()) {
        (false, _) => None,
        (true, Some(a)) => match AgentName::parse(a.trim()) {
            Ok(a) => Some(a),
            Err(e) => {
                return Refusal::new(ErrorCode::InvalidParameter, format!("at $.agent: {e}"))
                    .into_response();
            }
        },
        (true, None) => {
            return Refusal::new(ErrorCode::InvalidParameter, "at $.agent: name the agent")
                .into_response();
        }
    };
    let (pending, code) = match oauth.decide(&id, agent.as_ref(), "operator").await {
        Ok(d) => d,
        Err(e) if e.error == "invalid_request" => {
            return Refusal::new(ErrorCode::NotFound, e.description).into_response();
        }
        Err(e) => return Refusal::new(ErrorCode::Internal, e.description).into_response(),
    };
    let who = ("operator".to_owned(), "session");
    let st = pending.state.as_deref();
    let redirect = match (&code, &agent) {
        (Some(code), Some(agent)) => {
            let detail = format!(
                "client {:?} ({}) as agent {agent}",
                pending.client.name, pending.client.client_id
            );
            state
                .broker
                .history()
                .audit(who, "oauth_consent", Some(agent.as_str()), Some(detail));
            let mut q = vec![("code", code.as_str())];
            q.extend(st.map(|s| ("state", s)));
            q.push(("iss", pending.issuer.as_str()));
            back_to(&pending.redirect_uri, &q)
        }
        _ => {
            let detail = format!(
                "client {:?} ({})",
                pending.client.name, pending.client.client_id
            );
            state.broker.history().audit(
                who,
                "oauth_refused",
                Some(&pending.client.client_id),
                Some(detail),
            );
            let mut q = vec![
                ("error", "access_denied"),
                ("error_description", "the approver denied the request"),
            ];
            q.extend(st.map(|s| ("state", s)));
            q.push(("iss", pending.issuer.as_str()));
            back_to(&pending.redirect_uri, &q)
        }
    };
    ok(Decided { redirect })
}

/// The client's id and secret at the token endpoint: `client_secret_basic` (RFC 6749
/// §2.3.1) or the form's fields.
fn client_of(
    headers: &HeaderMap,
    form: &std::collections::BTreeMap<String, String>,
) -> Result<(String, Option<String>), AuthError> {
    use base64::Engine;
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "));
    if let Some(b) = basic {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .ok_or_else(|| bad("invalid_client", "a malformed Basic authorization"))?;
        let (id, secret) = decoded
            .split_once(':')
            .ok_or_else(|| bad("invalid_client", "a malformed Basic authorization"))?;
        let unescape = |s: &str| {
            form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        return Ok((unescape(id), Some(unescape(secret))));
    }
    let id = form
        .get("client_id")
        .cloned()
        .ok_or_else(|| bad("invalid_client", "client_id is required"))?;
    Ok((id, form.get("client_secret").cloned()))
}

/// `POST /oauth/token`: `authorization_code` or `refresh_token`.
pub async fn token(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let (oauth, bytes) = match oauth_and_body(&state, body).await {
        Ok(got) => got,
        Err(answer) => return answer,
    };
    let result = async {
        let form = params(&bytes)?;
        let (id, secret) = client_of(&headers, &form)?;
        let client = (id.as_str(), secret.as_deref());
        let field = |name: &str| form.get(name).map(String::as_str);
        let need = |name: &'static str| {
            field(name).ok_or_else(|| bad("invalid_request", format!("{name} is required")))
        };
        match field("grant_type") {
            Some("authorization_code") => {
                let verifier = need("code_verifier")?;
                if !crate::oauth::verifier_is_well_formed(verifier) {
                    return Err(bad("invalid_grant", "code_verifier is not well formed"));
                }
                let got = oauth
                    .exchange_code(
                        client,
                        need("code")?,
                        verifier,
                        field("redirect_uri"),
                        field("resource"),
                    )
                    .await?;
                Ok(("oauth_issue", got))
            }
            Some("refresh_token") => {
                let got = oauth
                    .refresh(client, need("refresh_token")?, field("resource"))
                    .await?;
                Ok(("oauth_refresh", got))
            }
            Some(other) => Err(bad(
                "unsupported_grant_type",
                format!("grant_type {other:?} is not supported"),
            )),
            None => Err(bad("invalid_request", "grant_type is required")),
        }
    }
    .await;
    match result {
        Ok((action, (access, refresh, opened))) => {
            let who = (opened.client_id.clone(), "oauth_client");
            let detail = format!("grant {} for agent {}", opened.grant_id, opened.agent);
            state
                .broker
                .history()
                .audit(who, action, Some(opened.agent.as_str()), Some(detail));
            let body = Tokens {
                access_token: access,
                token_type: "Bearer".into(),
                expires_in: oauth.settings.access_ttl.as_secs(),
                refresh_token: refresh,
            };
            (
                [
                    (header::CACHE_CONTROL, "no-store"),
                    (header::PRAGMA, "no-cache"),
                ],
                axum::Json(body),
            )
                .into_response()
        }
        Err(e) => failed(&e),
    }
}

/// `GET /api/v1/oauth/grants`: the grants in force.
pub async fn grants(State(state): State<Arc<AppState>>) -> Response {
    match oauth(&state) {
        Ok(o) => ok(Grants { grants: o.grants() }),
        Err(e) => e.into_response(),
    }
}

/// `DELETE /api/v1/oauth/grants/{id}`: revokes a grant and its tokens, at once.
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    who: Option<Extension<crate::tokens::Principal>>,
    Path(id): Path<String>,
) -> Response {
    let oauth = match oauth(&state) {
        Ok(o) => o.clone(),
        Err(e) => return e.into_response(),
    };
    match oauth.revoke(&id).await {
        Ok(true) => {
            let who = who.map(|Extension(p)| p);
            super::history::audit(&state, who.as_ref(), "oauth_revoke", &id, None);
            ok(Revoked { revoked: id })
        }
        Ok(false) => Refusal::new(ErrorCode::NotFound, format!("no grant {id:?}")).into_response(),
        Err(e) => Refusal::new(ErrorCode::Internal, e.description).into_response(),
    }
}
