//! Every wire fixture in `testdata/wire/http` and `testdata/wire/events`, sent or compared in
//! one scenario against the real broker, and those of `testdata/wire/console` in a second one.
//! `UPDATE_WIRE=1` rewrites the response fixtures.

use leo_testkit::{Broker, Reply, Sse, SseEvent, wire};
use serde_json::{Value, json};

use crate::support::{App, Console, agent, result_of};

fn event(e: &SseEvent) -> Value {
    json!({"event": e.event, "data": e.data})
}

async fn post(http: &leo_testkit::Http, path: &str, fixture: &str, client_id: &str) -> Reply {
    let body = wire::load(
        &format!("http/{fixture}.request.json"),
        &[("<client_id>", client_id)],
    );
    http.post(path, &body).await
}

#[tokio::test]
async fn every_fixture_matches_the_broker() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    let other = App::connect(&http).await;
    let agent_http = http.with_token(Some(&broker.agent_token()));
    let mut watcher = Sse::open(&agent_http, "/api/v1/events", None).await;
    wire::check("events/hello.plain.json", &event(&watcher.next().await));
    let mut fresh = Sse::open(&http, "/api/v1/events?client_tools=1", None).await;
    wire::check("events/hello.json", &event(&fresh.next().await));
    drop(fresh);

    let r = post(&http, "/api/v1/client-tools", "register", &app.id).await;
    wire::check("http/register.response.json", &r.body);
    wire::check(
        "events/client_tools.changed.json",
        &event(&app.sse.next_of("client_tools.changed").await),
    );
    wire::check(
        "http/list_tools.response.json",
        &http.get("/api/v1/client-tools").await.body,
    );
    wire::check(
        "http/error_name_conflict.response.json",
        &post(&http, "/api/v1/client-tools", "conflict", &other.id)
            .await
            .body,
    );
    wire::check(
        "http/error_invalid_tool.response.json",
        &post(&http, "/api/v1/client-tools", "invalid_tool", &app.id)
            .await
            .body,
    );
    wire::check(
        "http/error_unknown_parameter.response.json",
        &post(&http, "/api/v1/client-tools", "unknown_field", &app.id)
            .await
            .body,
    );
    wire::check(
        "http/error_unknown_client.response.json",
        &post(
            &http,
            "/api/v1/client-tools",
            "register",
            "c_000000000000000000000000",
        )
        .await
        .body,
    );
    wire::check(
        "http/error_invalid_parameter.response.json",
        &http
            .post_raw("/api/v1/client-tools", "{\"client_id\": ")
            .await
            .body,
    );
    wire::check(
        "http/error_unauthorized.response.json",
        &http.with_token(None).get("/api/v1/client-tools").await.body,
    );
    wire::check(
        "http/error_forbidden.response.json",
        &post(&agent_http, "/api/v1/client-tools", "register", &app.id)
            .await
            .body,
    );

    // A call: full on the provider stream, redacted on the agent's.
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "read_clipboard", json!({"format": "text"}))
        .await;
    let req = app.next_request().await;
    wire::check("events/client_tool.request.json", &event(&req));
    wire::check(
        "events/client_tool.request.redacted.json",
        &event(&watcher.next_of("client_tool.request").await),
    );
    let id = req.data["id"].as_str().unwrap().to_owned();
    let claim = format!("/api/v1/client-tools/requests/{id}/claim");
    let result = format!("/api/v1/client-tools/requests/{id}/result");
    wire::check(
        "http/pending.response.json",
        &http
            .get("/api/v1/client-tools/requests?pending=1")
            .await
            .body,
    );
    wire::check(
        "http/status_pending.response.json",
        &http.get("/api/v1/status").await.body,
    );
    wire::check(
        "http/error_not_claimant.response.json",
        &post(&http, &result, "result_content", &app.id).await.body,
    );
    wire::check(
        "http/claim.response.json",
        &post(&http, &claim, "claim", &app.id).await.body,
    );
    wire::check(
        "http/error_already_claimed.response.json",
        &post(&http, &claim, "claim", &app.id).await.body,
    );
    wire::check(
        "http/error_invalid_result.response.json",
        &post(&http, &result, "result_invalid", &app.id).await.body,
    );
    wire::check(
        "http/result.response.json",
        &post(&http, &result, "result_content", &app.id).await.body,
    );
    assert_eq!(
        result_of(&mut ipc, 1).await["content"],
        wire::load("http/result_content.request.json", &[])["content"],
        "the content reaches the agent verbatim"
    );
    wire::check(
        "http/error_already_settled.response.json",
        &post(&http, &result, "result_content", &app.id).await.body,
    );
    wire::check(
        "http/error_unknown_request.response.json",
        &post(
            &http,
            "/api/v1/client-tools/requests/r_000000000000000000000000/claim",
            "claim",
            &app.id,
        )
        .await
        .body,
    );

    // An app error, then ownership: the other client registers the group and is refused.
    ipc.call(2, "read_clipboard", json!({"format": "html"}))
        .await;
    let id = app.next_request_id().await;
    post(
        &http,
        &format!("/api/v1/client-tools/requests/{id}/claim"),
        "claim",
        &app.id,
    )
    .await
    .data();
    let r = post(
        &http,
        &format!("/api/v1/client-tools/requests/{id}/result"),
        "result_error",
        &app.id,
    )
    .await;
    assert_eq!(
        r.body,
        wire::load("http/result.response.json", &[("<request_id>", &id)])
    );
    assert_eq!(
        result_of(&mut ipc, 2).await["error"]["code"],
        "access_denied"
    );
    post(&http, "/api/v1/client-tools", "register", &other.id)
        .await
        .data();
    ipc.call(3, "read_clipboard", json!({"format": "text"}))
        .await;
    let id = app.next_request_id().await;
    wire::check(
        "http/error_owned_by_other.response.json",
        &post(
            &http,
            &format!("/api/v1/client-tools/requests/{id}/claim"),
            "claim",
            &other.id,
        )
        .await
        .body,
    );

    // The agent cancels: full and redacted cancellation events.
    ipc.send(&json!({"type": "cancel", "id": 3})).await;
    wire::check(
        "events/client_tool.cancelled.json",
        &event(&app.sse.next_of("client_tool.cancelled").await),
    );
    wire::check(
        "events/client_tool.cancelled.redacted.json",
        &event(&watcher.next_of("client_tool.cancelled").await),
    );
    let _ = result_of(&mut ipc, 3).await;

    wire::check(
        "http/status.response.json",
        &http.get("/api/v1/status").await.body,
    );

    // The operator cancels a call.
    ipc.call(4, "read_clipboard", json!({"format": "text"}))
        .await;
    let id = app.next_request_id().await;
    wire::check(
        "http/cancel.response.json",
        &post(
            &http,
            &format!("/api/v1/client-tools/requests/{id}/cancel"),
            "cancel",
            &app.id,
        )
        .await
        .body,
    );
    wire::check(
        "events/client_tool.cancelled.operator.json",
        &event(&app.sse.next_of("client_tool.cancelled").await),
    );
    assert_eq!(
        result_of(&mut ipc, 4).await["error"]["message"],
        "the operator cancelled the call"
    );

    // An app that answers at once claims with its result, in one request.
    ipc.call(5, "read_clipboard", json!({"format": "text"}))
        .await;
    let id = app.next_request_id().await;
    let r = post(
        &http,
        &format!("/api/v1/client-tools/requests/{id}/result"),
        "result_claim",
        &app.id,
    )
    .await;
    assert_eq!(
        r.body,
        wire::load("http/result.response.json", &[("<request_id>", &id)])
    );
    assert_eq!(
        result_of(&mut ipc, 5).await["content"],
        wire::load("http/result_claim.request.json", &[])["content"]
    );

    wire::check(
        "http/withdraw.response.json",
        &post(&http, "/api/v1/client-tools", "withdraw", &app.id)
            .await
            .body,
    );
}

