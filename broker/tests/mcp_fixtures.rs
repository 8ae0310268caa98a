//! The wire fixtures of the MCP-facing fields and routes (`register_mcp`, structured results,
//! `progress`, `input`, `log`, `sample`) against the real broker, with the sidecar played over raw IPC and its
//! frames compared with `testdata/wire/ipc/`. `UPDATE_WIRE=1` rewrites the response fixtures.

use leo_testkit::{Broker, Ipc, Reply, wire};
use serde_json::{Value, json};

use crate::support::{App, result_of};

async fn post(http: &leo_testkit::Http, path: &str, fixture: &str, client_id: &str) -> Reply {
    let body = wire::load(
        &format!("http/{fixture}.request.json"),
        &[("<client_id>", client_id)],
    );
    http.post(path, &body).await
}

/// An IPC fixture with `id` and `input` set to what this session uses.
fn ipc_fixture(name: &str, id: u64, input: Option<u64>) -> Value {
    let mut v = wire::load(&format!("ipc/{name}.json"), &[]);
    if v.get("id").is_some() {
        v["id"] = json!(id);
    }
    if let Some(n) = input {
        v["input"] = json!(n);
    }
    v
}

/// Starts call `n` of `deploy` and claims it; returns its request path prefix.
async fn claimed_call(ipc: &mut Ipc, app: &mut App, n: u64) -> String {
    ipc.call(n, "deploy", json!({"build": 42, "env": "prod"}))
        .await;
    let id = app.next_request_id().await;
    let at = format!("/api/v1/client-tools/requests/{id}");
    post(&app.http, &format!("{at}/claim"), "claim", &app.id)
        .await
        .data();
    at
}

#[tokio::test]
async fn mcp_fixtures_match_the_broker() {
    let broker = Broker::start().await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    wire::check(
        "http/register_mcp.response.json",
        &post(&http, "/api/v1/client-tools", "register_mcp", &app.id)
            .await
            .body,
    );
    wire::check(
        "http/list_tools_mcp.response.json",
        &http.get("/api/v1/client-tools").await.body,
    );
    let (mut ipc, welcome) = Ipc::hello(
        &broker.home().join("run/sidecar.sock"),
        &broker.agent_token(),
        "rocket",
    )
    .await;
    // What the sidecar is told matches the IPC fixture's shape for a tool with MCP fields.
    let tool = &welcome["tools"][0];
    let fixture = wire::load("ipc/broker_tools_mcp_fields.json", &[]);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(tool), keys(&fixture["tools"][0]), "{tool}");
    assert_eq!(tool["execution"], "task");

    // Structured results: checked against output_schema, then passed on as they came.
    let at = claimed_call(&mut ipc, &mut app, 1).await;
    let result = format!("{at}/result");
    wire::check(
        "http/error_invalid_result_structured.response.json",
        &post(&http, &result, "result_structured_invalid", &app.id)
            .await
            .body,
    );
    wire::check(
        "http/result.response.json",
        &post(&http, &result, "result_structured", &app.id)
            .await
            .body,
    );
    let outcome = result_of(&mut ipc, 1).await;
    assert_eq!(
        outcome,
        json!({"content": [], "structured_content": wire::load("http/result_structured.request.json", &[])["structured_content"]})
    );

    // Progress: acknowledged, and one progress frame to the calling session.
    let at = claimed_call(&mut ipc, &mut app, 2).await;
    wire::check(
        "http/progress.response.json",
        &post(&http, &format!("{at}/progress"), "progress", &app.id)
            .await
            .body,
    );
    let frame = ipc.recv_of("progress").await;
    let mut want = ipc_fixture("broker_progress", 2, None);
    let sent = wire::load("http/progress.request.json", &[]);
    for k in ["progress", "total"] {
        want[k] = json!(sent[k].as_f64().unwrap());
    }
    want["message"] = sent["message"].clone();
    assert_eq!(frame, want);

    // A question: the sidecar gets an input frame, and its answer is the HTTP response.
    let input_path = format!("{at}/input");
    let asking = {
        let http = http.clone();
        let id = app.id.clone();
        let path = input_path.clone();
        tokio::spawn(async move { post(&http, &path, "input", &id).await })
    };
    let frame = ipc.recv_of("input").await;
    let n = frame["input"].as_u64().expect("an input number");
    let sent = wire::load("http/input.request.json", &[]);
    let mut want = ipc_fixture("broker_input", 2, Some(n));
    want["message"] = sent["message"].clone();
    want["requested_schema"] = sent["requested_schema"].clone();
    assert_eq!(frame, want);
    ipc.send(&ipc_fixture("sidecar_input_answer", 0, Some(n)))
        .await;
    wire::check("http/input.response.json", &asking.await.unwrap().body);

    // A harness that cannot ask: the sidecar refuses, and so does the route, at once.
    let asking = {
        let http = http.clone();
        let id = app.id.clone();
        tokio::spawn(async move { post(&http, &input_path, "input", &id).await })
    };
    let n = ipc.recv_of("input").await["input"].as_u64().unwrap();
    ipc.send(&ipc_fixture("sidecar_input_unsupported", 0, Some(n)))
        .await;
    wire::check(
        "http/error_input_unsupported.response.json",
        &asking.await.unwrap().body,
    );

    // A log message: acknowledged, and one log frame to the calling session.
    wire::check(
        "http/log.response.json",
        &post(&http, &format!("{at}/log"), "log", &app.id).await.body,
    );
    assert_eq!(ipc.recv_of("log").await, ipc_fixture("broker_log", 2, None));

    // A sampling request: a sample frame, and the sidecar's answer is the HTTP response.
    let sampling = {
        let http = http.clone();
        let id = app.id.clone();
        let path = format!("{at}/sample");
        tokio::spawn(async move { post(&http, &path, "sample", &id).await })
    };
    let frame = ipc.recv_of("sample").await;
    let n = frame["sample"].as_u64().expect("a sample number");
    let mut want = ipc_fixture("broker_sample", 2, None);
    want["sample"] = json!(n);
    assert_eq!(frame, want);
    let mut answer = ipc_fixture("sidecar_sample_answer", 0, None);
    answer["sample"] = json!(n);
    ipc.send(&answer).await;
    wire::check("http/sample.response.json", &sampling.await.unwrap().body);
}

/// `leo call` is a harness without a form: an app's question is refused at once, and a
/// structured result without blocks is printed as its JSON.
#[tokio::test]
async fn leo_call_refuses_questions_and_prints_structured_results() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    post(&app.http, "/api/v1/client-tools", "register_mcp", &app.id)
        .await
        .data();
    let call = tokio::process::Command::new(leo_testkit::bin("leo"))
        .args([
            "call",
            "deploy",
            r#"{"build": 42, "env": "prod"}"#,
            "--agent",
            "ops",
        ])
        .env("LEO_HOME", broker.home())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let id = app.next_request_id().await;
    let at = format!("/api/v1/client-tools/requests/{id}");
    post(&app.http, &format!("{at}/claim"), "claim", &app.id)
        .await
        .data();
    let asked = post(&app.http, &format!("{at}/input"), "input", &app.id).await;
    assert_eq!(asked.code(409), "input_unsupported", "{asked:?}");
    post(
        &app.http,
        &format!("{at}/result"),
        "result_structured",
        &app.id,
    )
    .await
    .data();
    let out = tokio::time::timeout(leo_testkit::WAIT, call.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed,
        wire::load("http/result_structured.request.json", &[])["structured_content"]
    );
}
