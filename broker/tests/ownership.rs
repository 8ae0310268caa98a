//! Two apps serving the same group: the first claimant owns that agent's group.

use leo_testkit::Broker;
use serde_json::json;

use crate::support::{App, agent, result_of, tool};

#[tokio::test]
async fn first_claimant_owns_the_agents_group_until_it_leaves() {
    let broker = Broker::start_with("client_tools:\n  resume_grace_s: 1\n").await;
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

    // When the phone leaves and does not resume within the grace period, ownership is
    // released and the mac can serve rocket.
    let phone_id = phone.id.clone();
    drop(phone);
    // The tool set agents see did not change (the mac serves the same group), so no
    // client_tools.changed is published; wait until the broker has seen the phone go.
    let http = broker.http();
    crate::support::eventually(|| async {
        http.get("/api/v1/client-tools").await.data()["tools"][0]["clients"] == json!([mac.id])
    })
    .await;
    crate::support::eventually(|| async { mac.claim(&id2).await.status == 200 }).await;
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
async fn a_claimant_that_disconnects_and_does_not_resume_gives_its_claim_back() {
    let broker = Broker::start_with("client_tools:\n  resume_grace_s: 1\n").await;
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
    assert_eq!(mac.next_request_id().await, a);
    assert_eq!(mac.next_request_id().await, b);
    phone.claim(&a).await.data();
    drop(phone);
    // The phone's claim and ownership wait for it to resume; it does not, so once the grace
    // period is over the call is parked and offered again, and the mac may take it.
    assert_eq!(mac.next_request_id().await, a);
    mac.serve(&a, json!([{"type": "text", "text": "from the mac"}]))
        .await;
    assert_eq!(
        result_of(&mut rocket, 1).await["content"][0]["text"],
        "from the mac"
    );
    mac.serve(&b, json!([{"type": "text", "text": "ok"}])).await;
    assert_eq!(result_of(&mut rocket, 2).await["content"][0]["text"], "ok");
}

#[tokio::test]
async fn a_claimant_that_resumes_keeps_its_client_id_claims_and_ownership() {
    let broker = Broker::start().await;
    let mut mac = App::connect(&broker.http()).await;
    let mut phone = App::connect(&broker.http()).await;
    for app in [&mac, &phone] {
        app.register("clip", json!([tool("read_clip")]))
            .await
            .data();
    }
    let mut rocket = agent(&broker, "rocket").await;
    rocket.call(1, "read_clip", json!({})).await;
    let a = phone.next_request_id().await;
    mac.next_request_id().await;
    phone.claim(&a).await.data();
    let (id, key) = (phone.id.clone(), phone.resume.clone());
    drop(phone);
    // Someone else's key, a malformed one, or one given to a plain stream are refused.
    let stranger = broker
        .http()
        .get("/api/v1/events?client_tools=1&resume=k_nope")
        .await;
    assert_eq!(stranger.code(400), "invalid_parameter");
    let bad = broker
        .http()
        .get("/api/v1/events?client_tools=1&resume=a-b")
        .await;
    assert_eq!(bad.code(400), "invalid_parameter");
    let plain = broker
        .http()
        .get(&format!("/api/v1/events?resume={key}"))
        .await;
    assert_eq!(plain.code(400), "invalid_parameter");

    let phone = App::resume(&broker.http(), &key).await;
    assert_eq!(phone.id, id, "the same client");
    assert_eq!(phone.resume, key);
    // Still the claimant and the owner: the mac cannot take it, the phone answers it.
    assert_eq!(mac.claim(&a).await.code(409), "owned_by_other");
    phone
        .answer(&a, json!([{"type": "text", "text": "phone"}]))
        .await
        .data();
    assert_eq!(
        result_of(&mut rocket, 1).await["content"][0]["text"],
        "phone"
    );
    phone
        .register("clip", json!([tool("read_clip")]))
        .await
        .data();
    rocket.call(2, "read_clip", json!({})).await;
    let b = mac.next_request_id().await;
    assert_eq!(mac.claim(&b).await.code(409), "owned_by_other");
    // While its stream is open the key cannot open a second one.
    let twice = broker
        .http()
        .get(&format!("/api/v1/events?client_tools=1&resume={key}"))
        .await;
    assert_eq!(twice.code(409), "already_claimed");
}
