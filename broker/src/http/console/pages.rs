//! The console's HTML pages and assets, and the login and logout routes.
//!
//! The assets are files under `broker/assets/console/`, built into the binary with
//! `include_str!`: plain HTML, one stylesheet, one script, no build step. Every response of
//! the console carries the security headers of `security_headers`; the CSP allows only this
//! origin, so the script is a file and the pages have no inline script or style.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use leo_protocol::console::LoggedOut;

use super::session::{self, Session};
use crate::http::AppState;
use crate::http::auth::BodyLimit;
use crate::http::reply::{ok, read_body};
use crate::tokens::Principal;

const INDEX: &str = include_str!("../../../assets/console/index.html");
const LOGIN: &str = include_str!("../../../assets/console/login.html");
const SCRIPT: &str = include_str!("../../../assets/console/console.js");
const STYLE: &str = include_str!("../../../assets/console/console.css");
const ICON: &str = include_str!("../../../assets/console/icon.svg");
const CONSENT: &str = include_str!("../../../assets/console/consent.js");
const GRANTS: &str = include_str!("../../../assets/console/grants.js");

/// Added to every console response.
pub async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        // `same-origin`, not `no-referrer`: under `no-referrer` Chromium sends `Origin: null`
        // with the login form's POST, which the Origin check must refuse.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// `&`, `<`, `>`, `"` and `'` as entities.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page of the console around `body` (HTML the caller escaped).
pub(crate) fn page(status: StatusCode, body: &str) -> Response {
    html(
        status,
        format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>Leo</title><link rel=\"stylesheet\" href=\"/console/console.css\">\
             <link rel=\"icon\" href=\"/console/icon.svg\" type=\"image/svg+xml\">\
             </head><body><main>{body}</main></body></html>"
        ),
    )
}

/// Where a login goes back to: only a consent page of the console, checked by its form.
fn next_of(text: &str) -> Option<&str> {
    let id = text.strip_prefix("/console/oauth/consent/")?;
    (!id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then_some(text)
}

/// The login form, with an error above the button when there is one.
fn login_form(status: StatusCode, error: Option<&str>) -> Response {
    login_form_to(status, error, None)
}

/// The login form that goes back to `next` (a consent page) once logged in.
fn login_form_to(status: StatusCode, error: Option<&str>, next: Option<&str>) -> Response {
    let error = error
        .map(|e| format!(r#"<p class="error" role="alert">{}</p>"#, escape(e)))
        .unwrap_or_default();
    let next = next
        .map(|n| {
            format!(
                r#"<input type="hidden" name="next" value="{}"></form>"#,
                escape(n)
            )
        })
        .unwrap_or_else(|| "</form>".to_owned());
    html(
        status,
        LOGIN
            .replace("<!--error-->", &error)
            .replace("</form>", &next),
    )
}

/// `GET /`: the console, for a logged-in operator (`auth` redirects everyone else to `/login`).
pub async fn index(Extension(session): Extension<Session>) -> Response {
    html(StatusCode::OK, INDEX.replace("{{csrf}}", &session.csrf))
}

/// `GET /login`: the form, or the console when the cookie is still a valid login.
pub async fn login_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let next = uri.query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "next")
            .map(|(_, v)| v.into_owned())
    });
    let next = next.as_deref().and_then(next_of);
    if state.sessions.of(&headers).is_some() {
        return Redirect::to(next.unwrap_or("/")).into_response();
    }
    login_form_to(StatusCode::OK, None, next)
}

