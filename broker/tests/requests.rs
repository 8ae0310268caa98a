//! Calls from an agent (raw IPC frames) to an app (HTTP/SSE): every outcome and every claim and
//! result rule.

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{App, agent, outcome_code, result_of, tool, tool_with_timeout};

const PNG_1PX: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

#[tokio::test]
async fn call_claim_and_answer_with_text_image_and_error() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;

    ipc.call(1, "echo", json!({"text": "hi"})).await;
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "rocket");
    assert_eq!(req.data["tool"], "echo");
    assert_eq!(req.data["group"], "g");
    assert_eq!(req.data["arguments"], json!({"text": "hi"}));
    assert_eq!(req.data["timeout_s"], 600);
    let id = req.data["id"].as_str().unwrap().to_owned();

    // Pending lists it, parked, then claimed.
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data()[0]["id"], id);
    assert_eq!(pending.data()[0]["state"], "parked");
    assert_eq!(app.claim(&id).await.data()["state"], "claimed");
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data()[0]["state"], "claimed");
    assert_eq!(pending.data()[0]["claimed_by"], app.id.as_str());

    let content = json!([{"type": "text", "text": "hi back"}, {"type": "image", "data": PNG_1PX, "mimeType": "image/png"}]);
    assert_eq!(
        app.answer(&id, content.clone()).await.data()["state"],
        "settled"
    );
    assert_eq!(
        result_of(&mut ipc, 1).await,
        json!({"content": content}),
        "verbatim"
    );
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data(), &json!([]));

    // The app's own error reaches the agent with its code.
    ipc.call(2, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.claim(&id).await.data();
    app.fail(&id, "forbidden_data", "this person cannot see that")
        .await
        .data();
    let outcome = result_of(&mut ipc, 2).await;
    assert_eq!(
        outcome["error"],
        json!({"code": "forbidden_data", "message": "this person cannot see that"})
    );

    // Other content block kinds pass too.
    ipc.call(3, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.claim(&id).await.data();
    let content = json!([
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        {"type": "resource_link", "uri": "file:///x", "name": "x"},
        {"type": "resource", "resource": {"uri": "file:///y", "text": "y"}},
        {"type": "text", "text": "t", "annotations": {"audience": ["user"]}}
    ]);
    app.answer(&id, content.clone()).await.data();
    assert_eq!(result_of(&mut ipc, 3).await, json!({"content": content}));
}

#[tokio::test]
async fn claim_and_result_rules() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let other = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;

    let r = app.claim("r_doesnotexist").await;
    assert_eq!(r.code(404), "unknown_request");
    let r = broker
        .http()
        .post(
            &format!("/api/v1/client-tools/requests/{id}/claim"),
            &json!({"client_id": "c_gone"}),
        )
        .await;
    assert_eq!(r.code(404), "unknown_client");
    // A client that does not serve the group cannot claim.
    assert_eq!(other.claim(&id).await.code(409), "not_provider");
    // A result before a claim is refused, and so is one from a non-claimant.
    assert_eq!(app.answer(&id, json!([])).await.code(409), "not_claimant");
    app.claim(&id).await.data();
    assert_eq!(app.claim(&id).await.code(409), "already_claimed");
    other.register("g", json!([tool("echo")])).await.data();
    assert_eq!(other.answer(&id, json!([])).await.code(409), "not_claimant");

    // Malformed results are refused and lose nothing: the call still waits.
    let bad = [
        (
            json!({"client_id": app.id, "ok": true}),
            422,
            "invalid_result",
            "at $.content",
        ),
        (
            json!({"client_id": app.id, "ok": false}),
            422,
            "invalid_result",
            "at $.error",
        ),
        (
            json!({"client_id": app.id, "ok": true, "content": [{"type": "text"}]}),
            422,
            "invalid_result",
            "at $.content[0].text",
        ),
        (
            json!({"client_id": app.id, "ok": true, "content": [{"type": "video"}]}),
            422,
            "invalid_result",
            "unknown content type",
        ),
        (
            json!({"client_id": app.id, "ok": true, "content": [{"type": "image", "data": "***", "mimeType": "image/png"}]}),
            422,
            "invalid_result",
            "at $.content[0].data",
        ),
        (
            json!({"client_id": app.id, "ok": true, "content": [], "error": {"code": "x", "message": "y"}}),
            422,
            "invalid_result",
            "at $.error",
        ),
        (
            json!({"client_id": app.id, "ok": false, "error": {"code": "has space", "message": "y"}}),
            422,
            "invalid_result",
            "at $.error.code",
        ),
        (
            json!({"client_id": app.id, "ok": true, "content": "text"}),
            400,
            "invalid_parameter",
            "at $.content",
        ),
        (
            json!({"client_id": app.id, "ok": true, "content": [], "extra": 1}),
            400,
            "unknown_parameter",
            "at $.extra",
        ),
        (
            json!({"client_id": app.id, "ok": "yes", "content": []}),
            400,
            "invalid_parameter",
            "at $.ok",
        ),
    ];
    for (body, status, code, fragment) in bad {
        let r = broker
            .http()
            .post(&format!("/api/v1/client-tools/requests/{id}/result"), &body)
            .await;
        assert_eq!(r.code(status), code, "{body}");
        assert!(r.error().contains(fragment), "{body}: {:?}", r.error());
    }
    // 1 MiB of content is the limit.
    let big = "x".repeat(1024 * 1024);
    let r = app
        .answer(&id, json!([{"type": "text", "text": big}]))
        .await;
    assert_eq!(r.code(413), "result_too_large");

    app.answer(&id, json!([{"type": "text", "text": "done"}]))
        .await
        .data();
    assert_eq!(outcome_code(&result_of(&mut ipc, 1).await), "");
    // The request has ended: a second result or claim says so.
    let r = app.answer(&id, json!([])).await;
    assert_eq!(r.code(409), "already_settled");
    assert!(r.error().contains("with a result"), "{}", r.error());
    assert_eq!(app.claim(&id).await.code(409), "already_settled");
}

