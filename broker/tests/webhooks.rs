//! Webhook providers against a real HTTP server played by the test: inline and deferred
//! answers, signatures checked here with the returned secret, retries, refused urls,
//! cancellations, a restart, the CLI, and an agent on the real `leo-mcp`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
use leo_testkit::{Broker, Http, WAIT, bin, wire};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::{agent, eventually, outcome_code, result_of, tool, tool_with_timeout};

/// One delivery the app received.
#[derive(Debug)]
pub struct Delivery {
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Delivery {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON delivery")
    }
}

/// How the app answers: status and body, given the delivery.
pub type Answer = Arc<dyn Fn(&Delivery) -> (u16, String) + Send + Sync>;

/// The app: a real HTTP server on 127.0.0.1:0 that records every delivery and answers first
/// from `plan`, then with `answer`.
pub struct HookApp {
    pub addr: SocketAddr,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    pub plan: Arc<Mutex<VecDeque<(u16, String)>>>,
}

impl HookApp {
    pub async fn start(answer: Answer) -> HookApp {
        HookApp::start_slow(answer, Duration::ZERO).await
    }

    /// An app that takes `delay` to answer each delivery.
    async fn start_slow(answer: Answer, delay: Duration) -> HookApp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, deliveries) = mpsc::unbounded_channel();
        let plan: Arc<Mutex<VecDeque<(u16, String)>>> = Arc::default();
        let shared = plan.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (tx, plan, answer) = (tx.clone(), shared.clone(), answer.clone());
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (tx, plan, answer) = (tx.clone(), plan.clone(), answer.clone());
                    async move {
                        let headers = req.headers().clone();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let d = Delivery { headers, body };
                        tokio::time::sleep(delay).await;
                        let planned = plan.lock().unwrap().pop_front();
                        let (status, text) = planned.unwrap_or_else(|| answer(&d));
                        let _ = tx.send(d);
                        let resp = Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(text)))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        HookApp {
            addr,
            deliveries,
            plan,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook?x=1", self.addr)
    }

    pub async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.deliveries.recv())
            .await
            .expect("no delivery in time")
            .expect("server gone")
    }

    /// The next delivery of `event` (`client_tool.request`, `client_tool.cancelled`).
    pub async fn next_of(&mut self, event: &str) -> Delivery {
        loop {
            let d = self.next().await;
            if d.header("leo-event") == event {
                return d;
            }
        }
    }
}

/// Answers every call inline with `echo: <arguments.text>`.
fn echo() -> Answer {
    Arc::new(|d: &Delivery| {
        let text = d.json()["arguments"]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (
            200,
            json!({"ok": true, "content": [{"type": "text", "text": format!("echo: {text}")}]})
                .to_string(),
        )
    })
}

pub fn status_only(status: u16) -> Answer {
    Arc::new(move |_: &Delivery| (status, "{}".to_owned()))
}

pub async fn delete(http: &Http, path: &str) -> leo_testkit::Reply {
    http.send("DELETE", path, Bytes::new(), &[]).await
}

async fn create(http: &Http, name: &str, url: &str, tools: Value) -> Value {
    http.post(
        "/api/v1/client-tools/webhooks",
        &json!({"name": name, "url": url, "group": name, "tools": tools}),
    )
    .await
    .data()
    .clone()
}

/// Checks the delivery's signature the Standard Webhooks way, from the secret alone.
fn assert_signed(d: &Delivery, secret: &str) {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64 key");
    assert!(key.len() >= 24, "a key of {} bytes", key.len());
    let id = d.header("webhook-id");
    let ts = d.header("webhook-timestamp");
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&d.body);
    let want = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert_eq!(d.header("webhook-signature"), want, "signature of {id}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ts: u64 = ts.parse().expect("unix seconds");
    assert!(ts.abs_diff(now) < 300, "timestamp {ts} vs now {now}");
}

