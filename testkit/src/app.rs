//! An app played by the test over HTTP and SSE: a provider stream and the client it posts with.
//!
//! The broker's, the sidecar's and the SDK's suites each had one of these; this is the one.
//! The plain methods return the broker's `Reply` for a test that checks a refusal; the `_ok`
//! and `serve` forms assert success, for a test whose subject is something else.

use serde_json::{Value, json};

use crate::{Http, Reply, Sse, SseEvent};

/// An app: a provider stream and the HTTP client it posts with.
pub struct App {
    pub http: Http,
    pub sse: Sse,
    pub id: String,
    /// The resume key from the stream's `hello`.
    pub resume: String,
}

impl App {
    /// Opens a provider stream (`?client_tools=1`) and reads its `hello`.
    pub async fn connect(http: &Http) -> App {
        App::open(http, "/api/v1/events?client_tools=1").await
    }

    /// Reopens the stream of the app whose `hello` gave `key` (`&resume=KEY`).
    pub async fn resume(http: &Http, key: &str) -> App {
        App::open(http, &format!("/api/v1/events?client_tools=1&resume={key}")).await
    }

    async fn open(http: &Http, path: &str) -> App {
        let mut sse = Sse::open(http, path, None).await;
        let hello = sse.next().await;
        assert_eq!(hello.event, "hello", "{:?}", hello.data);
        let field = |name: &str| {
            hello.data[name]
                .as_str()
                .unwrap_or_else(|| panic!("hello without {name}: {:?}", hello.data))
                .to_owned()
        };
        App {
            http: http.clone(),
            id: field("client_id"),
            resume: field("resume"),
            sse,
        }
    }

    /// Posts `body` with this app's `client_id` to `…/requests/{id}/{what}` (`progress`,
    /// `input`, …).
    pub async fn post_for(&self, id: &str, what: &str, body: Value) -> Reply {
        let mut body = body;
        body["client_id"] = Value::String(self.id.clone());
        self.http
            .post(&format!("/api/v1/client-tools/requests/{id}/{what}"), &body)
            .await
    }

    /// Registers (or replaces) `group`.
    pub async fn register(&self, group: &str, tools: Value) -> Reply {
        self.http
            .post(
                "/api/v1/client-tools",
                &json!({"client_id": self.id, "group": group, "tools": tools}),
            )
            .await
    }

    /// Registers `group`; asserts success.
    pub async fn register_ok(&self, group: &str, tools: Value) {
        self.register(group, tools).await.data();
    }

    pub async fn claim(&self, id: &str) -> Reply {
        self.http
            .post(
                &format!("/api/v1/client-tools/requests/{id}/claim"),
                &json!({"client_id": self.id}),
            )
            .await
    }

    /// Claims request `id`; asserts success.
    pub async fn claim_ok(&self, id: &str) {
        self.claim(id).await.data();
    }

    /// Posts `content` as the result of a claimed request.
    pub async fn answer(&self, id: &str, content: Value) -> Reply {
        self.http
            .post(
                &format!("/api/v1/client-tools/requests/{id}/result"),
                &json!({"client_id": self.id, "ok": true, "content": content}),
            )
            .await
    }

    /// Posts the app's own error as the result of a claimed request.
    pub async fn fail(&self, id: &str, code: &str, message: &str) -> Reply {
        self.http
            .post(
                &format!("/api/v1/client-tools/requests/{id}/result"),
                &json!({"client_id": self.id, "ok": false, "error": {"code": code, "message": message}}),
            )
            .await
    }

    /// Claims request `id` and answers it with `content`; asserts both.
    pub async fn serve(&self, id: &str, content: Value) {
        self.claim_ok(id).await;
        self.answer(id, content).await.data();
    }

    /// Claims request `id` and fails it with the app's own code; asserts both.
    pub async fn serve_error(&self, id: &str, code: &str, message: &str) {
        self.claim_ok(id).await;
        self.fail(id, code, message).await.data();
    }

    /// The next `client_tool.request` on this app's stream.
    pub async fn next_request(&mut self) -> SseEvent {
        self.sse.next_of("client_tool.request").await
    }

    /// The next `client_tool.request` within `limit`, which may be longer than one event wait
    /// (a harness CLI starting on a loaded machine); `None` after it.
    pub async fn next_request_within(&mut self, limit: std::time::Duration) -> Option<SseEvent> {
        let next = async {
            loop {
                match self.sse.next_or_end().await {
                    Some(e) if e.event == "client_tool.request" => return e,
                    Some(_) => {}
                    None => panic!("the app's event stream ended"),
                }
            }
        };
        tokio::time::timeout(limit, next).await.ok()
    }

    /// The id of the next `client_tool.request`.
    pub async fn next_request_id(&mut self) -> String {
        let event = self.next_request().await;
        match event.data["id"].as_str() {
            Some(id) => id.to_owned(),
            None => panic!("a request without an id: {:?}", event.data),
        }
    }

    /// Claims the next `client_tool.request` (asserting the claim); its id.
    pub async fn claim_next(&mut self) -> String {
        let id = self.next_request_id().await;
        self.claim_ok(&id).await;
        id
    }

    /// The next `client_tool.cancelled` on this app's stream.
    pub async fn next_cancelled(&mut self) -> SseEvent {
        self.sse.next_of("client_tool.cancelled").await
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