#[tokio::test]
async fn calls_are_checked_before_they_are_parked() {
    let broker = Broker::start_with("agents:\n  rocket:\n    deny_tools: [leo_app_call]\n  guarded:\n    deny_tools: [leo_app_call]\n").await;
    let app = App::connect(&broker.http()).await;
    let mut t = tool("typed");
    t["input_schema"] = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]});
    app.register("g", json!([t])).await.data();
    let mut ipc = agent(&broker, "rocket").await;

    ipc.call(1, "typed", json!({"n": "three"})).await;
    let o = result_of(&mut ipc, 1).await;
    assert_eq!(outcome_code(&o), "invalid_arguments");
    assert!(
        o["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("at $.n: "),
        "{o}"
    );
    ipc.call(2, "typed", json!({})).await;
    let o = result_of(&mut ipc, 2).await;
    assert_eq!(outcome_code(&o), "invalid_arguments");
    assert!(
        o["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"n\" is a required property"),
        "{o}"
    );
    ipc.call(3, "typed", json!([1])).await;
    assert_eq!(
        outcome_code(&result_of(&mut ipc, 3).await),
        "invalid_arguments"
    );

    ipc.call(4, "nobody_serves_this", json!({})).await;
    let o = result_of(&mut ipc, 4).await;
    assert_eq!(outcome_code(&o), "no_client");

    // Nothing above was parked.
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data(), &json!([]));
}

