//! Shared pieces: an app played by the test (the test kit's), an agent played through raw IPC
//! frames, and a logged-in web console.

use leo_testkit::{Broker, Http, Ipc, Reply, Sse};
use serde_json::Value;

pub use leo_testkit::app::{App, tool, tool_with_timeout};

/// An agent session over raw IPC.
pub async fn agent(broker: &Broker, name: &str) -> Ipc {
    let (ipc, _) = Ipc::hello(
        &leo_protocol::home::Home::new(broker.home()).sidecar_socket(),
        &broker.agent_token(),
        name,
    )
    .await;
    ipc
}

/// The result frame of call `id`.
pub async fn result_of(ipc: &mut Ipc, id: u64) -> Value {
    loop {
        let f = ipc.recv_of("result").await;
        if f["id"] == id {
            return f["outcome"].clone();
        }
    }
}

/// The error code of an outcome, or "" for content.
pub fn outcome_code(outcome: &Value) -> &str {
    outcome["error"]["code"].as_str().unwrap_or("")
}

/// Polls `check` every 20 ms until it holds; panics after the testkit's bound.
pub async fn eventually<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition never held"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A web console as a browser holds it after logging in: the session cookie and the page's
/// CSRF token. Its requests carry no bearer token.
pub struct Console {
    /// No token; sends the `leo_session` cookie.
    pub http: Http,
    pub csrf: String,
}

impl Console {
    /// `POST /login` with `token` as a form; the raw reply.
    pub async fn try_login(http: &Http, token: &str) -> Reply {
        http.with_token(None)
            .send(
                "POST",
                "/login",
                format!("token={token}").into(),
                &[("content-type", "application/x-www-form-urlencoded")],
            )
            .await
    }

    /// Logs in over TCP with the operator token and reads the CSRF token from the page.
    pub async fn login(broker: &Broker) -> Console {
        let r = Console::try_login(&broker.http(), &broker.operator_token()).await;
        assert_eq!(r.status, 303, "{r:?}");
        let cookie = r
            .header("set-cookie")
            .and_then(|c| c.split(';').next())
            .expect("a session cookie")
            .to_owned();
        let http = broker
            .http()
            .with_token(None)
            .with_header("cookie", &cookie);
        let page = http.get("/").await;
        assert_eq!(page.status, 200, "{page:?}");
        let html = page.body.as_str().expect("html");
        let csrf = html
            .split(r#"<meta name="leo-csrf" content=""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the csrf meta tag")
            .to_owned();
        Console { http, csrf }
    }

    /// POSTs JSON with the CSRF header, as the page does.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.http
            .send(
                "POST",
                path,
                body.to_string().into(),
                &[("x-leo-csrf", &self.csrf)],
            )
            .await
    }

    /// The live status stream.
    pub async fn events(&self) -> Sse {
        Sse::open(&self.http, "/console/events", None).await
    }

    /// Status events until one satisfies `want`; panics after the testkit's bound.
    pub async fn status_until(sse: &mut Sse, want: impl Fn(&Value) -> bool) -> Value {
        loop {
            let e = sse.next_of("status").await;
            if want(&e.data) {
                return e.data;
            }
        }
    }
}

/// `POST /web/agent/{to}/message` from `ops` with the operator token.
pub async fn message(broker: &Broker, to: &str, text: &str) -> Reply {
    broker
        .http()
        .post(
            &format!("/web/agent/{to}/message"),
            &serde_json::json!({"text": text, "from": "ops"}),
        )
        .await
}

/// Waits until `http`'s `GET /readyz`, asked without a token, answers `status` (`200` ready,
/// `503` not); its body. `/healthz` answers `200 {"status":"ok"}` all along.
pub async fn readiness(http: &Http, status: u16) -> Value {
    let probe = http.with_token(None);
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let live = probe.get("/healthz").await;
        assert_eq!(
            (live.status, &live.body),
            (200, &serde_json::json!({"status": "ok"}))
        );
        let ready = probe.try_get("/readyz").await;
        if let Some(r) = ready.filter(|r| r.status == status) {
            let word = if status == 200 { "ready" } else { "not_ready" };
            assert_eq!(r.body["status"], word, "{r:?}");
            assert_eq!(r.body["reason"].is_null(), status == 200, "{r:?}");
            return r.body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never answered {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
