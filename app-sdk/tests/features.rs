//! The MCP features a Rust app reaches harnesses with, end to end through the real broker and
//! `leo-mcp`: a tool's title, annotations and output schema; structured replies (the broker
//! checks them against the schema); progress with messages; questions for the user, answered
//! or refused at once to a harness that cannot ask; log messages filtered by the harness's
//! `logging/setLevel`; sampling by the harness's model, or refused at once to one that cannot.

use leo_app::{
    Call, Error, ErrorCode, InputAction, JsonSchema, LogLevel, Reply, Tool, ToolAnnotations,
};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, error_text, text_of, wait_until};
use serde::Serialize;
use serde_json::json;

use crate::support::{Running, builder};

#[derive(Serialize, JsonSchema)]
struct Record {
    build: u32,
    url: String,
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "record",
            "Returns the build record",
            |call: Call| async move {
                call.progress(1.0, Some(2.0), Some("fetching the record"))
                    .await
                    .expect("progress");
                Reply::structured(&Record {
                    build: 42,
                    url: "https://ci.example/42".into(),
                })
            },
        )
        .title("Build record")
        .annotations(ToolAnnotations {
            read_only_hint: Some(true),
            ..ToolAnnotations::default()
        })
        .output_schema_for::<Record>(),
        Tool::new(
            "bad_record",
            "Returns a record of the wrong shape",
            |_call: Call| async { Reply::structured(&json!({"build": "forty-two"})) },
        )
        .output_schema_for::<Record>(),
        Tool::new("confirm", "Asks before it goes", |call: Call| async move {
            let form = json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Go ahead?"}},
                "required": ["confirm"]
            });
            match call.ask("Deploy to prod?", form).await {
                Ok(answer) if answer.action == InputAction::Accept => {
                    Reply::text(format!("answer: {}", answer.content.unwrap_or_default()))
                }
                Ok(answer) => Reply::text(format!("{:?}", answer.action)),
                Err(Error::Refused {
                    code: ErrorCode::InputUnsupported,
                    ..
                }) => Reply::text("cannot ask: going on with the default"),
                Err(e) => Reply::error("ask_failed", e.to_string()),
            }
        }),
        Tool::new("summarize", "Logs and asks the model", summarize),
        Tool::new(
            "choose",
            "Asks with titled and multi-select choices",
            |call: Call| async move {
                match call.ask("Pick", choices_form()).await {
                    Ok(answer) => Reply::text(format!("{}", answer.content.unwrap_or_default())),
                    Err(e) => Reply::error("ask_failed", e.to_string()),
                }
            },
        ),
        Tool::new(
            "quick",
            "Answers at once and cannot report",
            |call: Call| async move {
                match call.progress(1.0, None, None).await {
                    Err(Error::Config(message)) => Reply::text(message),
                    other => Reply::error("unexpected", format!("{other:?}")),
                }
            },
        )
        .answers_at_once(),
    ]
}