#[tokio::test]
async fn deny_tools_is_enforced_by_the_broker() {
    // The broker starts only if every deny_tools entry can exist; a remembered name counts.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("state")).unwrap();
    std::fs::write(
        home.path().join("state/client-tools.json"),
        r#"{"version": 1, "tools": ["secret"]}"#,
    )
    .unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        "agents:\n  rocket:\n    deny_tools: [secret, leo_app_call]\n",
    )
    .unwrap();
    let broker = Broker::start_in(home).await;
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("secret"), tool("open")]))
        .await
        .data();
    let (mut ipc, welcome) = leo_testkit::Ipc::hello(
        &broker.home().join("run/sidecar.sock"),
        &broker.agent_token(),
        "rocket",
    )
    .await;
    let names: Vec<&str> = welcome["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["open"], "denied tools are not listed");
    assert_eq!(welcome["denied"], json!(["secret", "leo_app_call"]));
    ipc.call(1, "secret", json!({})).await;
    assert_eq!(outcome_code(&result_of(&mut ipc, 1).await), "denied");
    // Another agent is not affected.
    let mut other = agent(&broker, "scout").await;
    other.call(1, "secret", json!({})).await;
    let mut app = app;
    assert_eq!(app.next_request().await.data["agent"], "scout");
}

#[tokio::test]
async fn timeout_and_a_handoff_that_outlives_it() {
    // Timers to the millisecond, their races with results and a handoff that waits for days
    // are tested with paused time (`core::tests`); here, that the binary ends a parked and a
    // claimed call by timeout and keeps the handoff, in one second.
    let broker = Broker::start_with("client_tools:\n  default_timeout_s: 1\n").await;
    let mut app = App::connect(&broker.http()).await;
    let mut handoff = tool("ask_human");
    handoff["timeout_s"] = json!(0);
    app.register(
        "g",
        json!([tool("quick"), handoff, tool_with_timeout("slow", 1)]),
    )
    .await
    .data();
    let mut ipc = agent(&broker, "rocket").await;

    ipc.call(1, "quick", json!({})).await;
    let quick = app.next_request().await;
    assert_eq!(quick.data["timeout_s"], 1, "the configured default");
    let quick = quick.data["id"].as_str().unwrap().to_owned();
    ipc.call(2, "ask_human", json!({})).await;
    let ask = app.next_request().await;
    assert_eq!(ask.data["timeout_s"], serde_json::Value::Null);
    let ask_id = ask.data["id"].as_str().unwrap().to_owned();
    ipc.call(3, "slow", json!({})).await;
    let slow = app.next_request_id().await;
    app.claim(&slow).await.data();

    // The default-timeout call and the claimed one time out; the app hears of each.
    let mut ended = Vec::new();
    while ended.len() < 2 {
        let f = ipc.recv_of("result").await;
        ended.push((
            f["id"].as_u64().unwrap(),
            outcome_code(&f["outcome"]).to_owned(),
        ));
    }
    ended.sort();
    assert_eq!(ended, [(1, "timeout".into()), (3, "timeout".into())]);
    for _ in 0..2 {
        let cancelled = app.sse.next_of("client_tool.cancelled").await;
        assert_eq!(cancelled.data["reason"], "timeout");
    }
    // An answer after the timeout is refused and says why.
    let late = app.claim(&quick).await;
    assert_eq!(late.code(409), "already_settled");
    assert!(late.error().contains("by timeout"), "{}", late.error());
    assert_eq!(
        app.answer(&slow, json!([])).await.code(409),
        "already_settled"
    );

    // Past the default, the handoff still waits, and can be answered.
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data()[0]["id"], ask_id.as_str());
    app.claim(&ask_id).await.data();
    app.answer(&ask_id, json!([{"type": "text", "text": "yes"}]))
        .await
        .data();
    assert_eq!(result_of(&mut ipc, 2).await["content"][0]["text"], "yes");
}

