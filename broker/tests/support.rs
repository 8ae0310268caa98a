//! Shared pieces: an app played by the test, an agent played through raw IPC frames, and a
//! logged-in web console.

use leo_testkit::{Broker, Http, Ipc, Reply, Sse, SseEvent};
use serde_json::{Value, json};

/// An app: a provider stream and the HTTP client it posts with.
pub struct App {
    pub http: Http,
    pub sse: Sse,
    pub id: String,
}

impl App {
    pub async fn connect(http: &Http) -> App {
        let (sse, id) = Sse::provider(http).await;
        App {
            http: http.clone(),
            sse,
            id,
        }
    }

    pub async fn register(&self, group: &str, tools: Value) -> Reply {
        self.http
            .post(
                "/api/v1/client-tools",
                &json!({"client_id": self.id, "group": group, "tools": tools}),
            )
            .await
    }

    pub async fn claim(&self, id: &str) -> Reply {
        self.http
            .post(
                &format!("/api/v1/client-tools/requests/{id}/claim"),
                &json!({"client_id": self.id}),
            )
            .await
    }

    pub async fn answer(&self, id: &str, content: Value) -> Reply {
        self.http
            .post(
                &format!("/api/v1/client-tools/requests/{id}/result"),
                &json!({"client_id": self.id, "ok": true, "content": content}),
            )
            .await
    }

    pub async fn fail(&self, id: &str, code: &str, message: &str) -> Reply {
        self.http
            .post(
                &format!("/api/v1/client-tools/requests/{id}/result"),
                &json!({"client_id": self.id, "ok": false, "error": {"code": code, "message": message}}),
            )
            .await
    }

    /// The next `client_tool.request` on this app's stream.
    pub async fn next_request(&mut self) -> SseEvent {
        self.sse.next_of("client_tool.request").await
    }

    /// The id of the next `client_tool.request`.
    pub async fn next_request_id(&mut self) -> String {
        let event = self.next_request().await;
        event.data["id"].as_str().expect("a request id").to_owned()
    }
}

/// A simple tool definition.
pub fn tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!("The {name} tool"),
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}
    })
}

/// A tool with a timeout.
pub fn tool_with_timeout(name: &str, timeout_s: u64) -> Value {
    let mut t = tool(name);
    t["timeout_s"] = json!(timeout_s);
    t
}

/// An agent session over raw IPC.
pub async fn agent(broker: &Broker, name: &str) -> Ipc {
    let (ipc, _) = Ipc::hello(
        &broker.home().join("run/sidecar.sock"),
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
