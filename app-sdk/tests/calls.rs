//! Calls end to end: agent → leo-mcp → broker → the SDK app's handler and back, over TCP and
//! over the unix socket, with every kind of reply.

use leo_app::{AppError, Call, Reply, Tool, content};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, content_json, error_text, text_of};
use serde::Deserialize;
use serde_json::json;

use crate::support::{Running, builder};

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

#[derive(Deserialize)]
struct Sum {
    a: i64,
    b: i64,
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new("whoami", "Says who called", |call: Call| async move {
            Reply::json(&json!({
                "agent": call.agent, "group": call.group, "tool": call.tool,
                "arguments": call.arguments, "id_ok": call.id.starts_with("r_"),
            }))
        })
        .schema(json!({"type": "object", "properties": {"x": {"type": "integer"}}}))
        .label("Who am I"),
        Tool::new("sum", "Adds a and b", |call: Call| async move {
            let Sum { a, b } = call.args()?;
            Ok::<_, AppError>(Reply::text((a + b).to_string()))
        }),
        Tool::new(
            "picture",
            "A picture and a caption",
            |_call: Call| async move {
                Reply::content([content::image(PNG, "image/png"), content::text("a picture")])
            },
        ),
        Tool::new("raw", "Pre-serialized content", |_call: Call| async move {
            Reply::raw_content(&br#"[{"type":"text","text":"serialized once"}]"#[..])
        }),
        Tool::new("refuse", "An app error", |_call: Call| async move {
            Reply::error("not_allowed", "the user said no")
        }),
        Tool::new(
            "malformed",
            "Content the broker refuses",
            |_call: Call| async move { Reply::raw_content(&br#"[{"type":"hologram"}]"#[..]) },
        ),
        Tool::new("crash", "A handler that panics", |_call: Call| async move {
            if std::process::id() > 0 {
                panic!("deliberate");
            }
            Reply::text("unreachable")
        }),
    ]
}

async fn every_reply_reaches_the_agent(broker: &Broker, app: leo_app::App) {
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let result = agent.call("whoami", json!({"x": 7})).await;
    let seen: serde_json::Value = serde_json::from_str(&text_of(&result)).unwrap();
    assert_eq!(
        seen,
        json!({"agent": "claude", "group": "kit", "tool": "whoami", "arguments": {"x": 7}, "id_ok": true})
    );
    assert_eq!(
        text_of(&agent.call("sum", json!({"a": 2, "b": 40})).await),
        "42"
    );
    let wrong = agent.call("sum", json!({"a": 2, "b": "forty"})).await;
    let text = error_text(&wrong);
    assert!(
        text.starts_with("invalid_arguments: at $.b: invalid type"),
        "{text}"
    );

    let picture = content_json(&agent.call("picture", json!({})).await);
    assert_eq!(
        picture,
        json!([{"type": "image", "data": content::base64(PNG), "mimeType": "image/png"},
               {"type": "text", "text": "a picture"}])
    );
    assert_eq!(
        text_of(&agent.call("raw", json!({})).await),
        "serialized once"
    );
    assert_eq!(
        error_text(&agent.call("refuse", json!({})).await),
        "not_allowed: the user said no"
    );
    let malformed = error_text(&agent.call("malformed", json!({})).await);
    assert!(
        malformed.starts_with("invalid_result: at $.content[0].type: unknown content type"),
        "{malformed}"
    );
    assert_eq!(
        error_text(&agent.call("crash", json!({})).await),
        "internal: the tool's handler panicked"
    );
    // The app serves on after all of that.
    assert_eq!(
        text_of(&agent.call("sum", json!({"a": 1, "b": 1})).await),
        "2"
    );
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_reaches_the_agent_over_the_unix_socket() {
    let broker = Broker::start().await;
    let app = builder(&broker).group("kit", tools()).build().unwrap();
    assert_eq!(
        app.endpoint().to_string(),
        format!("unix:{}", broker.home().join("run/leo.sock").display())
    );
    every_reply_reaches_the_agent(&broker, app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_reaches_the_agent_over_tcp() {
    let broker = Broker::start().await;
    // No home: the URL and the token say everything.
    let app = leo_app::App::builder()
        .url(format!("http://{}", broker.addr))
        .token(broker.operator_token())
        .group("kit", tools())
        .build()
        .unwrap();
    every_reply_reaches_the_agent(&broker, app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_reaches_the_agent_over_https() {
    let broker = Broker::start_tls().await;
    let url = format!("https://localhost:{}", broker.addr.port());
    let app = leo_app::App::builder()
        .url(&url)
        .ca_file(leo_testkit::tls::ca_file(broker.home()))
        .token(broker.operator_token())
        .group("kit", tools())
        .build()
        .unwrap();
    assert_eq!(app.endpoint().to_string(), url);
    every_reply_reaches_the_agent(&broker, app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paired_device_token_serves_too() {
    let broker = Broker::start().await;
    // A device paired before the broker starts is loaded at start.
    let home = broker.kill_keep_home().await;
    crate::support::pair_device(home.path(), "phone");
    let broker = Broker::start_in(home).await;
    let app = builder(&broker)
        .device("phone")
        .group("kit", tools())
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    assert_eq!(
        text_of(&agent.call("sum", json!({"a": 3, "b": 4})).await),
        "7"
    );
    let status = broker.http().get("/api/v1/status").await;
    let principals: Vec<&str> = status.data()["apps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["principal"].as_str())
        .collect();
    assert!(principals.contains(&"device:phone"), "{principals:?}");
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_that_answer_at_once_are_answered_once_by_one_of_two_instances() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let broker = Broker::start().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let instance = |name: &'static str| {
        let runs = runs.clone();
        let tool = Tool::new(
            "stamp",
            "Says which instance answered",
            move |_call: Call| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Reply::text(name) }
            },
        )
        .answers_at_once();
        builder(&broker).group("stamps", [tool]).build().unwrap()
    };
    let one = Running::start(instance("one")).await;
    let two = Running::start(instance("two")).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    for _ in 0..20 {
        let text = text_of(&agent.call("stamp", json!({})).await);
        assert!(text == "one" || text == "two", "{text}");
    }
    // Each call was answered once (the agent got one result), and none is left waiting.
    assert!(crate::support::pending(&broker).await.is_empty());
    assert!(runs.load(Ordering::SeqCst) >= 20);
    one.stop().await.unwrap();
    two.stop().await.unwrap();
}