#[tokio::test]
async fn an_inline_answer_settles_the_call_and_the_delivery_is_signed() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = HookApp::start(echo()).await;
    let made = create(&http, "ci", &app.url(), json!([tool("echo")])).await;
    let secret = made["secret"].as_str().unwrap();
    let client_id = made["client_id"].as_str().unwrap();
    assert!(client_id.starts_with("c_"), "{made}");
    assert_eq!(made["tools"], json!(["echo"]));

    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "hi"})).await;
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": [{"type": "text", "text": "echo: hi"}]})
    );
    let d = app.next().await;
    assert_signed(&d, secret);
    let body = d.json();
    assert_eq!(d.header("webhook-id"), body["id"].as_str().unwrap());
    assert_eq!(d.header("leo-event"), "client_tool.request");
    assert_eq!(d.header("host"), app.addr.to_string());
    assert_eq!(body["tool"], "echo");
    assert_eq!(body["agent"], "rocket");
    assert_eq!(body["arguments"], json!({"text": "hi"}));

    // Listed without its secret, healthy; in status as a provider with its url.
    let list = http.get("/api/v1/client-tools/webhooks").await;
    let w = &list.data()["webhooks"][0];
    assert_eq!(w["name"], "ci");
    assert_eq!(w["client_id"], client_id);
    assert_eq!(w["health"]["healthy"], true);
    assert!(!list.body.to_string().contains(secret));
    let status = http.get("/api/v1/status").await;
    let a = &status.data()["apps"][0];
    assert_eq!(a["client_id"], client_id);
    assert_eq!(a["principal"], "webhook:ci");
    assert_eq!(a["webhook"]["url"], app.url());
    assert_eq!(a["groups"], json!(["ci"]));

    // An app error inline reaches the agent with its code.
    app.plan.lock().unwrap().push_back((
        200,
        json!({"ok": false, "error": {"code": "broken", "message": "it broke"}}).to_string(),
    ));
    ipc.call(2, "echo", json!({"text": "x"})).await;
    assert_eq!(outcome_code(&result_of(&mut ipc, 2).await), "broken");
}

#[tokio::test]
async fn a_202_defers_the_answer_to_the_claim_and_result_routes() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = HookApp::start(status_only(202)).await;
    let made = create(&http, "later", &app.url(), json!([tool("slow")])).await;
    let client_id = made["client_id"].as_str().unwrap().to_owned();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "slow", json!({})).await;
    let d = app.next().await;
    let id = d.json()["id"].as_str().unwrap().to_owned();
    let claimed = http
        .post(
            &format!("/api/v1/client-tools/requests/{id}/claim"),
            &json!({"client_id": client_id}),
        )
        .await;
    assert_eq!(claimed.data()["state"], "claimed");
    let settled = http
        .post(
            &format!("/api/v1/client-tools/requests/{id}/result"),
            &json!({"client_id": client_id, "ok": true, "content": [{"type": "text", "text": "done"}]}),
        )
        .await;
    assert_eq!(settled.data()["state"], "settled");
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": [{"type": "text", "text": "done"}]})
    );
    // Delivered once: a 202 ends the deliveries.
    assert!(
        tokio::time::timeout(Duration::from_millis(600), app.deliveries.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_failing_delivery_is_retried_with_the_same_id() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = HookApp::start(echo()).await;
    app.plan
        .lock()
        .unwrap()
        .extend([(500, "{}".to_owned()), (200, "not json".to_owned())]);
    let made = create(&http, "flaky", &app.url(), json!([tool("echo")])).await;
    let secret = made["secret"].as_str().unwrap().to_owned();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "again"})).await;
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": [{"type": "text", "text": "echo: again"}]})
    );
    let tries = [app.next().await, app.next().await, app.next().await];
    let id = tries[0].header("webhook-id").to_owned();
    for d in &tries {
        assert_eq!(d.header("webhook-id"), id);
        assert_signed(d, &secret);
    }
    let w = http.get("/api/v1/client-tools/webhooks").await.data()["webhooks"][0].clone();
    assert_eq!(w["health"]["healthy"], true);
    assert_eq!(w["health"]["failures"], 0);
}

