//! A `client_id` belongs to the principal whose stream (or webhook) it names: every route that
//! takes one in its body (register, claim, result, progress, input) refuses another
//! principal's exactly as an unknown client, and the audit's principal is the token's.

use leo_testkit::{Broker, Http};
use serde_json::{Value, json};

use crate::support::{App, agent, result_of, tool};

/// A broker with two paired devices, `ipad` and `phone`; their tokens.
pub async fn two_devices() -> (Broker, String, String) {
    let home = tempfile::tempdir().unwrap();
    let mut tokens = Vec::new();
    for name in ["ipad", "phone"] {
        let (ok, out, err) = crate::security::leo(home.path(), &["device", "pair", name]).await;
        assert!(ok, "{err}");
        tokens.push(out.lines().nth(1).unwrap().trim().to_owned());
    }
    let phone = tokens.pop().unwrap();
    let ipad = tokens.pop().unwrap();
    (Broker::start_in(home).await, ipad, phone)
}

/// What `http` gets for each route naming `client_id` on call `id`, as `(route, status, code,
/// message)` with the client id in the message replaced by `<id>`.
async fn every_route(http: &Http, id: &str, client_id: &str) -> Vec<(String, u16, String, String)> {
    let cid = Value::String(client_id.to_owned());
    let text = json!([{"type": "text", "text": "stolen"}]);
    let form = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    let requests = format!("/api/v1/client-tools/requests/{id}");
    let routes = [
        (
            "register",
            "/api/v1/client-tools".to_owned(),
            json!({"client_id": cid, "group": "g", "tools": [tool("echo")]}),
        ),
        (
            "claim",
            format!("{requests}/claim"),
            json!({"client_id": cid}),
        ),
        (
            "result",
            format!("{requests}/result"),
            json!({"client_id": cid, "ok": true, "content": text}),
        ),
        (
            "result with claim",
            format!("{requests}/result"),
            json!({"client_id": cid, "ok": true, "content": text, "claim": true}),
        ),
        (
            "progress",
            format!("{requests}/progress"),
            json!({"client_id": cid, "progress": 1}),
        ),
        (
            "input",
            format!("{requests}/input"),
            json!({"client_id": cid, "message": "Sure?", "requested_schema": form}),
        ),
    ];
    let mut got = Vec::new();
    for (route, path, body) in routes {
        let r = http.post(&path, &body).await;
        let code = r.body["code"].as_str().unwrap_or("").to_owned();
        let message = r.error().replace(client_id, "<id>");
        got.push((route.to_owned(), r.status, code, message));
    }
    got
}

