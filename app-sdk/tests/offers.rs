//! Prompts, resources, templates and completions an app offers (`Prompt`, `Resource`,
//! `ResourceTemplate`), listed and read by an agent through the real `leo-mcp`.

use leo_app::{AppError, Call, Prompt, Read, Reply, Resource, ResourceTemplate, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts};
use rmcp::model::{CompleteRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};

use crate::support::{Running, builder};

/// The PNG of one red pixel, base64.
const PIXEL: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

fn greeting() -> Prompt {
    Prompt::new("greet", |read: Read| async move {
        let name = read.argument("name").unwrap_or("nobody").to_owned();
        Ok(json!({
            "description": "A greeting",
            "messages": [
                {"role": "user", "content": {"type": "text", "text": format!("Say hello to {name}")}},
                {"role": "user", "content": {"type": "image", "data": PIXEL, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "resource", "resource":
                    {"uri": "test://notes", "mimeType": "text/plain", "text": "kept notes"}}}
            ]
        }))
    })
    .description("Greets someone")
    .argument("name", "Who to greet", true)
    .complete(|read: Read| async move {
        let typed = read.params["argument"]["value"].as_str().unwrap_or("").to_owned();
        let values: Vec<&str> = ["Ada", "Alan", "Grace"]
            .into_iter()
            .filter(|v| v.starts_with(&typed))
            .collect();
        Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    })
}

fn notes() -> Resource {
    Resource::new("test://notes", "notes", |read: Read| async move {
        let uri = read.uri().unwrap_or_default().to_owned();
        Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": "kept notes"}]}))
    })
    .mime_type("text/plain")
}

fn blob() -> Resource {
    Resource::new("test://pixel.png", "pixel", |read: Read| async move {
        let uri = read.uri().unwrap_or_default().to_owned();
        Ok(json!({"contents": [{"uri": uri, "mimeType": "image/png", "blob": PIXEL}]}))
    })
}

fn items() -> ResourceTemplate {
    ResourceTemplate::new("test://items/{id}", "item", |read: Read| async move {
        let uri = read.uri().unwrap_or_default().to_owned();
        if uri.ends_with("/missing") {
            return Err(AppError {
                code: "not_found".into(),
                message: "no such item".into(),
            });
        }
        Ok(json!({"contents": [{"uri": uri, "text": format!("item at {uri}")}]}))
    })
}

/// An app with group `docs`, one tool and the `greet` prompt.
fn docs_app(broker: &Broker) -> leo_app::Builder {
    let tool = Tool::new("noop", "Does nothing", |_: Call| async {
        Reply::text("ok")
    });
    builder(broker)
        .group("docs", [tool])
        .prompt("docs", greeting())
}

