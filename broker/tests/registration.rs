//! Registration over HTTP: success, replacement, withdrawal, and every rule's error code.

use leo_testkit::Broker;
use serde_json::{Value, json};

use crate::support::{App, tool};

#[tokio::test]
async fn register_list_replace_and_withdraw() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let r = app
        .register("clip", json!([tool("read_clip"), tool("write_clip")]))
        .await;
    assert_eq!(r.data()["tools"], json!(["read_clip", "write_clip"]));
    assert_eq!(r.data()["revision"], 1);
    let changed = app.sse.next_of("client_tools.changed").await;
    assert_eq!(
        changed.data,
        json!({"revision": 1, "tools": ["read_clip", "write_clip"]})
    );

    let list = broker.http().get("/api/v1/client-tools").await;
    let tools = list.data()["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["name"], "read_clip");
    assert_eq!(tools[0]["group"], "clip");
    assert_eq!(tools[0]["timeout_s"], 600, "default timeout");
    assert_eq!(tools[0]["clients"], json!([app.id]));

    // The same registration again changes nothing and bumps no revision.
    let r = app
        .register("clip", json!([tool("read_clip"), tool("write_clip")]))
        .await;
    assert_eq!(r.data()["revision"], 1);

    // A group is replaced as a whole.
    let r = app.register("clip", json!([tool("read_clip")])).await;
    assert_eq!(r.data()["revision"], 2);
    let changed = app.sse.next_of("client_tools.changed").await;
    assert_eq!(changed.data["tools"], json!(["read_clip"]));

    // An empty list withdraws it.
    let r = app.register("clip", json!([])).await;
    assert_eq!(r.data()["revision"], 3);
    let list = broker.http().get("/api/v1/client-tools").await;
    assert_eq!(list.data()["tools"], json!([]));

    // Handoff and label are kept.
    let mut t = tool("ask");
    t["timeout_s"] = json!(0);
    t["label"] = json!("Asking the human");
    app.register("human", json!([t])).await.data();
    let list = broker.http().get("/api/v1/client-tools").await;
    assert_eq!(list.data()["tools"][0]["timeout_s"], Value::Null);
    assert_eq!(list.data()["tools"][0]["label"], "Asking the human");
}

/// `(tools, expected code, expected status, a fragment of the message)`.
fn rule_cases() -> Vec<(Value, &'static str, u16, String)> {
    let mut cases = vec![
        (
            json!([{"name": "", "description": "d", "input_schema": {"type": "object"}}]),
            "invalid_tool",
            422,
            "at $.tools[0].name".to_owned(),
        ),
        (
            json!([{"name": "a b", "description": "d", "input_schema": {"type": "object"}}]),
            "invalid_tool",
            422,
            "must be 1 to 64 of [A-Za-z0-9_-]".to_owned(),
        ),
        (
            json!([{"name": "x".repeat(65), "description": "d", "input_schema": {"type": "object"}}]),
            "invalid_tool",
            422,
            "at $.tools[0].name".to_owned(),
        ),
        (
            json!([{"name": "LEO_thing", "description": "d", "input_schema": {"type": "object"}}]),
            "invalid_tool",
            422,
            "reserved prefix".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "", "input_schema": {"type": "object"}}]),
            "invalid_tool",
            422,
            "at $.tools[0].description: description is required".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d".repeat(1025), "input_schema": {"type": "object"}}]),
            "invalid_tool",
            422,
            "1025 characters, at most 1024".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d", "input_schema": {"type": "object", "properties": {"ref": {"type": "bogus"}}}}]),
            "invalid_tool",
            422,
            "at $.properties.ref.type: unknown type \"bogus\"".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"$ref": "#/x"}}}}]),
            "invalid_tool",
            422,
            "at $.properties.a.$ref: $ref \"#/x\" must point into \"#/$defs/\"".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d", "input_schema": {"type": "object", "description": "x".repeat(16_400)}}]),
            "invalid_tool",
            422,
            "at most 16384".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d", "input_schema": {"type": "object"}, "label": ""}]),
            "invalid_tool",
            422,
            "at $.tools[0].label".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d", "input_schema": {"type": "object"}, "timeout_s": 999_999_999}]),
            "invalid_tool",
            422,
            "at $.tools[0].timeout_s".to_owned(),
        ),
        (
            json!([tool("dup"), tool("DUP")]),
            "invalid_tool",
            422,
            "at $.tools[1].name: \"DUP\" repeats $.tools[0].name".to_owned(),
        ),
        (
            json!([{"name": "ok", "description": "d", "input_schema": {"type": "object", "properties": {"p": {"type": "string", "pattern": "("}}}}]),
            "invalid_tool",
            422,
            "at $.tools[0].input_schema".to_owned(),
        ),
    ];
    let many: Vec<Value> = (0..65).map(|i| tool(&format!("t{i}"))).collect();
    cases.push((
        Value::Array(many),
        "too_many_tools",
        422,
        "at most 64 per group".to_owned(),
    ));
    cases
}

