//! The IPC wire fixtures in `testdata/wire/ipc/`: one golden file per frame kind.
//!
//! Each fixture must equal what the typed frame serializes to and parse back into it, sidecar
//! frames must be accepted by the real broker, and broker frames must drive the sidecar's own
//! code (view and outcome). Regenerate with `UPDATE_WIRE=1 cargo test -p leo-mcp wire`.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::path::PathBuf;

use leo_mcp::frames::{Incoming, decode, parse_broker_frame};
use leo_mcp::messages::{self, Fetched};
use leo_mcp::view::View;
use leo_mcp::{channel, outcome};
use leo_protocol::content::AppError;
use leo_protocol::input::{InputAction, InputAnswer, InputOutcome};
use leo_protocol::ipc::{
    AgentTool, BrokerFrame, BrokerLine, Harness, Message, Mode, Outcome, ResultFrame, SidecarFrame,
};
use leo_protocol::logging::LogLevel;
use leo_protocol::offers::{
    OfferKind, OfferOutcome, PromptArgument, PromptDef, ResourceDef, ResourceTemplateDef,
};
use leo_protocol::sampling::SampleOutcome;
use leo_protocol::tool::{Execution, ToolAnnotations};
use leo_testkit::{Broker, Ipc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::support::{App, tool};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/wire/ipc")
}

fn read(name: &str) -> Value {
    let path = dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_WIRE=1 writes it)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks `value` against fixture `name` both ways, or rewrites the fixture on opt-in.
fn check<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, value: &T) {
    let want = serde_json::to_value(value).unwrap();
    if std::env::var_os("UPDATE_WIRE").is_some() {
        // Written from the typed frame so fields keep their declared order (`type` first).
        let mut text = serde_json::to_string_pretty(value).unwrap();
        text.push('\n');
        std::fs::create_dir_all(dir()).unwrap();
        std::fs::write(dir().join(format!("{name}.json")), text).unwrap();
        return;
    }
    let fixture = read(name);
    assert_eq!(fixture, want, "{name}.json differs from the typed frame");
    let parsed: T = serde_json::from_value(fixture).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(&parsed, value, "{name}.json parses to another frame");
}

fn echo_tool() -> AgentTool {
    AgentTool {
        name: "echo".into(),
        description: "Echo the text back".into(),
        input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        title: Some("Echo".into()),
        group: "demo".into(),
        annotations: None,
        output_schema: None,
        execution: Execution::Sync,
    }
}

