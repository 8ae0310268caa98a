//! Prompts, resources, templates and completions through `leo-mcp` on the official Python MCP
//! SDK client (`tests/interop/offers.py`), over stdio and over the broker's `/mcp`, in the
//! initialize era and in 2026-07-28. The test plays the app over HTTP/SSE.

use leo_testkit::{Broker, Script, require};
use serde_json::{Value, json};

use crate::support::{App, interop_command};

const PIXEL: &str = "iVBORw0KGgo=";

/// The app's answer to one read.
fn answer(kind: &str, params: &Value) -> Value {
    let uri = params["uri"].as_str().unwrap_or_default();
    match (kind, uri) {
        ("prompt", _) => json!({"description": "A greeting", "messages": [
            {"role": "user", "content": {"type": "text",
                "text": format!("Say hello to {}", params["arguments"]["name"].as_str().unwrap_or(""))}},
            {"role": "user", "content": {"type": "image", "data": PIXEL, "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "resource", "resource":
                {"uri": "test://notes", "mimeType": "text/plain", "text": "kept notes"}}}
        ]}),
        ("complete", _) => json!({"completion": {"values": ["Ada", "Alan"], "hasMore": false}}),
        (_, "test://pixel.png") => {
            json!({"contents": [{"uri": uri, "mimeType": "image/png", "blob": PIXEL}]})
        }
        _ => {
            json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": format!("text of {uri}")}]})
        }
    }
}

/// Registers the offers and answers every read until the test ends.
pub(crate) async fn serve_offers(broker: &Broker) -> String {
    let mut app = App::connect(&broker.http()).await;
    let body = json!({"client_id": app.id, "group": "docs", "tools": [],
        "prompts": [{"name": "greet", "description": "Greets someone",
            "arguments": [{"name": "name", "required": true}]}],
        "resources": [{"uri": "test://notes", "name": "notes", "mime_type": "text/plain"},
            {"uri": "test://pixel.png", "name": "pixel", "mime_type": "image/png"}],
        "resource_templates": [{"uri_template": "test://items/{id}", "name": "item"}]});
    app.http.post("/api/v1/client-tools", &body).await.data();
    let id = app.id.clone();
    tokio::spawn(async move {
        loop {
            let read = app.sse.next_of("client_offer.request").await;
            let d = &read.data;
            let result = answer(d["kind"].as_str().unwrap(), &d["params"]);
            let path = format!(
                "/api/v1/client-offers/requests/{}/answer",
                d["id"].as_str().unwrap()
            );
            app.http
                .post(&path, &json!({"client_id": app.id, "result": result}))
                .await
                .data();
        }
    });
    id
}

async fn run(transport: &str, era: &str) {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start().await;
    let client_id = serve_offers(&broker).await;
    let mut cmd = interop_command(python, "offers.py", broker.home());
    cmd.args([transport, era]);
    if transport == "http" {
        let token = broker.add_agent("py-offers");
        cmd.env("LEO_MCP_URL", format!("http://{}/mcp", broker.addr))
            .env("LEO_AGENT_TOKEN", token);
    }
    let mut script = Script::spawn(cmd, &broker.home().join("offers-py.stderr"));
    let connected = script.step("connected").await;
    let protocol = if era == "modern" {
        "2026-07-28"
    } else {
        "2025-11-25"
    };
    assert_eq!(connected["protocol"], protocol, "{connected}");

    let prompts = script.step("prompts").await;
    assert_eq!(
        prompts["result"]["prompts"][0]["name"], "greet",
        "{prompts}"
    );
    let prompt = script.step("prompt").await;
    let messages = &prompt["result"]["messages"];
    assert_eq!(
        messages[0]["content"]["text"], "Say hello to Ada",
        "{prompt}"
    );
    assert_eq!(messages[1]["content"]["data"], PIXEL, "{prompt}");
    assert_eq!(
        messages[2]["content"]["resource"]["text"], "kept notes",
        "{prompt}"
    );
    let resources = script.step("resources").await;
    assert_eq!(
        resources["result"]["resources"][1]["mimeType"], "image/png",
        "{resources}"
    );
    let templates = script.step("templates").await;
    let template = &templates["result"]["resourceTemplates"][0];
    assert_eq!(template["uriTemplate"], "test://items/{id}", "{templates}");
    let text = script.step("read_text").await;
    assert_eq!(
        text["result"]["contents"][0]["text"], "text of test://notes",
        "{text}"
    );
    let blob = script.step("read_blob").await;
    assert_eq!(blob["result"]["contents"][0]["blob"], PIXEL, "{blob}");
    let item = script.step("read_template").await;
    assert_eq!(
        item["result"]["contents"][0]["text"], "text of test://items/42",
        "{item}"
    );
    let complete = script.step("complete").await;
    assert_eq!(
        complete["result"]["completion"]["values"],
        json!(["Ada", "Alan"])
    );

    {
        let subscribed = script.step("subscribed").await;
        if era == "modern" {
            let honored = &subscribed["honored"];
            assert_eq!(honored["promptsListChanged"], true, "{subscribed}");
            assert_eq!(honored["resourceSubscriptions"], json!(["test://notes"]));
        }
        let body = json!({"client_id": client_id, "uri": "test://notes"});
        let r = broker
            .http()
            .post("/api/v1/client-offers/updated", &body)
            .await;
        assert_eq!(r.data()["sessions"], 1);
        let updated = script.step("updated").await;
        assert_eq!(updated["uris"], json!(["test://notes"]));
    }
    script.step("done").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_stdio() {
    run("stdio", "legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_stdio_2026() {
    run("stdio", "modern").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http() {
    run("http", "legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http_2026() {
    run("http", "modern").await;
}