#[tokio::test]
async fn every_registration_rule_has_its_code() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    for (tools, code, status, fragment) in rule_cases() {
        let r = app.register("g", tools.clone()).await;
        assert_eq!(r.code(status), code, "{tools}");
        assert!(
            r.error().contains(&fragment),
            "{tools}: {:?} lacks {fragment:?}",
            r.error()
        );
    }
    // Nothing was registered by any failure.
    let list = broker.http().get("/api/v1/client-tools").await;
    assert_eq!(list.data()["tools"], json!([]));
    let r = app.register("bad group!", json!([tool("a")])).await;
    assert_eq!(r.code(422), "invalid_tool");
    assert!(r.error().starts_with("at $.group"), "{}", r.error());
}

#[tokio::test]
async fn names_are_unique_across_groups_and_the_broker_holds_64() {
    let broker = Broker::start().await;
    let a = App::connect(&broker.http()).await;
    let b = App::connect(&broker.http()).await;
    a.register("one", json!([tool("lookup")])).await.data();
    // Another group, any client, any case: a conflict.
    let r = b.register("two", json!([tool("LOOKUP")])).await;
    assert_eq!(r.code(409), "name_conflict");
    assert!(r.error().contains("group \"one\""), "{}", r.error());
    let r = a.register("two", json!([tool("lookup")])).await;
    assert_eq!(r.code(409), "name_conflict");
    // The same group from another client (a second device of the same app) is fine.
    b.register("one", json!([tool("lookup")])).await.data();
    // But not with a different spelling inside that group.
    let r = b.register("one", json!([tool("Lookup")])).await;
    assert_eq!(r.code(409), "name_conflict");

    // 64 per broker: 63 more distinct names fit, the 65th does not.
    let fill: Vec<Value> = (0..63).map(|i| tool(&format!("f{i}"))).collect();
    a.register("fill", Value::Array(fill)).await.data();
    let r = b.register("extra", json!([tool("one_more")])).await;
    assert_eq!(r.code(422), "too_many_tools");
    assert!(r.error().contains("at most 64"), "{}", r.error());
}

#[tokio::test]
async fn registration_needs_a_connected_provider_stream() {
    let broker = Broker::start().await;
    let http = broker.http();
    let body = json!({"client_id": "c_nope", "group": "g", "tools": [tool("a")]});
    let r = http.post("/api/v1/client-tools", &body).await;
    assert_eq!(r.code(404), "unknown_client");

    // A plain (non-provider) stream's client_id is not a provider.
    let mut plain = leo_testkit::Sse::open(&http, "/api/v1/events", None).await;
    let hello = plain.next().await;
    assert_eq!(hello.data["provider"], false);
    let body = json!({"client_id": hello.data["client_id"], "group": "g", "tools": [tool("a")]});
    let r = http.post("/api/v1/client-tools", &body).await;
    assert_eq!(r.code(404), "unknown_client");
}