/// A tool with every optional MCP field.
fn deploy_tool() -> AgentTool {
    AgentTool {
        name: "deploy".into(),
        description: "Deploy the current build".into(),
        input_schema: json!({"type": "object", "properties": {"env": {"type": "string"}}}),
        title: Some("Deploy".into()),
        group: "ops".into(),
        annotations: Some(ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(true),
            idempotent_hint: Some(true),
            open_world_hint: Some(false),
        }),
        output_schema: Some(
            json!({"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}),
        ),
        execution: Execution::Task,
    }
}

fn scout_message() -> Message {
    Message {
        text: "[message from scout#ses_1] build finished".into(),
        from: "scout#ses_1".into(),
        at: "2026-05-01T12:00:00.000Z".into(),
    }
}

fn sidecar_frames() -> Vec<(&'static str, SidecarFrame)> {
    vec![
        (
            "sidecar_hello",
            SidecarFrame::Hello {
                v: 1,
                agent: "claude".into(),
                session: "claude-4242-0123456789abcdef".into(),
                token: "AGENT_TOKEN".into(),
                harness: Some(Harness {
                    name: "claude-code".into(),
                    version: "2.1.5".into(),
                }),
                mode: Mode::Native,
                resume: vec![],
                transport: Default::default(),
            },
        ),
        (
            "sidecar_hello_resume",
            SidecarFrame::Hello {
                v: 1,
                agent: "claude".into(),
                session: "claude-4242-0123456789abcdef".into(),
                token: "AGENT_TOKEN".into(),
                harness: Some(Harness {
                    name: "claude-code".into(),
                    version: "2.1.5".into(),
                }),
                mode: Mode::Native,
                resume: vec![3, 4],
                transport: Default::default(),
            },
        ),
        (
            "sidecar_hello_http",
            SidecarFrame::Hello {
                v: 1,
                agent: "claude".into(),
                session: "claude-http-0123456789abcdef".into(),
                token: "AGENT_TOKEN".into(),
                harness: None,
                mode: Mode::Native,
                resume: vec![],
                transport: leo_protocol::ipc::Transport::Http,
            },
        ),
        (
            "sidecar_harness",
            SidecarFrame::Harness {
                harness: Harness {
                    name: "codex-mcp-client".into(),
                    version: "0.150.0".into(),
                },
                mode: Mode::Fallback,
            },
        ),
        (
            "sidecar_call",
            SidecarFrame::Call {
                id: 7,
                tool: "echo".into(),
                arguments: json!({"text": "hello"}),
                traceparent: None,
            },
        ),
        (
            "sidecar_call_traced",
            SidecarFrame::Call {
                id: 8,
                tool: "echo".into(),
                arguments: json!({"text": "hello"}),
                traceparent: Some(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                ),
            },
        ),
        ("sidecar_cancel", SidecarFrame::Cancel { id: 7 }),
        (
            "sidecar_fetch_messages",
            SidecarFrame::FetchMessages { id: 9 },
        ),
        (
            "sidecar_input_answer",
            SidecarFrame::InputAnswer {
                input: 3,
                outcome: InputOutcome::Answer(InputAnswer {
                    action: InputAction::Accept,
                    content: Some(json!({"confirm": true})),
                }),
            },
        ),
        (
            "sidecar_input_unsupported",
            SidecarFrame::InputAnswer {
                input: 4,
                outcome: InputOutcome::Refused {
                    error: AppError {
                        code: "input_unsupported".into(),
                        message: "the agent's harness (codex-mcp-client) does not support MCP elicitation".into(),
                    },
                },
            },
        ),
        ("sidecar_list_offers", SidecarFrame::ListOffers { id: 1 }),
        (
            "sidecar_sample_answer",
            SidecarFrame::SampleAnswer {
                sample: 2,
                outcome: SampleOutcome::Answer {
                    result: json!({"role": "assistant", "model": "claude-sonnet", "stopReason": "endTurn",
                                   "content": {"type": "text", "text": "Build 42 speeds up uploads."}}),
                },
            },
        ),
        (
            "sidecar_offer",
            SidecarFrame::Offer {
                id: 2,
                kind: OfferKind::Prompt,
                params: json!({"name": "greet", "arguments": {"name": "Ada"}}),
            },
        ),
    ]
}

fn result_frames() -> Vec<(&'static str, ResultFrame)> {
    vec![
        (
            "broker_result_content",
            ResultFrame {
                id: 7,
                outcome: Outcome::Content {
                    content: vec![
                        json!({"type": "text", "text": "hello"}),
                        json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
                    ],
                    structured_content: None,
                },
            },
        ),
        (
            "broker_result_error",
            ResultFrame {
                id: 8,
                outcome: Outcome::Error {
                    error: AppError {
                        code: "timeout".into(),
                        message: "no result within 1 s".into(),
                    },
                },
            },
        ),
        (
            "broker_result_structured",
            ResultFrame {
                id: 10,
                outcome: Outcome::Content {
                    content: vec![],
                    structured_content: Some(json!({"url": "https://example.invalid/build/7"})),
                },
            },
        ),
    ]
}

fn broker_frames() -> Vec<(&'static str, BrokerFrame)> {
    vec![
        (
            "broker_welcome",
            BrokerFrame::Welcome {
                v: 1,
                session: "3".into(),
                revision: 4,
                tools: vec![echo_tool()],
                ever_registered: true,
                denied: vec!["leo_app_call".into()],
                otlp_endpoint: None,
                mode: None,
            },
        ),
        (
            "broker_welcome_telemetry",
            BrokerFrame::Welcome {
                v: 1,
                session: "3".into(),
                revision: 4,
                tools: vec![],
                ever_registered: false,
                denied: vec![],
                otlp_endpoint: Some("http://127.0.0.1:4318".into()),
                mode: None,
            },
        ),
        (
            "broker_tools",
            BrokerFrame::Tools {
                revision: 5,
                tools: vec![],
                ever_registered: true,
            },
        ),
        (
            "broker_error",
            BrokerFrame::Error {
                code: "unauthorized".into(),
                message: "at $.token: not the agent token".into(),
                id: None,
            },
        ),
        (
            "broker_messages",
            BrokerFrame::Messages {
                id: 9,
                messages: vec![scout_message()],
                dropped: 1,
            },
        ),
        (
            "broker_message_arrived",
            BrokerFrame::MessageArrived {
                message: scout_message(),
            },
        ),
        (
            "broker_tools_mcp_fields",
            BrokerFrame::Tools {
                revision: 6,
                tools: vec![deploy_tool()],
                ever_registered: true,
            },
        ),
        (
            "broker_progress",
            BrokerFrame::Progress {
                id: 7,
                progress: 3.0,
                total: Some(10.0),
                message: Some("uploading 3 of 10".into()),
            },
        ),
        (
            "broker_input",
            BrokerFrame::Input {
                id: 7,
                input: 3,
                message: "Deploy to production?".into(),
                requested_schema: json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
            },
        ),
        (
            "broker_log",
            BrokerFrame::Log {
                id: 7,
                level: LogLevel::Warning,
                logger: Some("uploader".into()),
                data: json!("the mirror is slow; retrying"),
            },
        ),
        (
            "broker_sample",
            BrokerFrame::Sample {
                id: 7,
                sample: 2,
                params: json!({"maxTokens": 100, "systemPrompt": "You write release notes.", "messages": [
                    {"role": "user", "content": {"type": "text", "text": "Write a one-line release note for build 42."}}
                ]}),
            },
        ),
        ("broker_offers", offers_frame()),
        (
            "broker_offer_result",
            BrokerFrame::OfferResult {
                id: 2,
                outcome: OfferOutcome::Result {
                    result: json!({"description": "A greeting", "messages": [
                        {"role": "user", "content": {"type": "text", "text": "Say hello to Ada"}},
                        {"role": "user", "content": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}}
                    ]}),
                },
            },
        ),
        ("broker_offers_changed", BrokerFrame::OffersChanged),
        (
            "broker_resource_updated",
            BrokerFrame::ResourceUpdated {
                uri: "test://notes".into(),
            },
        ),
    ]
}

