//! Two apps serving the same group: the first claimant owns that agent's group.

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{App, agent, result_of, tool};

#[tokio::test]
async fn first_claimant_owns_the_agents_group_until_it_leaves() {
    let broker = Broker::start().await;
    let mut mac = App::connect(&broker.http()).await;
    let mut phone = App::connect(&broker.http()).await;
    mac.register("clip", json!([tool("read_clip")]))
        .await
        .data();
    phone
        .register("clip", json!([tool("read_clip")]))
        .await
        .data();
    let mut rocket = agent(&broker, "rocket").await;
    let mut scout = agent(&broker, "scout").await;

    // Both apps see the call; the phone claims first and owns rocket's group.
    rocket.call(1, "read_clip", json!({})).await;
    let id = mac.next_request_id().await;
    assert_eq!(phone.next_request().await.data["id"], id.as_str());
    phone.claim(&id).await.data();
    assert_eq!(mac.claim(&id).await.code(409), "owned_by_other");
    phone
        .answer(&id, json!([{"type": "text", "text": "from phone"}]))
        .await
        .data();
    assert_eq!(
        result_of(&mut rocket, 1).await["content"][0]["text"],
        "from phone"
    );

    // The next call of rocket: the request says who owns it, and only the owner may claim.
    rocket.call(2, "read_clip", json!({})).await;
    let req = mac.next_request().await;
    assert_eq!(req.data["owner"], phone.id.as_str());
    let id2 = req.data["id"].as_str().unwrap().to_owned();
    let r = mac.claim(&id2).await;
    assert_eq!(r.code(409), "owned_by_other");
    assert!(r.error().contains(&phone.id), "{}", r.error());

    // Ownership is per agent: the mac can own scout's group.
    scout.call(1, "read_clip", json!({})).await;
    let sid = mac.next_request_id().await;
    mac.claim(&sid).await.data();
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    let owners: Vec<_> = pending
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["agent"].clone(), p["owner"].clone()))
        .collect();
    assert!(
        owners.contains(&(json!("rocket"), json!(phone.id))),
        "{owners:?}"
    );
    assert!(
        owners.contains(&(json!("scout"), json!(mac.id))),
        "{owners:?}"
    );

    // When the phone leaves, ownership is released and the mac can serve rocket.
    let phone_id = phone.id.clone();
    drop(phone);
    // The tool set agents see did not change (the mac serves the same group), so no
    // client_tools.changed is published; wait until the broker has seen the phone go.
    let http = broker.http();
    crate::support::eventually(|| async {
        http.get("/api/v1/client-tools").await.data()["tools"][0]["clients"] == json!([mac.id])
    })
    .await;
    mac.claim(&id2).await.data();
    mac.answer(&id2, json!([{"type": "text", "text": "from mac"}]))
        .await
        .data();
    assert_eq!(
        result_of(&mut rocket, 2).await["content"][0]["text"],
        "from mac"
    );
    let list = broker.http().get("/api/v1/client-tools").await;
    assert_eq!(list.data()["tools"][0]["clients"], json!([mac.id]));
    assert_ne!(phone_id, mac.id);
}

#[tokio::test]
async fn a_claimant_that_disconnects_ends_its_calls_as_no_client() {
    let broker = Broker::start().await;
    let mut mac = App::connect(&broker.http()).await;
    let mut phone = App::connect(&broker.http()).await;
    mac.register("clip", json!([tool("read_clip")]))
        .await
        .data();
    phone
        .register("clip", json!([tool("read_clip")]))
        .await
        .data();
    let mut rocket = agent(&broker, "rocket").await;
    rocket.call(1, "read_clip", json!({})).await;
    rocket.call(2, "read_clip", json!({})).await;
    let a = phone.next_request_id().await;
    let b = phone.next_request_id().await;
    phone.claim(&a).await.data();
    drop(phone);
    // The claimed call ends; the unclaimed one still waits, since the mac serves the tool.
    let o = result_of(&mut rocket, 1).await;
    assert_eq!(o["error"]["code"], "no_client");
    let c = mac.sse.next_of("client_tool.cancelled").await;
    assert_eq!(
        (
            c.data["id"].as_str().unwrap(),
            c.data["reason"].as_str().unwrap()
        ),
        (a.as_str(), "client_gone")
    );
    mac.claim(&b).await.data();
    mac.answer(&b, json!([{"type": "text", "text": "ok"}]))
        .await
        .data();
    assert_eq!(result_of(&mut rocket, 2).await["content"][0]["text"], "ok");
}