/// A 2025-11-25 form: a titled single select and both kinds of multi select.
fn choices_form() -> serde_json::Value {
    json!({"type": "object", "properties": {
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["fast", "safe"]}, "minItems": 1},
        "envs": {"type": "array", "items": {"anyOf": [{"const": "prod", "title": "Production"}]}}
    }, "required": ["size"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_harness_is_asked_with_titled_and_multi_select_choices_as_they_are() {
    let broker = Broker::start().await;
    let app = Running::start(builder(&broker).group("ci", tools()).build().unwrap()).await;
    let content = json!({"size": "l", "tags": ["fast"], "envs": ["prod"]});
    let asks = Agent::start(
        broker.home(),
        AgentOpts::native("rocket").answering(content.clone()),
    )
    .await;
    assert_eq!(
        text_of(&asks.call("choose", json!({})).await),
        content.to_string()
    );
    assert_eq!(asks.seen.forms.lock().unwrap()[0], choices_form());
    app.stop().await.unwrap();
}

/// Logs at two levels, then asks the harness's model and replies with what it said.
async fn summarize(call: Call) -> Reply {
    for (level, text) in [
        (LogLevel::Info, "reading"),
        (LogLevel::Warning, "slow disk"),
    ] {
        call.log(level, Some("reader"), json!(text))
            .await
            .expect("log");
    }
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarize: a\u{7}b"}}],
        "maxTokens": 50,
        "systemPrompt": "Be brief."
    });
    match call.sample(params).await {
        Ok(result) => Reply::text(format!("model said: {}", result["content"]["text"])),
        Err(Error::Refused {
            code: ErrorCode::InputUnsupported,
            message,
            ..
        }) => Reply::text(format!("cannot sample: {message}")),
        Err(e) => Reply::error("sample_failed", e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_pass_the_harness_level_and_sampling_reaches_its_model() {
    let broker = Broker::start().await;
    let app = Running::start(builder(&broker).group("ci", tools()).build().unwrap()).await;

    let agent = Agent::start(
        broker.home(),
        AgentOpts::native("rocket").completing("short"),
    )
    .await;
    #[allow(deprecated)]
    agent
        .client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Warning,
        ))
        .await
        .expect("logging/setLevel");
    assert_eq!(
        text_of(&agent.call("summarize", json!({})).await),
        r#"model said: "short""#
    );
    // Only the warning passes the level the harness set.
    let logs = agent.seen.logs.lock().unwrap().clone();
    assert_eq!(
        logs,
        [json!({"level": "warning", "logger": "reader", "data": "slow disk"})]
    );
    let asked = agent.seen.samples.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["maxTokens"], 50);
    assert_eq!(asked[0]["systemPrompt"], "Be brief.");
    // The words a person approves reach the harness sanitized.
    assert_eq!(
        asked[0]["messages"][0]["content"]["text"],
        "Summarize: a\u{fffd}b"
    );

    // A harness without sampling: refused at once, naming it; with no level set, every log
    // message passes.
    let plain = Agent::start(broker.home(), AgentOpts::native("scout")).await;
    let said = text_of(&plain.call("summarize", json!({})).await);
    assert!(
        said.starts_with("cannot sample: ") && said.contains("leo-test-harness"),
        "{said}"
    );
    assert_eq!(plain.seen.logs.lock().unwrap().len(), 2);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn titles_structured_replies_and_progress_reach_the_harness() {
    let broker = Broker::start().await;
    let app = Running::start(builder(&broker).group("ci", tools()).build().unwrap()).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;

    let listed = agent.tools().await;
    let record = listed.iter().find(|t| t.name == "record").expect("record");
    assert_eq!(record.title.as_deref(), Some("Build record"));
    assert_eq!(
        record.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
    let schema =
        serde_json::to_value(record.output_schema.as_ref().expect("outputSchema")).unwrap();
    assert_eq!(schema["required"], json!(["build", "url"]));

    let result = agent.call("record", json!({})).await;
    assert_eq!(
        result.structured_content,
        Some(json!({"build": 42, "url": "https://ci.example/42"}))
    );
    wait_until("the app's progress message", || {
        agent
            .seen
            .progress_messages
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "fetching the record")
    })
    .await;

    let refused = error_text(&agent.call("bad_record", json!({})).await);
    assert!(
        refused.contains("invalid_result") && refused.contains("$.structured_content.build"),
        "{refused}"
    );
    let quick = text_of(&agent.call("quick", json!({})).await);
    assert!(quick.contains("cannot report progress"), "{quick}");
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_by_the_user_or_refused_at_once() {
    let broker = Broker::start().await;
    let app = Running::start(builder(&broker).group("ci", tools()).build().unwrap()).await;

    let asks = Agent::start(
        broker.home(),
        AgentOpts::native("rocket").answering(json!({"confirm": true})),
    )
    .await;
    assert_eq!(
        text_of(&asks.call("confirm", json!({})).await),
        r#"answer: {"confirm":true}"#
    );
    assert_eq!(*asks.seen.questions.lock().unwrap(), ["Deploy to prod?"]);

    let cannot = Agent::start(broker.home(), AgentOpts::native("scout")).await;
    assert_eq!(
        text_of(&cannot.call("confirm", json!({})).await),
        "cannot ask: going on with the default"
    );
    app.stop().await.unwrap();
}
