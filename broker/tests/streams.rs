//! The event stream: hello, redaction, one contiguous seq, withdrawal on close, replay, and
//! the same routes on the unix socket.

use std::time::Duration;

use leo_testkit::{Broker, Sse};
use serde_json::json;

use crate::support::{App, agent, result_of, tool};

#[tokio::test]
async fn plain_streams_see_requests_redacted_and_seq_stays_contiguous() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let agent_http = broker.http().with_token(Some(&broker.agent_token()));
    let mut watcher = Sse::open(&agent_http, "/api/v1/events", None).await;
    let hello = watcher.next().await;
    assert_eq!(hello.event, "hello");
    assert_eq!(hello.id, None, "hello is not part of the sequence");
    assert_eq!(hello.data["features"], json!(["client_tools"]));
    assert_eq!(hello.data["provider"], false);

    app.register("g", json!([tool("echo")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "secret"})).await;
    ipc.call(2, "echo", json!({"text": "secret"})).await;
    ipc.send(&json!({"type": "cancel", "id": 2})).await;

    let mut seen = vec![];
    for _ in 0..4 {
        let e = watcher.next().await;
        seen.push((e.id.unwrap(), e.event.clone(), e.data.clone()));
    }
    let ids: Vec<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(ids, [1, 2, 3, 4], "one contiguous sequence: {seen:?}");
    assert_eq!(seen[0].1, "client_tools.changed");
    assert_eq!(seen[0].2, json!({"revision": 1, "tools": ["echo"]}));
    for (_, event, data) in &seen[1..] {
        assert!(event == "client_tool.request" || event == "client_tool.cancelled");
        assert_eq!(
            data.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["id"],
            "redacted: {data}"
        );
    }
    // The provider stream saw the same seqs in full.
    let full = app.next_request().await;
    assert_eq!(full.id, Some(2));
    assert_eq!(full.data["arguments"], json!({"text": "secret"}));
    assert_eq!(full.data["id"], seen[1].2["id"]);
    let _ = result_of(&mut ipc, 2).await;
}

#[tokio::test]
async fn closing_the_stream_withdraws_everything_it_registered() {
    let broker = Broker::start_with("client_tools:\n  resume_grace_s: 1\n").await;
    let app = App::connect(&broker.http()).await;
    let mut watcher = App::connect(&broker.http()).await;
    app.register("a", json!([tool("one")])).await.data();
    app.register("b", json!([tool("two")])).await.data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "one", json!({})).await;
    let _ = watcher.next_request().await;
    drop(app);
    // The tools leave the agents' lists at once; the call waits for the app's grace.
    let next = watcher.sse.next().await;
    assert_eq!(next.event, "client_tools.changed", "{:?}", next.data);
    assert_eq!(next.data["tools"], json!([]));
    let list = broker.http().get("/api/v1/client-tools").await;
    assert_eq!(list.data()["tools"], json!([]));
    // The app does not come back: once its grace is over, the call ends.
    let o = result_of(&mut ipc, 1).await;
    assert_eq!(o["error"]["code"], "cancelled");
    assert_eq!(o["error"]["message"], "tool \"one\" was withdrawn");
    let c = watcher.sse.next_of("client_tool.cancelled").await;
    assert_eq!(c.data["reason"], "tool_withdrawn");
}

/// A dropped connection (a laptop asleep, a network blip) does not cancel the calls an agent
/// waits on: the app comes back with its resume key, registers again, is offered the call it
/// had not claimed yet, and its answer reaches the agent.
#[tokio::test]
async fn an_app_that_drops_and_resumes_answers_the_call_parked_meanwhile() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut watcher = App::connect(&broker.http()).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    let key = app.resume.clone();
    drop(app);
    let changed = watcher.sse.next_of("client_tools.changed").await;
    assert_eq!(changed.data["tools"], json!([]), "the broker saw the drop");
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data()[0]["id"], id.as_str());
    assert_eq!(pending.data()[0]["state"], "parked");

    let mut app = App::resume(&broker.http(), &key).await;
    app.register_ok("g", json!([tool("echo")])).await;
    assert_eq!(app.next_request_id().await, id, "offered again");
    app.serve(&id, json!([{"type": "text", "text": "after the drop"}]))
        .await;
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        "after the drop"
    );
}