#[tokio::test]
async fn cancellation_by_agent_and_by_agent_leaving() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request().await.data["id"].clone();
    ipc.send(&json!({"type": "cancel", "id": 1})).await;
    assert_eq!(outcome_code(&result_of(&mut ipc, 1).await), "cancelled");
    let c = app.sse.next_of("client_tool.cancelled").await;
    assert_eq!(
        (c.data["id"].clone(), c.data["reason"].clone()),
        (id, json!("cancelled_by_agent"))
    );

    ipc.call(2, "echo", json!({})).await;
    ipc.call(3, "echo", json!({})).await;
    let a = app.next_request().await.data["id"].clone();
    let b = app.next_request().await.data["id"].clone();
    app.claim(a.as_str().unwrap()).await.data();
    ipc.close().await;
    let mut ended = vec![];
    for _ in 0..2 {
        let c = app.sse.next_of("client_tool.cancelled").await;
        assert_eq!(c.data["reason"], "agent_gone");
        ended.push(c.data["id"].clone());
    }
    ended.sort_by_key(|v| v.to_string());
    let mut want = vec![a.clone(), b];
    want.sort_by_key(|v| v.to_string());
    assert_eq!(ended, want);
    assert_eq!(
        app.answer(a.as_str().unwrap(), json!([])).await.code(409),
        "already_settled"
    );
}

#[tokio::test]
async fn withdrawing_a_tool_cancels_its_calls() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo"), tool("keep")]))
        .await
        .data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    ipc.call(2, "keep", json!({})).await;
    let _ = app.next_request().await;
    let keep = app.next_request().await.data["id"].clone();
    app.register("g", json!([tool("keep")])).await.data();
    let o = result_of(&mut ipc, 1).await;
    assert_eq!(outcome_code(&o), "cancelled");
    let c = app.sse.next_of("client_tool.cancelled").await;
    assert_eq!(c.data["reason"], "tool_withdrawn");
    // The call of the tool that stayed is untouched.
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data().as_array().unwrap().len(), 1);
    assert_eq!(pending.data()[0]["id"], keep);
}

#[tokio::test]
async fn a_result_with_claim_claims_and_settles_in_one_request() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    let mut other = App::connect(&http).await;
    app.register("g", json!([tool("echo")])).await.data();
    other.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    let answer = |client: &str, claim: bool| {
        json!({"client_id": client, "ok": true, "claim": claim,
               "content": [{"type": "text", "text": format!("from {client}")}]})
    };
    let result = |id: &str| format!("/api/v1/client-tools/requests/{id}/result");

    // Unclaimed: claimed and settled together; the app now owns the agent's group.
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    let _ = other.next_request().await;
    let r = http.post(&result(&id), &answer(&app.id, true)).await;
    assert_eq!(r.data()["state"], "settled");
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        format!("from {}", app.id)
    );

    // Another client of the group answering at once is refused as its claim would be.
    ipc.call(2, "echo", json!({})).await;
    let id = other.next_request_id().await;
    let _ = app.next_request().await;
    let r = http.post(&result(&id), &answer(&other.id, true)).await;
    assert_eq!(r.code(409), "owned_by_other");
    // Without the flag an unclaimed request still needs a claim first.
    let r = http.post(&result(&id), &answer(&app.id, false)).await;
    assert_eq!(r.code(409), "not_claimant");
    // With it, on a request this client already claimed, it is a plain result.
    app.claim(&id).await.data();
    let r = http.post(&result(&id), &answer(&app.id, true)).await;
    assert_eq!(r.data()["state"], "settled");
    assert_eq!(outcome_code(&result_of(&mut ipc, 2).await), "");

    // A request another client claimed is not taken over.
    ipc.call(3, "echo", json!({})).await;
    let id = app.next_request_id().await;
    let _ = other.next_request().await;
    app.claim(&id).await.data();
    let r = http.post(&result(&id), &answer(&other.id, true)).await;
    assert_eq!(r.code(409), "not_claimant");
    app.answer(&id, json!([{"type": "text", "text": "ok"}]))
        .await
        .data();
    let _ = result_of(&mut ipc, 3).await;
}