/// The `offers` frame of `testdata/wire/http/register_offers.request.json`'s registration.
fn offers_frame() -> BrokerFrame {
    BrokerFrame::Offers {
        id: 1,
        prompts: vec![PromptDef {
            name: "greet".into(),
            title: Some("Greet".into()),
            description: Some("Greets someone".into()),
            arguments: vec![PromptArgument {
                name: "name".into(),
                title: None,
                description: Some("Who to greet".into()),
                required: Some(true),
            }],
        }],
        resources: vec![ResourceDef {
            uri: "test://notes".into(),
            name: "notes".into(),
            title: None,
            description: None,
            mime_type: Some("text/plain".into()),
        }],
        resource_templates: vec![ResourceTemplateDef {
            uri_template: "test://items/{id}".into(),
            name: "item".into(),
            title: None,
            description: Some("One item".into()),
            mime_type: None,
        }],
    }
}

#[test]
fn fixtures_match_the_typed_frames() {
    for (name, frame) in sidecar_frames() {
        check(name, &frame);
    }
    for (name, frame) in broker_frames() {
        check(name, &frame);
    }
    for (name, frame) in result_frames() {
        check(name, &frame);
    }
}

#[test]
fn every_fixture_file_is_checked() {
    if std::env::var_os("UPDATE_WIRE").is_some() {
        return;
    }
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_owned)
        })
        .collect();
    let known: BTreeSet<String> = sidecar_frames()
        .iter()
        .map(|(n, _)| n.to_string())
        .chain(broker_frames().iter().map(|(n, _)| n.to_string()))
        .chain(result_frames().iter().map(|(n, _)| n.to_string()))
        .collect();
    assert_eq!(on_disk, known);
}

