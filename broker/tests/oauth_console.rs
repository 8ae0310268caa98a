//! The people's side of OAuth in the console: a paired device that `auth.consent_devices`
//! names logs in with its device token and approves a consent (and opens nothing else of the
//! console), and the operator lists the grants with their last use and revokes one, which
//! `/mcp` refuses at once.

use leo_testkit::{Broker, Http};
use serde_json::json;

use crate::oauth::{REDIRECT, VERIFIER, authorize, exchange, open_mcp, query, register};
use crate::support::Console;

/// `leo device pair NAME` on `broker`: the device's token.
async fn pair(broker: &Broker, name: &str) -> String {
    let (ok, out, err) = crate::security::leo(broker.home(), &["device", "pair", name]).await;
    assert!(ok, "{out}{err}");
    out.lines()
        .map(str::trim)
        .find(|l| l.len() == 64 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no token in {out}"))
        .to_owned()
}

/// The cookie of a console login with `token`, or the refusal's status.
async fn login(broker: &Broker, token: &str) -> Result<Http, u16> {
    let r = Console::try_login(&broker.http(), token).await;
    if r.status != 303 {
        return Err(r.status);
    }
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    Ok(broker
        .http()
        .with_token(None)
        .with_header("cookie", &cookie))
}

/// The consent page `page` as `http` sees it, approved as `agent`; the code it sends back.
async fn approve(http: &Http, page: &str, agent: &str) -> String {
    let shown = http.get(page).await;
    assert_eq!(shown.status, 200, "{shown:?}");
    let html = shown.body.as_str().unwrap();
    let csrf = html
        .split(r#"data-csrf=""#)
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the form's CSRF token");
    let body = json!({"approve": true, "agent": agent}).to_string();
    let r = http
        .send(
            "POST",
            page,
            body.into(),
            &[("content-type", "application/json"), ("x-leo-csrf", csrf)],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let back = r.data()["redirect"].as_str().unwrap().to_owned();
    assert!(back.starts_with(REDIRECT), "{back}");
    query(&back)["code"].clone()
}

/// A new authorization request of `client`: its consent page.
async fn consent_page(broker: &Broker, client: &str) -> String {
    let r = authorize(broker, client, &[]).await;
    assert_eq!(r.status, 303, "{r:?}");
    r.header("location").unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_the_config_names_approves_a_consent_and_nothing_else() {
    let broker = Broker::start_with("auth:\n  consent_devices: [\"phone-*\"]\n").await;
    let phone = pair(&broker, "phone-ada").await;
    let tablet = pair(&broker, "tablet").await;
    // A device the key does not name logs in no more than before.
    assert_eq!(login(&broker, &tablet).await.err(), Some(401));
    let device = login(&broker, &phone).await.expect("the phone logs in");
    // Its login opens the consent pages only.
    for path in ["/", "/console/session", "/console/oauth/grants"] {
        let r = device.get(path).await;
        assert_eq!(r.status, 403, "{path}: {r:?}");
    }

    let client = register(&broker).await;
    let page = consent_page(&broker, &client).await;
    let code = approve(&device, &page, "from-phone").await;
    let tokens = exchange(&broker, &client, &code, VERIFIER).await;
    assert_eq!(tokens.status, 200, "{tokens:?}");
    let access = tokens.body["access_token"].as_str().unwrap();
    assert_eq!(open_mcp(&broker, access, None).await.status, 200);

    // The grant and the audit trail name the device as the approver.
    let grants = broker.http().get("/api/v1/oauth/grants").await;
    let grant = &grants.data()["grants"][0];
    assert_eq!(grant["approved_by"], "device:phone-ada", "{grant}");
    assert_eq!(grant["agent"], "from-phone", "{grant}");
    let audit = broker.http().get("/api/v1/audit").await;
    let consent = audit.data()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "oauth_consent")
        .cloned()
        .unwrap_or_else(|| panic!("no consent in {audit:?}"));
    assert_eq!(consent["principal"], "device:phone-ada", "{consent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_no_device_logs_in() {
    let broker = Broker::start().await;
    let phone = pair(&broker, "phone-ada").await;
    assert_eq!(login(&broker, &phone).await.err(), Some(401));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_grants_and_a_revocation_holds_at_once() {
    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let client = register(&broker).await;
    let mut access = vec![];
    for agent in ["first", "second"] {
        let page = consent_page(&broker, &client).await;
        let code = approve(&console.http, &page, agent).await;
        let tokens = exchange(&broker, &client, &code, VERIFIER).await;
        access.push(tokens.body["access_token"].as_str().unwrap().to_owned());
    }
    let before = now_ms();
    assert_eq!(open_mcp(&broker, &access[0], None).await.status, 200);

    let listed = console.http.get("/console/oauth/grants").await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let grants = listed.data()["grants"].as_array().unwrap().clone();
    assert_eq!(grants.len(), 2, "{grants:?}");
    let first = grants.iter().find(|g| g["agent"] == "first").unwrap();
    assert_eq!(first["client_name"], "Test Client");
    assert_eq!(first["approved_by"], "operator");
    assert!(first["created_ms"].as_i64().unwrap() > 0, "{first}");
    assert!(
        first["last_used_ms"].as_i64().unwrap() >= before,
        "the /mcp call is its last use: {first}"
    );

    // Revoked from the console: refused at once, the other grant untouched.
    let id = first["id"].as_str().unwrap();
    let r = console
        .post(&format!("/console/oauth/grants/{id}/revoke"), &json!({}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(open_mcp(&broker, &access[0], None).await.status, 401);
    assert_eq!(open_mcp(&broker, &access[1], None).await.status, 200);
    let listed = console.http.get("/console/oauth/grants").await;
    let left = listed.data()["grants"].as_array().unwrap().clone();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["agent"], "second");
    // Again: no such grant. Without the CSRF token: refused.
    let again = console
        .post(&format!("/console/oauth/grants/{id}/revoke"), &json!({}))
        .await;
    assert_eq!(again.status, 404, "{again:?}");
    let other = left[0]["id"].as_str().unwrap();
    let forged = console
        .http
        .send(
            "POST",
            &format!("/console/oauth/grants/{other}/revoke"),
            "{}".into(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(forged.status, 403, "{forged:?}");
    assert_eq!(open_mcp(&broker, &access[1], None).await.status, 200);
    // The page has the section and loads its script.
    let page = console.http.get("/").await;
    let html = page.body.as_str().unwrap();
    assert!(
        html.contains(r#"id="grant-rows""#) && html.contains("/console/grants.js"),
        "{html}"
    );
    let script = console.http.get("/console/grants.js").await;
    assert_eq!(script.status, 200, "{script:?}");
}

/// Now, as the broker stamps times (milliseconds since the epoch).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