/// `POST /login` with the form field `token`: the operator token logs in, and a paired
/// device's token when `auth.consent_devices` names the device (its login opens the consent
/// pages only).
#[tracing::instrument(name = "login", skip_all)]
pub async fn login(
    State(state): State<Arc<AppState>>,
    Extension(BodyLimit(limit)): Extension<BodyLimit>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(bytes) = read_body(body, limit).await else {
        return login_form(StatusCode::PAYLOAD_TOO_LARGE, Some("the form is too large"));
    };
    let (token, next) = match form_token(&bytes) {
        Ok(token) => token,
        Err(why) => return login_form(StatusCode::BAD_REQUEST, Some(&why)),
    };
    let Some(who) = console_login(&state, &token) else {
        tracing::info!("console login refused");
        let who = ("unknown".to_owned(), "session");
        state
            .broker
            .history()
            .audit(who, "console_login_refused", None, None);
        return login_form(
            StatusCode::UNAUTHORIZED,
            Some("That is not the operator token."),
        );
    };
    let session = match state.sessions.create(&who) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    if let Some(old) = session::cookie(&headers) {
        state.sessions.remove(old);
    }
    tracing::info!(who = %who, "console login");
    let kind = if session.is_device() {
        "device"
    } else {
        "operator"
    };
    state
        .broker
        .history()
        .audit((who, kind), "console_login", None, None);
    let cookie = state.sessions.set_cookie(&session);
    let to = next.as_deref().and_then(next_of).unwrap_or("/");
    ([(header::SET_COOKIE, cookie)], Redirect::to(to)).into_response()
}

/// Who `token` logs in to the console as: the operator, or a paired device that
/// `auth.consent_devices` allows to decide OAuth consents.
fn console_login(state: &AppState, token: &str) -> Option<String> {
    match state.tokens.lookup(token)? {
        Principal::Operator => Some("operator".to_owned()),
        Principal::Device(name) if state.broker.config().auth.device_may_consent(&name) => {
            Some(format!("device:{name}"))
        }
        _ => None,
    }
}

/// The `token` field of an `application/x-www-form-urlencoded` body, and the page to go back
/// to (`next`), the only fields allowed.
fn form_token(body: &[u8]) -> Result<(String, Option<String>), String> {
    let mut token = None;
    let mut next = None;
    for (name, value) in form_urlencoded::parse(body) {
        let slot = match &*name {
            "token" => &mut token,
            "next" => &mut next,
            _ => return Err(format!("unknown form field {name:?}")),
        };
        if slot.replace(value.trim().to_owned()).is_some() {
            return Err(format!("the form has more than one {name} field"));
        }
    }
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "Enter the operator token.".to_owned())?;
    Ok((token, next))
}

/// `POST /logout`: ends the session and deletes the cookie.
pub async fn logout(
    State(state): State<Arc<AppState>>,
    Extension(session): Extension<Session>,
) -> Response {
    state.sessions.remove(&session.id);
    tracing::info!("console logout");
    state.broker.history().audit(
        crate::http::history::actor(None),
        "console_logout",
        None,
        None,
    );
    (
        [(header::SET_COOKIE, state.sessions.clear_cookie())],
        ok(LoggedOut { logged_out: true }),
    )
        .into_response()
}

/// `GET /console/<file>`: the script, the stylesheet and the icon, by their file names (the
/// paths are routed in `rules::ROUTES`; anything else there would be a 404 here).
pub async fn asset(uri: Uri) -> Response {
    let (kind, body) = match uri.path().rsplit('/').next() {
        Some("console.js") => ("text/javascript; charset=utf-8", SCRIPT),
        Some("console.css") => ("text/css; charset=utf-8", STYLE),
        Some("icon.svg") => ("image/svg+xml", ICON),
        Some("consent.js") => ("text/javascript; charset=utf-8", CONSENT),
        Some("grants.js") => ("text/javascript; charset=utf-8", GRANTS),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// For `auth`: where a browser without a login is sent.
pub fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

/// For `auth`: a browser without a login that asked for `path` (a consent page) logs in,
/// then comes back.
pub fn to_login_then(path: &str) -> Response {
    match next_of(path) {
        Some(next) => Redirect::to(&format!("/login?next={next}")).into_response(),
        None => to_login(),
    }
}