#[test]
fn broker_fixtures_drive_the_sidecar() {
    let bytes = |name: &str| read(name).to_string().into_bytes();
    let welcome = parse_broker_frame(&bytes("broker_welcome")).unwrap();
    let view = View::default().apply(&welcome);
    assert!(view.connected);
    assert_eq!(view.revision, 4);
    assert_eq!(view.tools, vec![echo_tool()]);
    assert_eq!(view.ever_registered, Some(true));
    assert_eq!(
        view.denied
            .as_ref()
            .map(|d| d.iter().cloned().collect::<Vec<_>>()),
        Some(vec!["leo_app_call".to_owned()])
    );

    let tools = parse_broker_frame(&bytes("broker_tools")).unwrap();
    let after = view.apply(&tools);
    assert_eq!(after.revision, 5);
    assert!(after.tools.is_empty());
    assert_eq!(after.denied, view.denied, "tools frames keep deny_tools");

    let result_of = |name: &str| match BrokerLine::<Vec<Value>>::parse(&bytes(name)).unwrap() {
        BrokerLine::Result(frame) => frame.outcome,
        other => panic!("{name}: not a result: {other:?}"),
    };
    let result = outcome::to_result(outcome::ending(result_of("broker_result_content")));
    assert_ne!(result.is_error, Some(true));
    assert_eq!(
        serde_json::to_value(&result.content).unwrap(),
        read("broker_result_content")["outcome"]["content"]
    );

    let result = outcome::to_result(outcome::ending(result_of("broker_result_error")));
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        serde_json::to_value(&result.content).unwrap(),
        json!([{"type": "text", "text": "timeout: no result within 1 s"}])
    );

    // The sidecar's reader gives the same results, from a fixture (members sorted) and from
    // the line as the broker writes it (`type` first).
    for name in ["broker_result_content", "broker_result_error"] {
        let general = serde_json::to_value(outcome::to_result(outcome::ending(result_of(name))));
        let written = serde_json::to_vec(&ResultFrame {
            id: 1,
            outcome: result_of(name),
        })
        .unwrap();
        for line in [bytes(name), written] {
            let Incoming::Result { ending, .. } = decode(&line) else {
                panic!("{name}: not read as a result");
            };
            assert_eq!(
                serde_json::to_value(outcome::to_result(ending)).unwrap(),
                *general.as_ref().unwrap(),
                "{name}"
            );
        }
    }
    // A block rmcp cannot read still reaches the harness, as text, through the values reader.
    let odd = br#"{"type":"result","id":3,"outcome":{"content":[{"type":"image","data":"AAAA","mimeType":"image/png","annotations":{"priority":"high"}}]}}"#;
    let Incoming::Result { id: 3, ending } = decode(odd) else {
        panic!("an unreadable block must still make a result");
    };
    let result = outcome::to_result(ending);
    assert!(
        serde_json::to_string(&result.content)
            .unwrap()
            .contains("AAAA")
    );

    assert!(matches!(
        parse_broker_frame(&bytes("broker_error")).unwrap(),
        BrokerFrame::Error { .. }
    ));

    // Structured content: `structuredContent`, and a text block of the same JSON since the
    // app sent no blocks.
    let Incoming::Result { ending, .. } = decode(&bytes("broker_result_structured")) else {
        panic!("structured result not read as a result");
    };
    let result = serde_json::to_value(outcome::to_result(ending)).unwrap();
    let data = json!({"url": "https://example.invalid/build/7"});
    assert_eq!(result["structuredContent"], data);
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": data.to_string()}])
    );

    // The MCP fields of a tool reach the harness's listing.
    let tools = parse_broker_frame(&bytes("broker_tools_mcp_fields")).unwrap();
    let view = View::default().apply(&tools);
    let listed = serde_json::to_value(leo_mcp::native::to_mcp_tool(&view.tools[0])).unwrap();
    assert_eq!(listed["title"], "Deploy");
    assert_eq!(
        listed["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(
        listed["outputSchema"],
        read("broker_tools_mcp_fields")["tools"][0]["output_schema"]
    );
    for name in [
        "broker_progress",
        "broker_input",
        "broker_log",
        "broker_sample",
    ] {
        assert!(
            matches!(decode(&bytes(name)), Incoming::Frame(_)),
            "{name} must be readable"
        );
    }

    // `messages` is what leo_messages renders: each stamped text with its time, and the drops.
    let BrokerFrame::Messages {
        id,
        messages: batch,
        dropped,
    } = parse_broker_frame(&bytes("broker_messages")).unwrap()
    else {
        panic!("not messages");
    };
    assert_eq!(id, 9);
    let text = messages::render(&Fetched {
        messages: batch,
        dropped,
    });
    assert!(
        text.contains("\n- 2026-05-01T12:00:00.000Z [message from scout#ses_1] build finished\n"),
        "{text}"
    );
    assert!(
        text.contains("1 older message to this agent was dropped"),
        "{text}"
    );

    // `message_arrived` becomes the Claude Code channel notification.
    let BrokerFrame::MessageArrived { message } =
        parse_broker_frame(&bytes("broker_message_arrived")).unwrap()
    else {
        panic!("not message_arrived");
    };
    let pushed = channel::notification(&message);
    assert_eq!(pushed.method, "notifications/claude/channel");
    assert_eq!(
        pushed.params.unwrap(),
        json!({
            "content": "[message from scout#ses_1] build finished",
            "meta": {"from": "scout#ses_1", "at": "2026-05-01T12:00:00.000Z"}
        })
    );
    // Unknown fields are refused, as on the broker side.
    let mut extra = read("broker_tools");
    extra["surprise"] = json!(1);
    assert!(parse_broker_frame(extra.to_string().as_bytes()).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_fixtures_are_accepted_by_the_real_broker() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo")])).await;

    let mut ipc = broker.ipc().await;
    let mut hello = read("sidecar_hello");
    hello["token"] = json!(broker.agent_token());
    ipc.send(&hello).await;
    let welcome = ipc.recv().await;
    let typed: BrokerFrame = serde_json::from_value(welcome.clone()).unwrap();
    assert!(matches!(typed, BrokerFrame::Welcome { .. }), "{welcome}");
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(keys(&welcome), keys(&read("broker_welcome")));

    ipc.send(&read("sidecar_harness")).await;
    ipc.send(&read("sidecar_call")).await;
    let req = app.next_request().await;
    assert_eq!(req.data["arguments"], json!({"text": "hello"}));
    ipc.send(&read("sidecar_cancel")).await;
    let result = ipc.recv_of("result").await;
    assert_eq!(result["id"], 7);
    assert_eq!(result["outcome"]["error"]["code"], "cancelled");
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");

    // fetch_messages is answered by messages of the fixture's shape, empty at first…
    ipc.send(&read("sidecar_fetch_messages")).await;
    let none = ipc.recv_of("messages").await;
    assert_eq!(keys(&none), keys(&read("broker_messages")));
    assert_eq!(none["id"], 9);
    assert_eq!(none["messages"], json!([]));
    // …then a message is pushed as message_arrived and returned by the next fetch.
    broker
        .http()
        .post(
            "/web/agent/claude/message",
            &json!({"text": "build finished", "from": "ops"}),
        )
        .await
        .data();
    let arrived = ipc.recv_of("message_arrived").await;
    assert_eq!(keys(&arrived), keys(&read("broker_message_arrived")));
    assert_eq!(
        keys(&arrived["message"]),
        keys(&read("broker_message_arrived")["message"])
    );
    assert_eq!(
        arrived["message"]["text"],
        "[message from ops] build finished"
    );
    ipc.send(&read("sidecar_fetch_messages")).await;
    let one = ipc.recv_of("messages").await;
    assert_eq!(one["messages"][0], arrived["message"]);

    // A wrong token gets the error frame of the fixture's shape.
    let mut bad = Ipc::connect(&broker.home().join("run/sidecar.sock")).await;
    bad.send(&read("sidecar_hello")).await;
    let refused = bad.recv().await;
    assert_eq!(keys(&refused), keys(&read("broker_error")));
    assert_eq!(refused["code"], "unauthorized");
}