#[tokio::test]
async fn every_console_fixture_matches_the_broker() {
    let broker = Broker::start().await;
    let console = Console::login(&broker).await;
    let mut events = console.events().await;
    let body = wire::load("console/ask_human.request.json", &[]);
    let r = console
        .http
        .send("POST", "/console/ask-human", body.to_string().into(), &[])
        .await;
    wire::check("console/error_csrf.response.json", &r.body);
    wire::check(
        "console/ask_human.response.json",
        &console.post("/console/ask-human", &body).await.body,
    );

    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(
        1,
        "ask_human",
        json!({"question": "Ship the release now?", "choices": ["yes", "wait"]}),
    )
    .await;
    let status = Console::status_until(&mut events, |s| s["pending"] == 1).await;
    wire::check(
        "console/status.event.json",
        &json!({"event": "status", "data": status}),
    );
    let id = status["requests"][0]["id"].as_str().unwrap().to_owned();
    let body = wire::load("console/answer.request.json", &[]);
    wire::check(
        "console/answer.response.json",
        &console
            .post(&format!("/console/requests/{id}/answer"), &body)
            .await
            .body,
    );
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        body["text"]
    );
}

/// The webhook routes' bodies, a signed delivery and a cancellation as the app receives them,
/// and the app's inline answers.
#[tokio::test]
async fn the_webhook_fixtures_match_the_broker() {
    use crate::webhooks::{Delivery, HookApp, delete, status_only};
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = HookApp::start(status_only(202)).await;
    let body = wire::load("http/webhook_create.request.json", &[("<url>", &app.url())]);
    let mut made = http.post("/api/v1/client-tools/webhooks", &body).await.body;
    made["data"]["url"] = json!("<url>");
    wire::check("http/webhook_create.response.json", &made);
    let refused = http
        .post(
            "/api/v1/client-tools/webhooks",
            &json!({"name": "far", "url": "http://example.com/hook", "group": "far", "tools": []}),
        )
        .await;
    wire::check("http/error_webhook_url.response.json", &refused.body);

    // A delivery, answered inline, then one answered with an app error.
    let delivery = |d: &Delivery| {
        let mut headers = serde_json::Map::new();
        for name in ["content-type", "webhook-id", "leo-event"] {
            headers.insert(name.into(), json!(d.header(name)));
        }
        headers.insert("webhook-timestamp".into(), json!("<unix seconds>"));
        headers.insert("webhook-signature".into(), json!("v1,<base64>"));
        json!({"headers": headers, "body": d.json()})
    };
    for (i, answer) in ["answer_inline", "answer_error"].iter().enumerate() {
        let text = wire::load(&format!("webhooks/{answer}.json"), &[]).to_string();
        app.plan.lock().unwrap().push_back((200, text));
        let mut ipc = agent(&broker, "rocket").await;
        ipc.call(i as u64, "run_job", json!({"job": "lint"})).await;
        let d = app.next().await;
        if i == 0 {
            wire::check("webhooks/request.delivery.json", &delivery(&d));
            assert_eq!(
                result_of(&mut ipc, 0).await,
                json!({"content": [{"type": "text", "text": "job passed"}]})
            );
        } else {
            assert_eq!(result_of(&mut ipc, 1).await["error"]["code"], "job_failed");
        }
    }
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(9, "run_job", json!({"job": "deploy"})).await;
    let id = app.next().await.json()["id"].as_str().unwrap().to_owned();
    http.post(
        &format!("/api/v1/client-tools/requests/{id}/cancel"),
        &json!({}),
    )
    .await
    .data();
    let d = app.next_of("client_tool.cancelled").await;
    wire::check("webhooks/cancelled.delivery.json", &delivery(&d));
    let mut list = http.get("/api/v1/client-tools/webhooks").await.body;
    list["data"]["webhooks"][0]["url"] = json!("<url>");
    wire::check("http/webhook_list.response.json", &list);
    wire::check(
        "http/webhook_remove.response.json",
        &delete(&http, "/api/v1/client-tools/webhooks/ci-runner")
            .await
            .body,
    );
}