#[tokio::test]
async fn reconnecting_with_last_event_id_replays_what_was_missed() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let first = app.sse.next_of("client_tools.changed").await;
    let last = first.id.unwrap();
    let mut watcher = Sse::open(&broker.http(), "/api/v1/events?client_tools=1", None).await;
    let _ = watcher.next().await;
    drop(watcher);

    // Events happen while a second provider is away.
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({"text": "a"})).await;
    ipc.call(2, "echo", json!({"text": "b"})).await;
    let r1 = app.next_request().await;
    let r2 = app.next_request().await;

    let mut back = Sse::open(&broker.http(), "/api/v1/events?client_tools=1", Some(last)).await;
    let hello = back.next().await;
    assert_eq!(hello.event, "hello");
    assert_eq!(hello.data["replay_gap"], false);
    let e1 = back.next().await;
    let e2 = back.next().await;
    assert_eq!((e1.id, e2.id), (r1.id, r2.id));
    assert_eq!(e1.data, r1.data);
    assert_eq!(e2.data["arguments"], json!({"text": "b"}));
    // Nothing else is replayed.
    assert!(back.within(Duration::from_millis(300)).await.is_none());

    // Pending recovery after reconnect: both calls are listed for the new client.
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data().as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_last_event_id_older_than_the_ring_is_reported_as_a_gap() {
    let broker = Broker::start_with("client_tools:\n  replay_events: 2\n").await;
    let app = App::connect(&broker.http()).await;
    for i in 0..4 {
        app.register("g", json!([tool(&format!("t{i}"))]))
            .await
            .data();
    }
    let mut back = Sse::open(&broker.http(), "/api/v1/events", Some(0)).await;
    let hello = back.next().await;
    assert_eq!(hello.data["replay_gap"], true);
    assert_eq!(hello.data["seq"], 4);
    assert_eq!(back.next().await.id, Some(3));
    assert_eq!(back.next().await.id, Some(4));
    let bad = broker
        .http()
        .send(
            "GET",
            "/api/v1/events",
            Default::default(),
            &[("last-event-id", "x")],
        )
        .await;
    assert_eq!(bad.code(400), "invalid_parameter");
}

#[tokio::test]
async fn the_unix_socket_serves_the_same_routes() {
    let broker = Broker::start().await;
    let unix = broker.http_unix();
    let mut app = App::connect(&unix).await;
    app.register("g", json!([tool("echo")])).await.data();
    assert_eq!(
        unix.get("/api/v1/client-tools").await.data()["tools"][0]["name"],
        "echo"
    );
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    assert_eq!(
        unix.get("/api/v1/client-tools/requests?pending=1")
            .await
            .data()[0]["id"],
        id.as_str()
    );
    app.claim(&id).await.data();
    app.answer(&id, json!([{"type": "text", "text": "via socket"}]))
        .await
        .data();
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        "via socket"
    );
    // Errors and auth are the same there; the Host check is for TCP only.
    assert_eq!(
        unix.with_token(None)
            .get("/api/v1/client-tools")
            .await
            .code(401),
        "unauthorized"
    );
    assert_eq!(
        unix.with_host("evil.example")
            .get("/api/v1/client-tools")
            .await
            .status,
        200
    );
    assert_eq!(unix.get("/api/v1/nope").await.code(404), "not_found");
}

#[tokio::test]
async fn an_app_names_itself_on_its_stream_and_a_bad_name_is_refused_with_its_reason() {
    let broker = Broker::start().await;
    let http = broker.http();
    let path = "/api/v1/events?client_tools=1&name=Photo%20booth+%E2%98%95";
    let mut named = Sse::open(&http, path, None).await;
    let id = named.next().await.data["client_id"].clone();
    let (_plain, plain) = Sse::provider(&http).await;
    let status = http.get("/api/v1/status").await;
    let apps = status.data()["apps"].as_array().unwrap().clone();
    let name_of = |client: &serde_json::Value| {
        apps.iter()
            .find(|a| &a["client_id"] == client)
            .map(|a| a["name"].clone())
            .unwrap()
    };
    assert_eq!(name_of(&id), json!("Photo booth ☕"));
    assert_eq!(name_of(&json!(plain)), json!(null), "no name: null");

    let long = format!("name={}", "a".repeat(65));
    for (query, says) in [
        ("name=", "must be 1 to 64 characters, not 0"),
        (long.as_str(), "must be 1 to 64 characters, not 65"),
        ("name=a%0Ab", "must be printable characters; U+000A is not"),
        (
            "name=%E2%80%AEtxt",
            "must be printable characters; U+202E is not",
        ),
        ("name=%20a", "must not begin or end with a space"),
        ("client_tools=1&name=a&name=b", "is given twice"),
    ] {
        let reply = http.get(&format!("/api/v1/events?{query}")).await;
        assert_eq!(reply.code(400), "invalid_parameter", "{query}");
        assert_eq!(
            reply.error(),
            format!("query parameter \"name\" {says}"),
            "{query}"
        );
    }
    let reply = http.get("/api/v1/events?name=a&names=b").await;
    assert_eq!(reply.code(400), "unknown_parameter");
}
