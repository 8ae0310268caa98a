//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/conformance/package-lock.json`): every server scenario against the broker's `/mcp`,
//! with this app serving the reference tools, prompts and resources the scenarios call.
//!
//! The suite's CLI sends no `Authorization` header and needs Node 22's `fs.globSync`;
//! `tests/conformance/run.mjs` adds the agent's token through a loopback proxy and
//! `globsync.mjs` gives Node 20 the `glob` package's `globSync`. The suite names its client
//! `conformance-test-client`, which no harness table knows, so an operator names its mode: the
//! suite runs once for an agent configured `mode: native` in `config.yaml`, and once for an
//! agent whose own token records it (`leo agent add conformance --mode native`).

use std::path::PathBuf;
use std::time::Duration;

use leo_app::{Call, LogLevel, Prompt, Read, Reply, Resource, ResourceTemplate, Tool, content};
use leo_testkit::Broker;
use leo_testkit::require::{self, Prereq};
use serde_json::{Value, json};

use crate::support::{Running, builder};

const DIR: &str = "app-sdk/tests/conformance";
/// The PNG of one red pixel, base64.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A WAV header with no samples, base64.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

/// Every server scenario, in the order the CLI runs them. All pass in native mode.
const SCENARIOS: &[&str] = &[
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
];

fn text_tool(name: &str, blocks: Value) -> Tool {
    Tool::new(name, format!("Conformance tool {name}"), move |_: Call| {
        let blocks = blocks.clone();
        async move { Reply::content(blocks.as_array().cloned().unwrap_or_default()) }
    })
}

/// The tools that return fixed content.
fn content_tools() -> Vec<Tool> {
    vec![
        text_tool(
            "test_simple_text",
            json!([content::text("This is a simple text response for testing.")]),
        ),
        text_tool(
            "test_image_content",
            json!([{"type": "image", "data": PNG, "mimeType": "image/png"}]),
        ),
        text_tool(
            "test_audio_content",
            json!([{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]),
        ),
        text_tool(
            "test_embedded_resource",
            json!([{"type": "resource", "resource": {"uri": "test://embedded-resource",
                "mimeType": "text/plain", "text": "This is an embedded resource content."}}]),
        ),
        text_tool(
            "test_multiple_content_types",
            json!([
                content::text("Multiple content types test:"),
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
            ]),
        ),
        Tool::new("test_error_handling", "Always fails", |_: Call| async {
            Reply::error(
                "failed",
                "This tool intentionally returns an error for testing",
            )
        }),
        text_tool("test_reconnection", json!([content::text("reconnected")])),
        text_tool("json_schema_2020_12_tool", json!([content::text("ok")])).schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {
                "street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": false
        })),
    ]
}