#[tokio::test]
async fn an_app_that_keeps_failing_is_unhealthy_and_its_call_times_out() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = HookApp::start(status_only(503)).await;
    create(
        &http,
        "down",
        &app.url(),
        json!([tool_with_timeout("t", 3)]),
    )
    .await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "t", json!({})).await;
    eventually(|| async {
        let status = http.get("/api/v1/status").await;
        status.data()["apps"][0]["webhook"]["health"]["healthy"] == false
    })
    .await;
    let w = http.get("/api/v1/client-tools/webhooks").await.data()["webhooks"][0].clone();
    assert!(w["health"]["failures"].as_u64().unwrap() >= 3, "{w}");
    assert!(
        w["health"]["last_error"].as_str().unwrap().contains("503"),
        "{w}"
    );
    assert_eq!(outcome_code(&result_of(&mut ipc, 1).await), "timeout");
    let cancelled = app.next_of("client_tool.cancelled").await;
    assert_eq!(cancelled.json()["reason"], "timeout");
    let out = leo(broker.home(), &["status"]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("webhook UNHEALTHY"),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_cancellation_is_delivered_signed() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = HookApp::start(status_only(202)).await;
    let made = create(&http, "c", &app.url(), json!([tool("wait")])).await;
    let secret = made["secret"].as_str().unwrap().to_owned();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "wait", json!({})).await;
    let id = app.next().await.json()["id"].as_str().unwrap().to_owned();
    http.post(
        &format!("/api/v1/client-tools/requests/{id}/cancel"),
        &json!({}),
    )
    .await
    .data();
    assert_eq!(outcome_code(&result_of(&mut ipc, 1).await), "cancelled");
    let d = app.next_of("client_tool.cancelled").await;
    assert_signed(&d, &secret);
    assert_eq!(d.header("webhook-id"), format!("{id}-cancelled"));
    assert_eq!(
        d.json(),
        json!({"id": id, "agent": "rocket", "tool": "wait", "reason": "cancelled_by_operator"})
    );
}

#[tokio::test]
async fn a_late_inline_answer_is_ignored_and_logged() {
    let broker = Broker::start().await;
    let http = broker.http();
    let late: Answer = Arc::new(|_: &Delivery| {
        (
            200,
            json!({"ok": true, "content": [{"type": "text", "text": "late"}]}).to_string(),
        )
    });
    // The call's timeout (1 s) passes while the app works.
    let mut app = HookApp::start_slow(late, Duration::from_millis(2500)).await;
    create(
        &http,
        "slow",
        &app.url(),
        json!([tool_with_timeout("t", 1)]),
    )
    .await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "t", json!({})).await;
    assert_eq!(outcome_code(&result_of(&mut ipc, 1).await), "timeout");
    app.next().await;
    eventually(|| async { broker.stderr().contains("late inline answer ignored") }).await;
}

#[tokio::test]
async fn urls_that_are_not_loopback_or_allowed_are_refused() {
    let broker = Broker::start_with("webhooks:\n  allowed_hosts: [hooks.example]\n").await;
    let http = broker.http();
    for (url, says) in [
        (
            "http://example.com/hook",
            "neither loopback nor in webhooks.allowed_hosts",
        ),
        (
            "http://10.1.2.3/hook",
            "neither loopback nor in webhooks.allowed_hosts",
        ),
        ("https://127.0.0.1/hook", "plain http only"),
        ("http://user@127.0.0.1/", "user or password"),
        // Read as one place, delivered to another: port 80, the fragment dropped.
        (
            "http://127.0.0.1:99999/",
            "not a port number from 1 to 65535",
        ),
        ("http://127.0.0.1:0/", "not a port number from 1 to 65535"),
        ("http://127.0.0.1:80#@evil.example/", "fragment"),
        ("http://127.0.0.1/hook#part", "fragment"),
        ("not a url", "not a URL"),
    ] {
        let r = http
            .post(
                "/api/v1/client-tools/webhooks",
                &json!({"name": "x", "url": url, "group": "x", "tools": [tool("t")]}),
            )
            .await;
        assert_eq!(r.code(400), "invalid_parameter", "{url}");
        assert!(r.error().starts_with("at $.url: "), "{url}: {}", r.error());
        assert!(r.error().contains(says), "{url}: {}", r.error());
    }
    let tools = http.get("/api/v1/client-tools").await;
    assert_eq!(tools.data()["tools"], json!([]));
    // A host the operator allowed is accepted.
    create(
        &http,
        "ok",
        "http://hooks.example:8080/x",
        json!([tool("t")]),
    )
    .await;
    // Bad names, a reserved group, an unknown field, duplicates, a device's token, no token.
    let bad = http
        .post(
            "/api/v1/client-tools/webhooks",
            &json!({"name": "a/b", "url": "http://127.0.0.1:1/", "group": "g", "tools": []}),
        )
        .await;
    assert!(bad.error().starts_with("at $.name"), "{bad:?}");
    let dup = http
        .post(
            "/api/v1/client-tools/webhooks",
            &json!({"name": "ok", "url": "http://127.0.0.1:1/", "group": "g", "tools": []}),
        )
        .await;
    assert_eq!(dup.code(409), "name_conflict");
    let unknown = http
        .post(
            "/api/v1/client-tools/webhooks",
            &json!({"name": "u", "url": "http://127.0.0.1:1/", "group": "g", "tools": [], "secret": "mine"}),
        )
        .await;
    assert_eq!(unknown.code(400), "unknown_parameter");
    let reserved = http
        .post(
            "/api/v1/client-tools/webhooks",
            &json!({"name": "r", "url": "http://127.0.0.1:1/", "group": "console", "tools": [tool("q")]}),
        )
        .await;
    assert_eq!(reserved.code(409), "name_conflict");
    assert_eq!(
        http.get("/api/v1/client-tools/webhooks").await.data()["webhooks"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "refused webhooks leave nothing behind"
    );
    let agent_http = http.with_token(Some(&broker.agent_token()));
    let r = agent_http.get("/api/v1/client-tools/webhooks").await;
    assert_eq!(r.code(403), "forbidden");
}

#[tokio::test]
async fn a_webhook_survives_a_restart_and_goes_when_removed() {
    let broker = Broker::start().await;
    let mut app = HookApp::start(echo()).await;
    let made = create(&broker.http(), "keep", &app.url(), json!([tool("echo")])).await;
    let client_id = made["client_id"].as_str().unwrap().to_owned();
    let file = broker.home().join("state/webhooks.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let broker = Broker::start_in(broker.kill_keep_home().await).await;
    let http = broker.http();
    let tools = http.get("/api/v1/client-tools").await;
    assert_eq!(tools.data()["tools"][0]["name"], "echo");
    assert_eq!(tools.data()["tools"][0]["clients"], json!([client_id]));
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "back"})).await;
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": [{"type": "text", "text": "echo: back"}]})
    );
    assert_signed(&app.next().await, made["secret"].as_str().unwrap());

    let gone = delete(&http, "/api/v1/client-tools/webhooks/keep").await;
    assert_eq!(gone.data()["removed"], true);
    assert_eq!(
        http.get("/api/v1/client-tools").await.data()["tools"],
        json!([])
    );
    let again = delete(&http, "/api/v1/client-tools/webhooks/keep").await;
    assert_eq!(again.code(404), "not_found");
    let broker = Broker::start_in(broker.kill_keep_home().await).await;
    let list = broker.http().get("/api/v1/client-tools/webhooks").await;
    assert_eq!(list.data()["webhooks"], json!([]));
}

