//! Prompts, resources and templates through the broker's wire: registered with a group,
//! listed and read by a sidecar, each read answered once by the app asked, and a changed
//! resource passed on. The fixtures of `testdata/wire` are checked on the way.

use leo_testkit::{Broker, SseEvent, wire};
use serde_json::{Value, json};

use crate::support::{App, agent};

fn event(e: &SseEvent) -> Value {
    json!({"event": e.event, "data": e.data})
}

fn fixture(name: &str, client_id: &str) -> Value {
    wire::load(name, &[("<client_id>", client_id)])
}

#[tokio::test]
async fn a_read_is_relayed_to_the_app_and_answered_verbatim() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    let mut ipc = agent(&broker, "claude").await;

    let body = fixture("http/register_offers.request.json", &app.id);
    let r = http.post("/api/v1/client-tools", &body).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    wire::check(
        "ipc/broker_offers_changed.json",
        &ipc.recv_of("offers_changed").await,
    );

    ipc.send(&wire::load("ipc/sidecar_list_offers.json", &[]))
        .await;
    wire::check("ipc/broker_offers.json", &ipc.recv_of("offers").await);

    ipc.send(&wire::load("ipc/sidecar_offer.json", &[])).await;
    let asked = app.sse.next_of("client_offer.request").await;
    wire::check("events/client_offer.request.json", &event(&asked));
    let read = asked.data["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/client-offers/requests/{read}/answer");
    let answer = fixture("http/offer_answer.request.json", &app.id);
    wire::check(
        "http/offer_answer.response.json",
        &http.post(&path, &answer).await.body,
    );
    let result = ipc.recv_of("offer_result").await;
    wire::check("ipc/broker_offer_result.json", &result);
    // The app's result object, as it sent it.
    assert_eq!(result["outcome"]["result"], answer["result"]);

    // Answered once: a second answer finds no read waiting.
    let again = http.post(&path, &answer).await;
    assert_eq!(again.status, 404, "{:?}", again.body);
    assert_eq!(again.body["code"], "not_found");

    // Another app cannot answer a read asked of this one.
    let other = App::connect(&http).await;
    ipc.send(&json!({"type": "offer", "id": 3, "kind": "resource",
        "params": {"uri": "test://items/7"}}))
        .await;
    let asked = app.sse.next_of("client_offer.request").await;
    assert_eq!(asked.data["params"]["uri"], "test://items/7");
    let read = asked.data["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/client-offers/requests/{read}/answer");
    let refused = http
        .post(
            &path,
            &json!({"client_id": other.id, "result": {"contents": []}}),
        )
        .await;
    assert_eq!(refused.body["code"], "not_claimant", "{:?}", refused.body);
    let error =
        json!({"client_id": app.id, "error": {"code": "not_found", "message": "no item 7"}});
    http.post(&path, &error).await;
    let result = ipc.recv_of("offer_result").await;
    assert_eq!(
        result["outcome"],
        json!({"error": {"code": "not_found", "message": "no item 7"}})
    );
}

#[tokio::test]
async fn reads_of_what_nobody_offers_or_of_an_app_that_left_end_at_once() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    let mut ipc = agent(&broker, "claude").await;
    let body = fixture("http/register_offers.request.json", &app.id);
    http.post("/api/v1/client-tools", &body).await;

    ipc.send(&json!({"type": "offer", "id": 1, "kind": "prompt", "params": {"name": "nope"}}))
        .await;
    let result = ipc.recv_of("offer_result").await;
    assert_eq!(result["outcome"]["error"]["code"], "not_found", "{result}");
    ipc.send(&json!({"type": "offer", "id": 2, "kind": "complete", "params": {"ref": {}}}))
        .await;
    let result = ipc.recv_of("offer_result").await;
    assert_eq!(
        result["outcome"]["error"]["code"], "invalid_parameter",
        "{result}"
    );

    // The app leaves while a read waits for it.
    ipc.send(&json!({"type": "offer", "id": 3, "kind": "resource",
        "params": {"uri": "test://notes"}}))
        .await;
    app.sse.next_of("client_offer.request").await;
    drop(app);
    // Both come, in either order: the offers' change and the read's end.
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let frame = ipc.recv().await;
        if frame["type"] == "offer_result" {
            assert_eq!(frame["outcome"]["error"]["code"], "no_client", "{frame}");
        }
        kinds.push(frame["type"].as_str().unwrap_or_default().to_owned());
    }
    kinds.sort();
    assert_eq!(kinds, ["offer_result", "offers_changed"]);
    ipc.send(&json!({"type": "list_offers", "id": 4})).await;
    let offers = ipc.recv().await;
    assert_eq!(offers["prompts"], json!([]), "{offers}");
}

#[tokio::test]
async fn offers_obey_the_name_rules_and_the_scope() {
    let broker = Broker::start().await;
    let http = broker.http();
    let app = App::connect(&http).await;
    let other = App::connect(&http).await;
    let mut body = fixture("http/register_offers.request.json", &app.id);
    body["agents"] = json!(["rocket"]);
    http.post("/api/v1/client-tools", &body).await;

    let mut clash = fixture("http/register_offers.request.json", &other.id);
    clash["group"] = json!("other");
    let r = http.post("/api/v1/client-tools", &clash).await;
    assert_eq!(r.body["code"], "name_conflict", "{:?}", r.body);
    let mut bad = fixture("http/register_offers.request.json", &other.id);
    bad["resource_templates"][0]["uri_template"] = json!("test://{a}{b}");
    let r = http.post("/api/v1/client-tools", &bad).await;
    let message = r.body["error"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("at $.resource_templates[0].uri_template: "),
        "{message}"
    );
    let mut reserved = fixture("http/register_offers.request.json", &other.id);
    reserved["prompts"][0]["name"] = json!("leo_greet");
    let r = http.post("/api/v1/client-tools", &reserved).await;
    let message = r.body["error"].as_str().unwrap_or_default();
    assert!(message.starts_with("at $.prompts[0].name: "), "{message}");

    let mut scout = agent(&broker, "scout").await;
    scout.send(&json!({"type": "list_offers", "id": 1})).await;
    let offers = scout.recv_of("offers").await;
    assert_eq!(offers["resources"], json!([]), "{offers}");
    let mut rocket = agent(&broker, "rocket").await;
    rocket.send(&json!({"type": "list_offers", "id": 1})).await;
    let offers = rocket.recv_of("offers").await;
    assert_eq!(offers["resources"][0]["uri"], "test://notes", "{offers}");

    // A changed resource reaches the sessions of the agents it is offered to.
    let updated = fixture("http/resource_updated.request.json", &app.id);
    let r = http.post("/api/v1/client-offers/updated", &updated).await;
    wire::check("http/resource_updated.response.json", &r.body);
    wire::check(
        "ipc/broker_resource_updated.json",
        &rocket.recv_of("resource_updated").await,
    );
    while let Some(frame) = scout.within(std::time::Duration::from_millis(300)).await {
        assert_ne!(frame["type"], "resource_updated", "{frame}");
    }
}