fn value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_resources_and_completions_reach_the_agent_as_the_app_wrote_them() {
    let broker = Broker::start().await;
    let app = docs_app(&broker)
        .resource("docs", notes())
        .resource("docs", blob())
        .resource_template("docs", items())
        .build()
        .unwrap();
    let notifier = app.notifier();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let peer = agent.client.peer();

    let prompts = peer.list_all_prompts().await.unwrap();
    assert_eq!(
        value(&prompts),
        json!([{"name": "greet", "description": "Greets someone",
            "arguments": [{"name": "name", "description": "Who to greet", "required": true}]}])
    );
    let params: GetPromptRequestParams =
        serde_json::from_value(json!({"name": "greet", "arguments": {"name": "Ada"}})).unwrap();
    let got = value(&peer.get_prompt(params).await.unwrap());
    assert_eq!(got["messages"][0]["content"]["text"], "Say hello to Ada");
    assert_eq!(got["messages"][1]["content"]["data"], PIXEL);
    assert_eq!(
        got["messages"][2]["content"]["resource"]["text"],
        "kept notes"
    );

    let resources = value(&peer.list_all_resources().await.unwrap());
    let uris: Vec<&str> = resources
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["test://notes", "test://pixel.png"]);
    assert_eq!(resources[0]["mimeType"], "text/plain");
    let templates = value(&peer.list_all_resource_templates().await.unwrap());
    assert_eq!(templates[0]["uriTemplate"], "test://items/{id}");

    let read = |uri: &str| peer.read_resource(ReadResourceRequestParams::new(uri));
    let text = value(&read("test://notes").await.unwrap());
    assert_eq!(text["contents"][0]["text"], "kept notes");
    let png = value(&read("test://pixel.png").await.unwrap());
    assert_eq!(png["contents"][0]["blob"], PIXEL);
    let item = value(&read("test://items/42").await.unwrap());
    assert_eq!(item["contents"][0]["text"], "item at test://items/42");
    let missing = read("test://items/missing").await.unwrap_err().to_string();
    assert!(missing.contains("not_found: no such item"), "{missing}");
    let code = |e: rmcp::ServiceError| match e {
        rmcp::ServiceError::McpError(e) => (e.code.0, e.message.into_owned()),
        other => panic!("{other}"),
    };
    let (unknown, message) = code(read("test://elsewhere").await.unwrap_err());
    assert_eq!(unknown, -32002, "resource not found: {message}");
    assert!(message.starts_with("not_found: "), "{message}");
    let params: GetPromptRequestParams = serde_json::from_value(json!({"name": "nope"})).unwrap();
    let (unknown, message) = code(peer.get_prompt(params).await.unwrap_err());
    assert_eq!(unknown, -32602, "{message}");

    let params: CompleteRequestParams = serde_json::from_value(json!({
        "ref": {"type": "ref/prompt", "name": "greet"},
        "argument": {"name": "name", "value": "A"}
    }))
    .unwrap();
    let completed = value(&peer.complete(params).await.unwrap());
    assert_eq!(completed["completion"]["values"], json!(["Ada", "Alan"]));
    let params: CompleteRequestParams = serde_json::from_value(json!({
        "ref": {"type": "ref/resource", "uri": "test://items/{id}"},
        "argument": {"name": "id", "value": "4"}
    }))
    .unwrap();
    let completed = value(&peer.complete(params).await.unwrap());
    assert_eq!(completed["completion"]["values"], json!([]));

    // Subscribed URIs hear of changes; others do not.
    let subscribe = serde_json::from_value(json!({"uri": "test://items/42"})).unwrap();
    #[allow(deprecated)]
    peer.subscribe(subscribe).await.unwrap();
    assert_eq!(notifier.resource_updated("test://notes").await.unwrap(), 1);
    assert_eq!(
        notifier.resource_updated("test://items/42").await.unwrap(),
        1
    );
    leo_testkit::agent::wait_until("the update", || {
        !agent.seen.resources_updated.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(
        *agent.seen.resources_updated.lock().unwrap(),
        ["test://items/42"]
    );
    let refused = notifier
        .resource_updated("test://elsewhere")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("not_found"), "{refused}");
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offers_follow_the_group_scope_and_leave_with_the_app() {
    let broker = Broker::start().await;
    let app = builder(&broker)
        .group_for("private", ["rocket"], [])
        .prompt("private", greeting())
        .resource("private", notes())
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let rocket = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    let scout = Agent::start(broker.home(), AgentOpts::native("scout")).await;
    assert_eq!(
        rocket.client.peer().list_all_prompts().await.unwrap().len(),
        1
    );
    assert!(
        scout
            .client
            .peer()
            .list_all_prompts()
            .await
            .unwrap()
            .is_empty()
    );
    let read = scout
        .client
        .peer()
        .read_resource(ReadResourceRequestParams::new("test://notes"))
        .await
        .unwrap_err()
        .to_string();
    assert!(read.contains("not_found"), "{read}");

    let before = rocket.seen.prompts_changed();
    app.stop().await.unwrap();
    let peer = rocket.client.peer();
    leo_testkit::agent::wait_until("the prompts withdrawn", || {
        rocket.seen.prompts_changed() > before
    })
    .await;
    assert!(peer.list_all_prompts().await.unwrap().is_empty());
}

#[test]
fn offers_for_an_undeclared_group_or_with_bad_names_are_refused_at_build() {
    let err = leo_app::App::builder()
        .group(
            "docs",
            [Tool::new("t", "d", |_: Call| async { Reply::text("") })],
        )
        .prompt("other", greeting())
        .build()
        .err()
        .expect("an undeclared group must be refused");
    assert!(err.to_string().contains("\"other\""), "{err}");
    let err = leo_app::App::builder()
        .group("docs", [])
        .resource_template(
            "docs",
            ResourceTemplate::new("test://{a}{b}", "x", |_| async { Ok(json!({})) }),
        )
        .build()
        .err()
        .expect("a bad template must be refused");
    assert!(
        err.to_string()
            .contains("$.resource_templates[0].uri_template"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_harness_lists_and_reads_them_through_the_fallback_tools() {
    let broker = Broker::start().await;
    let app = docs_app(&broker).resource("docs", blob()).build().unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::fallback("codex")).await;
    let listed: Value = serde_json::from_str(&leo_testkit::agent::text_of(
        &agent.call("leo_app_tools", json!({})).await,
    ))
    .unwrap();
    assert_eq!(listed["prompts"][0]["name"], "greet");
    assert_eq!(listed["resources"][0]["uri"], "test://pixel.png");
    assert!(listed["reads"].as_str().unwrap().contains("leo_resource"));

    let prompt = agent
        .call(
            "leo_app_call",
            json!({"tool": "leo_prompt", "args": {"name": "greet", "arguments": {"name": "Ada"}}}),
        )
        .await;
    let blocks = value(&prompt.content);
    assert_eq!(blocks[0]["text"], "Say hello to Ada");
    assert_eq!(blocks[1]["data"], PIXEL);
    assert_eq!(blocks[2]["resource"]["text"], "kept notes");
    let read = agent
        .call(
            "leo_app_call",
            json!({"tool": "leo_resource", "args": {"uri": "test://pixel.png"}}),
        )
        .await;
    assert_eq!(value(&read.content)[0]["resource"]["blob"], PIXEL);
    let missing = agent
        .call(
            "leo_app_call",
            json!({"tool": "leo_resource", "args": {"uri": "test://none"}}),
        )
        .await;
    assert_eq!(missing.is_error, Some(true));
    app.stop().await.unwrap();
}
