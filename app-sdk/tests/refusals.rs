//! What retrying cannot fix ends `run` with the broker's reason; bad settings never connect.

use leo_app::{App, Call, Error, ErrorCode, Reply, Tool};
use leo_testkit::Broker;
use serde_json::json;

use crate::support::{Other, Running, builder, tool_json};

fn tool(name: &str) -> Tool {
    Tool::new(
        name,
        "A tool",
        |_call: Call| async move { Reply::text("ok") },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_the_broker_refuses_ends_run_with_its_message() {
    let broker = Broker::start().await;
    let other = Other::connect(&broker.http()).await;
    other
        .register_ok("theirs", json!([tool_json("taken")]))
        .await;
    let app = builder(&broker)
        .group("mine", [tool("taken")])
        .build()
        .unwrap();
    match Running::spawn(app).finished().await {
        Err(Error::Registration {
            group,
            code: ErrorCode::NameConflict,
            message,
        }) => {
            assert_eq!(group, "mine");
            assert!(message.contains("taken"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_broker_does_not_know_ends_run() {
    let broker = Broker::start().await;
    let app = builder(&broker)
        .token("0".repeat(64))
        .group("g", [tool("t")])
        .build()
        .unwrap();
    match Running::spawn(app).finished().await {
        Err(
            e @ Error::Refused {
                code: ErrorCode::Unauthorized,
                ..
            },
        ) => assert!(e.is_fatal()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_settings_are_refused_before_connecting() {
    let cases: Vec<(leo_app::Builder, &str)> = vec![
        (App::builder(), "an app needs at least one group of tools"),
        (
            App::builder().group("g", [tool("leo_x")]),
            "group \"g\": at $.tools[0].name: tool name \"leo_x\" uses the reserved prefix \"leo_\"",
        ),
        (
            App::builder().group("g", [tool("a").schema(json!({"type": "string"}))]),
            "root schema must have \"type\": \"object\"",
        ),
        (
            App::builder()
                .group("g", [tool("a")])
                .group("h", [tool("A")]),
            "tool \"A\" is given twice (names are compared without case)",
        ),
        (
            App::builder().group("bad group", [tool("a")]),
            "group name \"bad group\"",
        ),
        (
            App::builder()
                .url("ftp://127.0.0.1:1")
                .group("g", [tool("a")]),
            "expected http:// or https://",
        ),
        (
            App::builder()
                .url("http://127.0.0.1:1")
                .ca_file("/nowhere/ca.pem")
                .group("g", [tool("a")]),
            "a CA file needs an https:// URL",
        ),
        (
            App::builder()
                .url("https://127.0.0.1:1")
                .ca_file("/nowhere/ca.pem")
                .group("g", [tool("a")]),
            "cannot read /nowhere/ca.pem",
        ),
        (
            App::builder()
                .token("t")
                .device("d")
                .group("g", [tool("a")]),
            "give one of a token, a token file or a device",
        ),
        (
            App::builder().name("two\nlines").group("g", [tool("a")]),
            "app name \"two\\nlines\" must be printable characters; U+000A is not",
        ),
        (
            App::builder().name("").group("g", [tool("a")]),
            "app name \"\" must be 1 to 64 characters, not 0",
        ),
    ];
    for (builder, want) in cases {
        match builder.build() {
            Err(e @ Error::Config(_)) => {
                assert!(e.to_string().contains(want), "got {e}, want {want}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted; want {want}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_is_shown_by_its_name_or_else_by_its_program_name() {
    let broker = Broker::start().await;
    let named = builder(&broker)
        .name("Photo booth")
        .group("camera", [tool("snap")])
        .build()
        .unwrap();
    let named = Running::start(named).await;
    let unnamed = builder(&broker)
        .group("desk", [tool("note")])
        .build()
        .unwrap();
    let unnamed = Running::start(unnamed).await;
    let status = broker.http().get("/api/v1/status").await;
    let names: Vec<(serde_json::Value, serde_json::Value)> = status.data()["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["groups"].clone(), a["name"].clone()))
        .collect();
    // This test binary's own file name, as the SDK's default.
    let program = std::env::current_exe().unwrap();
    let program = program.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        names,
        [
            (json!(["camera"]), json!("Photo booth")),
            (json!(["desk"]), json!(program)),
        ]
    );
    named.stop().await.unwrap();
    unnamed.stop().await.unwrap();
}