/// The audit trail, oldest first, as `principal kind action target`, without the entries of
/// `leo device pair`.
pub async fn trail(http: &Http) -> Vec<String> {
    let r = http.get("/api/v1/audit?limit=500").await;
    r.data()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .filter(|e| e["token_kind"] != "local")
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["principal"].as_str().unwrap(),
                e["token_kind"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
                e["target"].as_str().unwrap_or("-"),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_device_cannot_act_with_the_operators_or_another_devices_client_id() {
    let (broker, ipad, phone) = two_devices().await;
    let http = broker.http();
    let thief = http.with_token(Some(&ipad));
    let mine = App::connect(&thief).await;
    mine.register_ok("mine", json!([tool("own")])).await;
    let mut ops = App::connect(&http).await;
    ops.register_ok("ops", json!([tool("deploy")])).await;
    let mut other = App::connect(&http.with_token(Some(&phone))).await;
    other.register_ok("photos", json!([tool("snap")])).await;
    let mut ipc = agent(&broker, "rocket").await;

    // The answers an unknown client gets, route by route: the ones to match.
    ipc.call(1, "deploy", json!({})).await;
    let deploy = ops.next_request_id().await;
    let unknown = every_route(&thief, &deploy, "c_nobody").await;
    assert!(
        unknown
            .iter()
            .all(|(_, s, c, _)| *s == 404 && c == "unknown_client"),
        "{unknown:?}"
    );
    ipc.call(2, "snap", json!({})).await;
    // Every provider stream sees every call; the phone's is the call of its tool.
    let snap = loop {
        let r = other.next_request().await;
        if r.data["tool"] == "snap" {
            break r.data["id"].as_str().unwrap().to_owned();
        }
    };

    for (victim, id) in [(&ops, &deploy), (&other, &snap)] {
        // Parked: register, claim, result (with and without claim) are refused.
        assert_eq!(
            every_route(&thief, id, &victim.id).await,
            unknown,
            "{}",
            victim.id
        );
        // Claimed by its owner: progress, input and result are refused too.
        victim.claim_ok(id).await;
        assert_eq!(
            every_route(&thief, id, &victim.id).await,
            unknown,
            "{}",
            victim.id
        );
    }
    // Nothing was taken: each call is its owner's to answer, and only its owner's answer
    // reaches the agent.
    let done = json!([{"type": "text", "text": "deployed"}]);
    ops.answer(&deploy, done).await.data();
    let done = json!([{"type": "text", "text": "snapped"}]);
    other.answer(&snap, done).await.data();
    assert_eq!(
        result_of(&mut ipc, 1).await["content"][0]["text"],
        "deployed"
    );
    assert_eq!(
        result_of(&mut ipc, 2).await["content"][0]["text"],
        "snapped"
    );
    let tools = http.get("/api/v1/client-tools").await;
    let names: Vec<&str> = tools.data()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["deploy", "own", "snap"], "no group was replaced");

    // The console's provider is refused to a device as any unknown client.
    let consoled = every_route(&thief, &deploy, "console").await;
    assert_eq!(consoled[0], unknown[0]);

    // The trail: every change under the principal whose token made it, none by the ipad but
    // on its own group.
    let trail = trail(&http).await;
    let ipad_entries: Vec<&String> = trail.iter().filter(|l| l.contains("device:ipad")).collect();
    assert_eq!(
        ipad_entries,
        ["device:ipad device register mine"],
        "{trail:#?}"
    );
    assert!(
        trail.contains(&format!("operator operator result {deploy}")),
        "{trail:#?}"
    );
    assert!(
        trail.contains(&format!("device:phone device result {snap}")),
        "{trail:#?}"
    );
}

#[tokio::test]
async fn the_operator_does_not_act_for_a_devices_client() {
    let (broker, ipad, _) = two_devices().await;
    let http = broker.http();
    let mut app = App::connect(&http.with_token(Some(&ipad))).await;
    app.register_ok("photos", json!([tool("snap")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "snap", json!({})).await;
    let id = app.next_request_id().await;
    let unknown = every_route(&http, &id, "c_nobody").await;
    assert_eq!(every_route(&http, &id, &app.id).await, unknown);
    app.claim_ok(&id).await;
    assert_eq!(every_route(&http, &id, &app.id).await, unknown);
    // The operator ends a device's call with its own route instead.
    let r = http
        .post(
            &format!("/api/v1/client-tools/requests/{id}/cancel"),
            &json!({}),
        )
        .await;
    assert_eq!(r.data()["state"], "cancelled");
}

/// The first suite's repro: a device registering with the operator's client id replaced the
/// operator's group, audited as `register` by the device and `definition_changed` by the
/// operator. Now refused, and a definition change is audited under the registering token.
#[tokio::test]
async fn a_definition_change_is_audited_as_the_token_that_made_it() {
    let (broker, ipad, _) = two_devices().await;
    let http = broker.http();
    let ops = App::connect(&http).await;
    ops.register_ok("ops", json!([tool("deploy")])).await;
    let device = http.with_token(Some(&ipad));
    let mut changed = tool("deploy");
    changed["description"] = json!("Deploy somewhere else");
    let r = device
        .post(
            "/api/v1/client-tools",
            &json!({"client_id": ops.id, "group": "ops", "tools": [changed]}),
        )
        .await;
    assert_eq!(r.code(404), "unknown_client");
    ops.register_ok("ops", json!([changed])).await;
    let trail = trail(&http).await;
    assert_eq!(
        trail,
        [
            "operator operator register ops",
            "operator operator definition_changed deploy",
            "operator operator register ops",
        ],
        "{trail:#?}"
    );
}
