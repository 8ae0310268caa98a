//! Clients known by a Client ID Metadata Document: the Python SDK logs in with one served by
//! the test over HTTPS on loopback, and the documents a broker must not believe, or must not
//! fetch, are refused with `invalid_client` before anything is redirected.

use leo_testkit::{Broker, require};
use serde_json::json;

use super::served::Served;
use super::{REDIRECT, anonymous, authorize, sdk_login};

/// A broker that fetches documents from loopback (`auth.allow_private_fetch`), trusting the
/// CA of `served`.
async fn broker_for(served: &Served, config: &str) -> Broker {
    let ca = served.ca.as_ref().unwrap().to_str().unwrap().to_owned();
    Broker::start_with_env(config, &[("LEO_CA_FILE", ca.as_str())]).await
}

/// The document of `url`, as a client would publish it.
fn document(url: &str) -> serde_json::Value {
    json!({"client_id": url, "client_name": "SDK Client", "redirect_uris": [REDIRECT],
           "grant_types": ["authorization_code", "refresh_token"],
           "response_types": ["code"], "token_endpoint_auth_method": "none"})
}

/// The plain `400` of an authorization request for `client_id`: its text.
async fn refused(broker: &Broker, client_id: &str) -> String {
    let r = authorize(broker, client_id, &[]).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.header("location").is_none(), "{r:?}");
    r.body.as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_logs_in_by_its_metadata_document() {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let served = Served::https().await;
    let url = served.url("/sdk/client.json");
    served.json("/sdk/client.json", &document(&url));
    let broker = broker_for(&served, "auth:\n  allow_private_fetch: true\n").await;
    let m = anonymous(&broker)
        .get("/.well-known/oauth-authorization-server")
        .await;
    assert_eq!(m.body["client_id_metadata_document_supported"], true);

    let client_id = sdk_login(&broker, &python, Some(&url)).await;
    assert_eq!(client_id, url);
    // Fetched once: the authorization request's; the token endpoint knew it by its grant.
    assert_eq!(served.hits("/sdk/client.json"), 1);
    let grants = broker.http().get("/api/v1/oauth/grants").await;
    let grants = grants.data()["grants"].clone();
    assert_eq!(grants[0]["client_id"], url, "{grants}");
    assert_eq!(grants[0]["client_name"], "SDK Client", "{grants}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_that_cannot_be_believed_or_fetched_are_refused() {
    let served = Served::https().await;
    let broker = broker_for(&served, "auth:\n  allow_private_fetch: true\n").await;

    // A redirect, here to a private address: never followed.
    let moved = served.url("/moved.json");
    served.set(
        "/moved.json",
        302,
        &[("location", "http://10.0.0.1/client.json")],
        "",
    );
    let text = refused(&broker, &moved).await;
    assert!(
        text.starts_with("invalid_client") && text.contains("redirect"),
        "{text}"
    );
    // Too large: the draft's 5 KiB.
    let big = served.url("/big.json");
    let mut doc = document(&big);
    doc["client_name"] = json!("x".repeat(6000));
    served.json("/big.json", &doc);
    let text = refused(&broker, &big).await;
    assert!(
        text.starts_with("invalid_client") && text.contains("larger than 5120"),
        "{text}"
    );
    // A document whose client_id is not its own URL speaks for another client.
    let other = served.url("/other.json");
    served.json("/other.json", &document(&served.url("/sdk/client.json")));
    let text = refused(&broker, &other).await;
    assert!(
        text.starts_with("invalid_client") && text.contains("not its own URL"),
        "{text}"
    );
    // Good, but asked with a redirect URI it does not list.
    let good = served.url("/good.json");
    served.json("/good.json", &document(&good));
    let r = authorize(
        &broker,
        &good,
        &[("redirect_uri", "http://127.0.0.1:1/elsewhere")],
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(authorize(&broker, &good, &[]).await.status, 303);
    // A URL the draft forbids is not fetched at all.
    let text = refused(&broker, &served.url("/a/../good.json")).await;
    assert!(text.contains(".."), "{text}");
    assert_eq!(served.hits("/a/../good.json"), 0);

    // By default a broker fetches no loopback or private address, whatever it is told.
    let strict = broker_for(&served, "").await;
    let text = refused(&strict, &good).await;
    assert!(
        text.starts_with("invalid_client") && text.contains("not a public address"),
        "{text}"
    );
    assert_eq!(served.hits("/good.json"), 1);
    // And with the documents off, a URL is no client at all.
    let off = broker_for(&served, "auth:\n  metadata_documents: false\n").await;
    let m = anonymous(&off)
        .get("/.well-known/oauth-authorization-server")
        .await;
    assert_eq!(m.body["client_id_metadata_document_supported"], false);
    let text = refused(&off, &good).await;
    assert!(text.contains("auth.metadata_documents"), "{text}");
}