#[tokio::test]
async fn an_agent_calls_a_webhook_tool_through_leo_mcp() {
    let broker = Broker::start().await;
    let app = HookApp::start(echo()).await;
    create(&broker.http(), "mcp", &app.url(), json!([tool("echo")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names.iter().any(|n| n == "echo")).await;
    let result = agent.call("echo", json!({"text": "via mcp"})).await;
    assert_eq!(text_of(&result), "echo: via mcp");
}

async fn leo(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    let child = tokio::process::Command::new(bin("leo"))
        .args(args)
        .env("LEO_HOME", home)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, child)
        .await
        .expect("leo did not exit")
        .expect("run leo")
}

#[tokio::test]
async fn the_cli_adds_lists_and_removes_webhooks() {
    let broker = Broker::start().await;
    let app = HookApp::start(echo()).await;
    let tools = broker.home().join("tools.json");
    std::fs::write(&tools, json!([tool("echo")]).to_string()).unwrap();
    let out = leo(
        broker.home(),
        &[
            "webhook",
            "add",
            "cli",
            "--url",
            &app.url(),
            "--group",
            "g",
            "--tools",
            tools.to_str().unwrap(),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("secret:    whsec_"), "{stdout}");
    let out = leo(broker.home(), &["webhook", "list"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cli") && stdout.contains("healthy"),
        "{stdout}"
    );
    assert!(!stdout.contains("whsec_"), "{stdout}");
    let out = leo(
        broker.home(),
        &[
            "webhook",
            "add",
            "x",
            "--url",
            "http://example.com/",
            "--group",
            "g2",
            "--tools",
            tools.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_parameter"));
    let out = leo(broker.home(), &["webhook", "rm", "cli"]).await;
    assert!(out.status.success(), "{out:?}");
    let out = leo(broker.home(), &["webhook", "rm", "../x"]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// Creating and removing a webhook, its group's registration and its inline answers are in the
/// audit trail under the principal that made each change; a webhook's `client_id` and its
/// removal belong to its creator (and removal to the operator too), as a stream's.
#[tokio::test]
async fn webhooks_are_audited_and_belong_to_their_creator() {
    let (broker, ipad, _) = crate::client_ids::two_devices().await;
    let http = broker.http();
    let device = http.with_token(Some(&ipad));
    let mut inline = HookApp::start(echo()).await;
    let ci = create(&device, "ci", &inline.url(), json!([tool("echo")])).await;
    let mut later = HookApp::start(status_only(202)).await;
    let deferred = create(&http, "later", &later.url(), json!([tool("slow")])).await;
    let deferred_id = deferred["client_id"].as_str().unwrap();

    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "hi"})).await;
    result_of(&mut ipc, 1).await;
    let first = inline.next().await.json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ipc.call(2, "slow", json!({})).await;
    let second = later.next().await.json()["id"].as_str().unwrap().to_owned();
    // The operator's webhook is not the device's to answer for, nor to remove.
    let path = format!("/api/v1/client-tools/requests/{second}/claim");
    let body = json!({"client_id": deferred_id});
    assert_eq!(device.post(&path, &body).await.code(404), "unknown_client");
    let r = delete(&device, "/api/v1/client-tools/webhooks/later").await;
    assert_eq!(r.code(404), "not_found");
    assert_eq!(r.error(), r#"no webhook named "later""#);
    http.post(&path, &body).await.data();
    let answer = json!({"client_id": deferred_id, "ok": true, "content": [{"type": "text", "text": "done"}]});
    let path = format!("/api/v1/client-tools/requests/{second}/result");
    http.post(&path, &answer).await.data();
    result_of(&mut ipc, 2).await;
    delete(&device, "/api/v1/client-tools/webhooks/ci")
        .await
        .data();
    delete(&http, "/api/v1/client-tools/webhooks/later")
        .await
        .data();

    let mut trail = crate::client_ids::trail(&http).await;
    // The inline answer is audited by the delivery task, which may be a moment behind the
    // agent's result: its place is not asserted, only that it is there.
    let inline_result = format!("webhook:ci webhook result {first}");
    let before = trail.len();
    trail.retain(|line| *line != inline_result);
    assert_eq!(
        trail.len() + 1,
        before,
        "{inline_result} once in {trail:#?}"
    );
    let want = [
        "device:ipad device webhook_create ci".to_owned(),
        "device:ipad device register ci".into(),
        "operator operator webhook_create later".into(),
        "operator operator register later".into(),
        format!("operator operator claim {second}"),
        format!("operator operator result {second}"),
        "device:ipad device webhook_remove ci".into(),
        "operator operator webhook_remove later".into(),
    ];
    assert_eq!(trail, want);
    // The details: the client id, and the url without its query.
    let all = http.get("/api/v1/audit?limit=500").await;
    let entries = all.data()["entries"].as_array().unwrap().clone();
    let created = entries
        .iter()
        .find(|e| e["action"] == "webhook_create" && e["target"] == "ci")
        .unwrap();
    let url = format!("http://{}/hook", inline.addr);
    assert_eq!(
        created["detail"],
        format!("{} url={url}", ci["client_id"].as_str().unwrap())
    );
}

/// An approver that cannot hold a stream: its webhook is sent each approval request, signed
/// with its own secret and retried with the same id after a failure; the receiver decides over
/// the approval routes with its token; the webhook is listed apart from the providers and
/// removed by its owner, and no app saw the calls before they were approved.
#[tokio::test]
async fn an_approvers_webhook_gets_each_approval_request_signed_and_decides_over_the_api() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut phone = HookApp::start(status_only(204)).await;
    phone.plan.lock().unwrap().push_back((503, "{}".into()));
    let body = wire::load(
        "http/approval_webhook_create.request.json",
        &[("<url>", &phone.url())],
    );
    let made = http.post("/api/v1/approvals/webhooks", &body).await;
    let secret = made.data()["secret"].as_str().unwrap().to_owned();
    let mut shown = made.body.clone();
    shown["data"]["url"] = json!("<url>");
    wire::check("http/approval_webhook_create.response.json", &shown);
    let taken = http
        .post(
            "/api/v1/approvals/webhooks",
            &json!({"name": "phone", "url": phone.url()}),
        )
        .await;
    assert_eq!(taken.code(409), "name_conflict", "{taken:?}");
    let bad = http
        .post(
            "/api/v1/approvals/webhooks",
            &json!({"name": "x", "url": phone.url(), "group": "g"}),
        )
        .await;
    assert_eq!(bad.code(400), "unknown_parameter", "{bad:?}");

    let mut app = crate::support::App::connect(&http).await;
    let deploy = json!({"name": "deploy", "description": "Deploys",
                        "input_schema": {"type": "object"}, "approval": "required"});
    app.register_ok("ops", json!([deploy])).await;
    let mut ipc = agent(&broker, "ci-7").await;
    ipc.call(1, "deploy", json!({"env": "prod"})).await;

    // Refused once, then delivered again with the same id, signed.
    let first = phone.next_of("client_tool.approval_requested").await;
    let again = phone.next_of("client_tool.approval_requested").await;
    assert_eq!(first.header("webhook-id"), again.header("webhook-id"));
    assert_signed(&again, &secret);
    let mut delivered = json!({"headers": {}, "body": again.json()});
    for name in ["content-type", "webhook-id", "leo-event"] {
        delivered["headers"][name] = json!(again.header(name));
    }
    delivered["headers"]["webhook-timestamp"] = json!("<unix seconds>");
    delivered["headers"]["webhook-signature"] = json!("v1,<base64>");
    wire::check("webhooks/approval_requested.delivery.json", &delivered);
    let asked = again.json();
    let id = asked["id"].as_str().unwrap().to_owned();
    assert_eq!(again.header("webhook-id"), format!("{id}-approval"));
    assert_eq!(
        (&asked["agent"], &asked["tool"], &asked["arguments"]),
        (&json!("ci-7"), &json!("deploy"), &json!({"env": "prod"}))
    );
    let pending = http.get("/api/v1/client-tools/requests?pending=1").await;
    assert_eq!(
        pending.data(),
        &json!([]),
        "an app saw the call: {pending:?}"
    );

    // The receiver decides over the HTTP API, naming the digest it was sent.
    let decided = http
        .post(
            &format!("/api/v1/approvals/{id}/approve"),
            &json!({"digest": asked["digest"]}),
        )
        .await;
    assert_eq!(decided.data()["decision"], "approved", "{decided:?}");
    let request = app.next_request().await;
    assert_eq!(request.data["id"], id.as_str());
    app.serve(&id, json!([{"type": "text", "text": "deployed"}]))
        .await;
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": [{"type": "text", "text": "deployed"}]})
    );

    ipc.call(2, "deploy", json!({"env": "prod"})).await;
    let asked = phone.next_of("client_tool.approval_requested").await.json();
    let id = asked["id"].as_str().unwrap();
    let denied = http
        .post(
            &format!("/api/v1/approvals/{id}/deny"),
            &json!({"digest": asked["digest"], "reason": "not from the phone"}),
        )
        .await;
    assert_eq!(denied.data()["decision"], "denied", "{denied:?}");
    assert_eq!(
        result_of(&mut ipc, 2).await["error"],
        json!({"code": "denied", "message": "not from the phone"})
    );

    // Still awaiting when the broker is killed: delivered again after the restart, same id.
    ipc.call(3, "deploy", json!({"env": "prod"})).await;
    let before = phone.next_of("client_tool.approval_requested").await;
    let broker = Broker::start_in(broker.kill_keep_home().await).await;
    let http = broker.http();
    let after = phone.next_of("client_tool.approval_requested").await;
    assert_eq!(before.header("webhook-id"), after.header("webhook-id"));
    assert_eq!(before.json()["digest"], after.json()["digest"]);

    // Listed apart from the providers, healthy, without its secret; removed by its owner.
    // The delivery's 2xx is recorded once the broker has read it.
    eventually(|| async {
        let list = http.get("/api/v1/approvals/webhooks").await;
        list.data()["webhooks"][0]["health"]["last_ok_at"].is_string()
    })
    .await;
    let list = http.get("/api/v1/approvals/webhooks").await;
    assert!(!list.body.to_string().contains(&secret));
    let mut shown = list.body.clone();
    shown["data"]["webhooks"][0]["url"] = json!("<url>");
    wire::check("http/approval_webhook_list.response.json", &shown);
    let providers = http.get("/api/v1/client-tools/webhooks").await;
    assert_eq!(providers.data()["webhooks"], json!([]), "{providers:?}");
    let wrong_kind = delete(&http, "/api/v1/client-tools/webhooks/phone").await;
    assert_eq!(wrong_kind.code(404), "not_found", "{wrong_kind:?}");
    let removed = delete(&http, "/api/v1/approvals/webhooks/phone").await;
    wire::check("http/approval_webhook_remove.response.json", &removed.body);
    assert_eq!(
        http.get("/api/v1/approvals/webhooks").await.data()["webhooks"],
        json!([])
    );
}