/// The tools that log, report progress, sample or ask during the call.
fn live_tools() -> Vec<Tool> {
    let pause = || tokio::time::sleep(Duration::from_millis(50));
    vec![
        Tool::new(
            "test_tool_with_logging",
            "Logs three times",
            move |call: Call| async move {
                for line in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ] {
                    call.log(LogLevel::Info, None, json!(line))
                        .await
                        .map_err(to_app)?;
                    pause().await;
                }
                Ok::<_, leo_app::AppError>(Reply::text("Logging completed"))
            },
        ),
        Tool::new(
            "test_tool_with_progress",
            "Reports progress",
            move |call: Call| async move {
                for done in [0.0, 50.0, 100.0] {
                    call.progress(done, Some(100.0), None)
                        .await
                        .map_err(to_app)?;
                    pause().await;
                }
                Ok::<_, leo_app::AppError>(Reply::text("Progress completed"))
            },
        ),
        Tool::new("test_sampling", "Asks the model", |call: Call| async move {
            let prompt = call.arguments()["prompt"].as_str().unwrap_or("").to_owned();
            let answer = call
                .sample(json!({"messages": [{"role": "user",
                    "content": {"type": "text", "text": prompt}}], "maxTokens": 100}))
                .await
                .map_err(to_app)?;
            let said = answer["content"]["text"].as_str().unwrap_or("").to_owned();
            Ok::<_, leo_app::AppError>(Reply::text(format!("LLM response: {said}")))
        })
        .schema(
            json!({"type": "object", "properties": {"prompt": {"type": "string"}},
            "required": ["prompt"]}),
        ),
        asking("test_elicitation", |args| {
            let message = args["message"].as_str().unwrap_or("").to_owned();
            (
                message,
                json!({"type": "object", "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"}},
                "required": ["username", "email"]}),
            )
        })
        .schema(
            json!({"type": "object", "properties": {"message": {"type": "string"}},
            "required": ["message"]}),
        ),
        asking("test_elicitation_sep1034_defaults", |_| {
            (
                "Defaults".to_owned(),
                json!({"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true}}}),
            )
        }),
        asking("test_elicitation_sep1330_enums", |_| {
            (
                "Enums".to_owned(),
                json!({"type": "object", "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items":
                    {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"}]}}}}),
            )
        }),
    ]
}

/// A tool that asks the form `form(arguments)` gives and answers with what the user said.
fn asking(name: &str, form: fn(&Value) -> (String, Value)) -> Tool {
    Tool::new(name, "Asks the user", move |call: Call| async move {
        let (message, schema) = form(&call.arguments());
        let answer = call.ask(message, schema).await.map_err(to_app)?;
        let said = serde_json::to_string(&answer).unwrap_or_default();
        Ok::<_, leo_app::AppError>(Reply::text(format!("User response: {said}")))
    })
}

fn to_app(e: leo_app::Error) -> leo_app::AppError {
    leo_app::AppError {
        code: "failed".into(),
        message: e.to_string(),
    }
}

fn prompt(name: &str, messages: fn(&Read) -> Value) -> Prompt {
    Prompt::new(name, move |read: Read| async move {
        Ok(json!({"messages": messages(&read)}))
    })
    .description(format!("Conformance prompt {name}"))
}

fn user(content: Value) -> Value {
    json!({"role": "user", "content": content})
}

fn prompts() -> Vec<Prompt> {
    vec![
        prompt("test_simple_prompt", |_| {
            json!([user(content::text("This is a simple prompt for testing."))])
        }),
        prompt("test_prompt_with_arguments", |read| {
            let (a, b) = (
                read.argument("arg1").unwrap_or(""),
                read.argument("arg2").unwrap_or(""),
            );
            json!([user(content::text(format!(
                "Prompt with arguments: arg1='{a}', arg2='{b}'"
            )))])
        })
        .argument("arg1", "First test argument", true)
        .argument("arg2", "Second test argument", true)
        .complete(|_: Read| async {
            Ok(json!({"completion": {"values": ["paris", "park", "party"], "hasMore": false}}))
        }),
        prompt("test_prompt_with_embedded_resource", |read| {
            let uri = read.argument("resourceUri").unwrap_or("");
            json!([
                user(
                    json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."}})
                ),
                user(content::text("Please process the embedded resource above."))
            ])
        })
        .argument("resourceUri", "URI of the resource to embed", true),
        prompt("test_prompt_with_image", |_| {
            json!([
                user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
                user(content::text("Please analyze the image above."))
            ])
        }),
    ]
}

fn resource(uri: &str, name: &str, contents: Value) -> Resource {
    Resource::new(uri, name, move |_: Read| {
        let contents = contents.clone();
        async move { Ok(json!({"contents": [contents]})) }
    })
    .description(format!("Conformance resource {name}"))
}

fn resources() -> Vec<Resource> {
    vec![
        resource(
            "test://static-text",
            "static-text",
            json!({"uri": "test://static-text",
            "mimeType": "text/plain", "text": "This is the content of the static text resource."}),
        )
        .mime_type("text/plain"),
        resource(
            "test://static-binary",
            "static-binary",
            json!({"uri": "test://static-binary",
            "mimeType": "image/png", "blob": PNG}),
        )
        .mime_type("image/png"),
        resource(
            "test://watched-resource",
            "watched-resource",
            json!({
            "uri": "test://watched-resource", "mimeType": "text/plain", "text": "Watched"}),
        ),
    ]
}

fn template() -> ResourceTemplate {
    ResourceTemplate::new("test://template/{id}/data", "template-data", |read: Read| async move {
        let uri = read.uri().unwrap_or_default().to_owned();
        let id = uri.trim_start_matches("test://template/").trim_end_matches("/data").to_owned();
        Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json",
            "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()}]}))
    })
    .description("Conformance resource template")
    .mime_type("application/json")
}

/// The app: every reference tool, prompt and resource, in group `conformance`.
fn reference_app(broker: &Broker) -> leo_app::App {
    let tools: Vec<Tool> = content_tools().into_iter().chain(live_tools()).collect();
    let mut app = builder(broker).group("conformance", tools);
    for p in prompts() {
        app = app.prompt("conformance", p);
    }
    for r in resources() {
        app = app.resource("conformance", r);
    }
    app.resource_template("conformance", template())
        .build()
        .unwrap()
}

/// The scenario names the CLI printed as passed and as failed.
fn outcomes(out: &str) -> (Vec<String>, Vec<String>) {
    let (mut passed, mut failed) = (Vec::new(), Vec::new());
    for line in out.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("✓ ") {
            passed.push(name.split(':').next().unwrap_or(name).trim().to_owned());
        } else if let Some(name) = line.strip_prefix("✗ ") {
            failed.push(name.split(':').next().unwrap_or(name).trim().to_owned());
        }
    }
    (passed, failed)
}

/// The failed checks under the CLI's `--output-dir`, one line each: scenario, check, message.
fn failed_checks(results: &std::path::Path) -> String {
    let mut lines = Vec::new();
    for entry in walk(results) {
        let Ok(text) = std::fs::read_to_string(&entry) else {
            continue;
        };
        let checks: Value = serde_json::from_str(&text).unwrap_or_default();
        for check in checks.as_array().into_iter().flatten() {
            if check["status"] == "FAILURE" {
                lines.push(format!(
                    "{}: {}: {} {}",
                    entry
                        .parent()
                        .and_then(|p| p.file_name())
                        .unwrap_or_default()
                        .to_string_lossy(),
                    check["id"],
                    check["errorMessage"],
                    check["details"]
                ));
            }
        }
    }
    lines.join("\n")
}

/// Every `checks.json` under `dir`.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else if path.file_name().is_some_and(|n| n == "checks.json") {
            found.push(path);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_scenarios_in_native_mode() {
    let broker = Broker::start_with("agents:\n  conformance:\n    mode: native\n").await;
    let token = broker.add_agent("conformance");
    suite(&broker, token).await;
}

/// The mode recorded with the agent's own token, the way an operator sets up a client that
/// re-lists but that no harness table knows: no `config.yaml` at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_scenarios_with_the_mode_on_the_agents_token() {
    let broker = Broker::start().await;
    let token = broker.add_agent_with("conformance", &["--mode", "native"]);
    suite(&broker, token).await;
}

/// Runs every server scenario for agent `conformance` (its `token`) and asserts that all pass,
/// with no failed check.
async fn suite(broker: &Broker, token: String) {
    if !require::node_package(Prereq::Node, DIR, "@modelcontextprotocol/conformance") {
        return;
    }
    let app = Running::start(reference_app(broker)).await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let results = broker.home().join("conformance");
    let run = tokio::process::Command::new("node")
        .arg(dir.join("run.mjs"))
        .args(["--suite", "all", "--output-dir"])
        .arg(&results)
        .current_dir(&dir)
        .env("LEO_MCP_URL", format!("http://{}/mcp", broker.addr))
        .env("LEO_AGENT_TOKEN", token)
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the conformance suite took more than 120 s")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let checks = failed_checks(&results);
    let log = format!(
        "{stdout}\n{}\n{checks}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut passed, failed) = outcomes(&stdout);
    passed.sort();
    let mut want: Vec<&str> = SCENARIOS.to_vec();
    want.sort_unstable();
    assert_eq!(passed, want, "{log}");
    assert_eq!(passed.len(), 32, "{log}");
    assert!(failed.is_empty() && checks.is_empty(), "{log}");
    app.stop().await.unwrap();
}
