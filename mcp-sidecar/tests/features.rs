//! The MCP features apps reach harnesses with, end to end through the real broker and `leo-mcp`,
//! with the official TypeScript and Python SDK clients as harnesses: tool `title`,
//! `annotations` and `outputSchema`; structured results (checked against the output schema);
//! progress reports from the app; questions for the user (elicitation), answered, declined, or
//! refused at once to a harness that cannot ask.

use leo_testkit::require;
use leo_testkit::{Broker, Script};
use serde_json::{Value, json};

use crate::support::{App, interop_command, typescript_sdk};

/// A tool with every MCP field an app can give.
fn record_tool() -> Value {
    json!({
        "name": "record",
        "description": "Return the build record",
        "input_schema": {"type": "object"},
        "title": "Build record",
        "annotations": {"readOnlyHint": true, "openWorldHint": false},
        "output_schema": {
            "type": "object",
            "properties": {"build": {"type": "integer"}, "url": {"type": "string"}},
            "required": ["build", "url"]
        }
    })
}

pub fn plain_tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!("The {name} tool"),
        "input_schema": {"type": "object"},
        "annotations": {"destructiveHint": true, "idempotentHint": false}
    })
}

fn confirm_form() -> Value {
    json!({
        "type": "object",
        "properties": {
            "confirm": {"type": "boolean", "title": "Go ahead?"},
            "env": {"type": "string", "enum": ["prod", "staging"]}
        },
        "required": ["confirm"]
    })
}

/// Registers the feature tools and returns the app.
async fn feature_app(broker: &Broker) -> App {
    let app = App::connect(&broker.http()).await;
    app.register(
        "features",
        json!([record_tool(), plain_tool("deploy"), plain_tool("confirm")]),
    )
    .await;
    app
}

/// The app asks the user `message` with the confirm form during call `id`.
pub async fn ask(app: &App, id: &str, message: &str) -> leo_testkit::Reply {
    app.post_for(
        id,
        "input",
        json!({"message": message, "requested_schema": confirm_form()}),
    )
    .await
}

/// The record call: an invalid structured result is refused with its path, a valid one with
/// no blocks reaches the harness.
async fn answer_record(app: &mut App) {
    let id = app.claim_next().await;
    let missing = app
        .post_for(
            &id,
            "result",
            json!({"ok": true, "content": [{"type": "text", "text": "no data"}]}),
        )
        .await;
    assert_eq!(missing.code(422), "invalid_result");
    assert!(
        missing
            .error()
            .contains("at $.structured_content: required"),
        "{missing:?}"
    );
    let wrong = app
        .post_for(
            &id,
            "result",
            json!({"ok": true, "structured_content": {"build": "seven", "url": "u"}}),
        )
        .await;
    assert_eq!(wrong.code(422), "invalid_result");
    assert!(
        wrong.error().starts_with("at $.structured_content.build: "),
        "{wrong:?}"
    );
    app.post_for(
        &id,
        "result",
        json!({"ok": true, "structured_content": {"build": 7, "url": "https://ci.example/7"}}),
    )
    .await
    .data();
}

/// The deploy call: two progress reports with messages, then the result.
async fn answer_deploy(app: &mut App) {
    let req = app.next_request().await;
    let id = req.data["id"].as_str().unwrap().to_owned();
    // Progress before the claim is refused: only the claimant speaks for a call.
    let early = app.post_for(&id, "progress", json!({"progress": 1})).await;
    assert_eq!(early.code(409), "not_claimant");
    app.claim(&id).await;
    for (n, message) in [(1, "building"), (2, "uploading")] {
        app.post_for(
            &id,
            "progress",
            json!({"progress": n, "total": 3, "message": message}),
        )
        .await
        .data();
    }
    let bad = app.post_for(&id, "progress", json!({"progress": -1})).await;
    assert_eq!(bad.code(400), "invalid_parameter");
    // Give the reports time to cross before the result overtakes them on the harness side.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    app.post_for(
        &id,
        "result",
        json!({"ok": true, "content": [{"type": "text", "text": "deployed"}]}),
    )
    .await
    .data();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client() {
    if !typescript_sdk() {
        return;
    }
    let broker = Broker::start().await;
    let mut app = feature_app(&broker).await;
    let mut cmd = interop_command("node", "features.mjs", broker.home());
    cmd.env("LEO_MCP_LOG", "leo_mcp=debug");
    let mut script = Script::spawn(cmd, &broker.home().join("features-ts.stderr"));
    script.step("connected").await;

    let listed = script.step("listed").await;
    let tools = listed["tools"].as_array().unwrap();
    let by_name = |n: &str| {
        tools
            .iter()
            .find(|t| t["name"] == n)
            .unwrap_or_else(|| panic!("{n} not listed: {listed}"))
    };
    let record = by_name("record");
    assert_eq!(record["title"], "Build record");
    assert_eq!(
        record["annotations"],
        json!({"readOnlyHint": true, "openWorldHint": false})
    );
    assert_eq!(record["outputSchema"], record_tool()["output_schema"]);
    assert_eq!(
        by_name("deploy")["annotations"],
        json!({"destructiveHint": true, "idempotentHint": false})
    );
    assert!(by_name("deploy").get("outputSchema").is_none());

    answer_record(&mut app).await;
    let got = script.step("record").await;
    let data = json!({"build": 7, "url": "https://ci.example/7"});
    assert_eq!(got["result"]["structuredContent"], data, "{got}");
    let text = got["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), data);

    answer_deploy(&mut app).await;
    let got = script.step("deploy").await;
    assert_eq!(got["result"]["content"][0]["text"], "deployed", "{got}");
    let reports = got["reports"].as_array().unwrap();
    let from_app: Vec<(&Value, &Value, &Value)> = reports
        .iter()
        .map(|r| (&r["progress"], &r["total"], &r["message"]))
        .collect();
    assert_eq!(
        from_app,
        [
            (&json!(1), &json!(3), &json!("building")),
            (&json!(2), &json!(3), &json!("uploading"))
        ],
        "{got}"
    );

    // Questions: the script's user accepts the first and declines the second.
    let id = app.claim_next().await;
    let yes = ask(&app, &id, "Deploy build 7 to production?").await;
    assert_eq!(
        yes.data(),
        &json!({"action": "accept", "content": {"confirm": true, "env": "prod"}})
    );
    let no = ask(&app, &id, "Also wipe the cache?").await;
    assert_eq!(no.data(), &json!({"action": "decline"}));
    let bad = app
        .post_for(
            &id,
            "input",
            json!({"message": "x", "requested_schema": {"type": "object", "properties": {"a": {"type": "object"}}}}),
        )
        .await;
    assert_eq!(bad.code(400), "invalid_parameter");
    assert!(
        bad.error()
            .starts_with("at $.requested_schema.properties.a.type"),
        "{bad:?}"
    );
    app.answer(&id, json!([{"type": "text", "text": "confirmed"}]))
        .await
        .data();
    let got = script.step("confirm").await;
    assert_eq!(got["result"]["content"][0]["text"], "confirmed");
    assert_eq!(got["asked"][0]["mode"], "form", "{got}");
    assert_eq!(got["asked"][0]["requestedSchema"], confirm_form(), "{got}");
    assert_eq!(got["asked"][1]["message"], "Also wipe the cache?");

    script.step("done").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
}

/// The Python SDK as a harness, with (`ask`) and without (`plain`) an elicitation callback.
async fn python_run(mode: &str) {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = feature_app(&broker).await;
    let mut cmd = interop_command(python, "features.py", broker.home());
    cmd.arg(mode).env("LEO_MCP_LOG", "leo_mcp=debug");
    let mut script = Script::spawn(cmd, &broker.home().join("features-py.stderr"));

    let listed = script.step("listed").await;
    let record = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "record")
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(record["title"], "Build record");
    assert_eq!(record["annotations"]["readOnlyHint"], true);
    assert_eq!(record["outputSchema"], record_tool()["output_schema"]);

    answer_record(&mut app).await;
    let got = script.step("record").await;
    assert_eq!(
        got["result"]["structuredContent"],
        json!({"build": 7, "url": "https://ci.example/7"}),
        "{got}"
    );

    answer_deploy(&mut app).await;
    let got = script.step("deploy").await;
    let messages: Vec<&Value> = got["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["message"])
        .collect();
    assert_eq!(messages, [&json!("building"), &json!("uploading")], "{got}");
    assert_eq!(got["reports"][1]["total"], 3.0);

    let id = app.claim_next().await;
    let asked = ask(&app, &id, "Deploy now?").await;
    if mode == "ask" {
        assert_eq!(
            asked.data(),
            &json!({"action": "accept", "content": {"confirm": true}})
        );
        let seen = script.step("asked").await;
        assert_eq!(seen["message"], "Deploy now?");
    } else {
        // A harness that cannot ask: refused at once, so the app can fall back.
        assert_eq!(asked.code(409), "input_unsupported", "{asked:?}");
        assert!(asked.error().contains("leo-features-py-plain"), "{asked:?}");
    }
    app.answer(&id, json!([{"type": "text", "text": "confirmed"}]))
        .await
        .data();
    let got = script.step("confirm").await;
    assert_eq!(got["result"]["content"][0]["text"], "confirmed");
    script.step("done").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_that_asks_its_user() {
    python_run("ask").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_without_elicitation_is_refused_at_once() {
    python_run("plain").await;
}

/// A question the user never answers ends with its call: the harness cancelling the call (the
/// app's request answers `already_settled`), or the call timing out (`timeout`); the app's
/// request never hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_question_ends_with_its_call() {
    use crate::support::Raw;
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register(
        "features",
        json!([plain_tool("confirm"), {
            "name": "quick", "description": "Times out soon", "input_schema": {"type": "object"},
            "timeout_s": 2
        }]),
    )
    .await;
    let mut mcp = Raw::start(broker.home(), "raw");
    let init = mcp
        .request(json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "raw-asker", "version": "1"}
            }
        }))
        .await;
    assert!(init["result"].is_object(), "{init}");
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    for (n, tool) in [(2, "confirm"), (3, "quick")] {
        mcp.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}}))
            .await;
        let id = app.claim_next().await;
        let asking = {
            let app_http = app.http.clone();
            let body = json!({"client_id": app.id, "message": "Sure?", "requested_schema": confirm_form()});
            let path = format!("/api/v1/client-tools/requests/{id}/input");
            tokio::spawn(async move { app_http.post(&path, &body).await })
        };
        // The harness is asked (form mode) and does not answer.
        let ask = loop {
            let msg = mcp.recv().await;
            if msg["method"] == "elicitation/create" {
                break msg;
            }
        };
        assert_eq!(ask["params"]["mode"], "form", "{ask}");
        assert_eq!(ask["params"]["requestedSchema"], confirm_form());
        if tool == "confirm" {
            mcp.send(
                &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": n, "reason": "user pressed Esc"}}),
            )
            .await;
            let answer = asking.await.unwrap();
            assert_eq!(answer.code(409), "already_settled", "{answer:?}");
            assert_eq!(
                app.next_cancelled().await.data["reason"],
                "cancelled_by_agent"
            );
        } else {
            let answer = asking.await.unwrap();
            assert!(
                matches!(answer.code(answer.status), "timeout" | "already_settled"),
                "{answer:?}"
            );
            let ended = mcp
                .request(json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}))
                .await;
            assert!(ended["result"].is_object());
        }
    }
}

/// A 2026-07-28 session (`--discover`): discover, list, call, and `list_changed` through
/// `subscriptions/listen`, with the Python SDK in its default mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_2026_session() {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register(
        "demo",
        json!([crate::support::tool("echo"), plain_tool("confirm")]),
    )
    .await;
    let mut cmd = interop_command(python, "modern.py", broker.home());
    cmd.env("LEO_MCP_LOG", "leo_mcp=debug,rmcp=debug");
    let mut script = Script::spawn(cmd, &broker.home().join("modern-py.stderr"));
    let connected = script.step("connected").await;
    assert_eq!(connected["protocol"], "2026-07-28", "{connected}");
    let listed = script.step("listed").await;
    assert_eq!(listed["tools"], json!(["confirm", "echo", "leo_messages"]));
    // Native from the per-request client info; the broker heard of the harness too.
    let status = broker.http().get("/api/v1/status").await;
    assert!(
        status.body.to_string().contains("0-python-sdk"),
        "{:?}",
        status.body
    );
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], "py-modern");
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "hi back"}]),
    )
    .await;
    let called = script.step("called").await;
    assert_eq!(called["result"]["content"][0]["text"], "hi back");

    // A question in a 2026-07-28 session: input_required, answered on the client's retry,
    // while the broker's call stays the same live call.
    let id = app.claim_next().await;
    let asked = ask(&app, &id, "Deploy now?").await;
    assert_eq!(
        asked.data(),
        &json!({"action": "accept", "content": {"confirm": true}})
    );
    assert_eq!(script.step("asked").await["message"], "Deploy now?");
    app.answer(&id, json!([{"type": "text", "text": "confirmed"}]))
        .await
        .data();
    let confirmed = script.step("confirmed").await;
    assert_eq!(
        confirmed["result"]["content"][0]["text"], "confirmed",
        "{confirmed}"
    );
    script.step("listening").await;
    app.register("more", json!([crate::support::tool("later")]))
        .await;
    script.send_line("go").await;
    let changed = script.step("changed").await;
    assert_eq!(
        changed["tools"],
        json!(["confirm", "echo", "later", "leo_messages"])
    );
    script.step("done").await;
    let log = script.log();
    assert!(script.exit().await.success(), "{log}");
}

/// A harness that declares the tasks extension gets a task for a handoff (`timeout_s: 0`) and
/// for `execution: "task"`, polls it with `tasks/get` (working, then the result inline), and
/// cancels one with `tasks/cancel` (the app sees `cancelled_by_agent`); other tools stay plain
/// calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_runs_as_a_task_for_a_harness_with_tasks() {
    use crate::support::Raw;
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register(
        "features",
        json!([
            {"name": "handoff", "description": "Waits for a person", "input_schema": {"type": "object"}, "timeout_s": 0},
            {"name": "review", "description": "Runs as a task", "input_schema": {"type": "object"}, "execution": "task"},
            {"name": "quick", "description": "A plain call", "input_schema": {"type": "object"}}
        ]),
    )
    .await;
    let mut mcp = Raw::start(broker.home(), "tasker");
    let init = mcp
        .request(json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                "clientInfo": {"name": "claude-code", "version": "0-raw"}
            }
        }))
        .await;
    assert!(
        init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{init}"
    );
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let call = |id: u64, name: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {}}});
    let get = |id: u64, task: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task}});

    // A plain tool stays a plain call.
    mcp.send(&call(2, "quick")).await;
    let req = app.next_request().await;
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "done"}]),
    )
    .await;
    let quick = loop {
        let msg = mcp.recv().await;
        if msg["id"] == 2 {
            break msg;
        }
    };
    assert_eq!(quick["result"]["content"][0]["text"], "done", "{quick}");

    // A handoff answers at once with a task, polled until the app's result is inline.
    for (n, tool) in [(3, "handoff"), (4, "review")] {
        let created = mcp.request(call(n, tool)).await;
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        let task = created["result"]["taskId"].as_str().unwrap().to_owned();
        let req = app.next_request().await;
        let working = mcp.request(get(100 + n, &task)).await;
        assert_eq!(working["result"]["status"], "working", "{working}");
        app.serve(
            req.data["id"].as_str().unwrap(),
            json!([{"type": "text", "text": format!("{tool} answered")}]),
        )
        .await;
        let mut polls = 0;
        let done = loop {
            let got = mcp.request(get(200 + polls, &task)).await;
            if got["result"]["status"] != "working" {
                break got;
            }
            polls += 1;
            assert!(polls < 100, "the task never completed: {got}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert_eq!(done["result"]["status"], "completed", "{done}");
        assert_eq!(
            done["result"]["result"]["content"][0]["text"],
            format!("{tool} answered"),
            "{done}"
        );
    }

    // tasks/cancel ends the broker's request as the agent's cancel.
    let created = mcp.request(call(5, "handoff")).await;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    let req = app.next_request().await;
    let ack = mcp
        .request(json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/cancel", "params": {"taskId": task}}))
        .await;
    assert!(ack["result"].is_object(), "{ack}");
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], req.data["id"]);
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");
    let mut polls = 0;
    loop {
        let got = mcp.request(get(300 + polls, &task)).await;
        if got["result"]["status"] == "cancelled" {
            break;
        }
        polls += 1;
        assert!(polls < 100, "the task never ended cancelled: {got}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// One call of `tool` by `agent`, answered by the app with `result`; returns the harness's view.
async fn answered(
    agent: &leo_testkit::agent::Agent,
    app: &mut App,
    tool: &str,
    result: Value,
) -> rmcp::model::CallToolResult {
    let call = agent.spawn_call(tool, json!({}));
    let id = app.claim_next().await;
    app.post_for(&id, "result", result).await.data();
    call.await.unwrap()
}

fn texts(r: &rmcp::model::CallToolResult) -> Vec<String> {
    r.content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect()
}

/// Results are shaped from the measured table: opencode (which gives the model only content
/// blocks and drops images) also gets the structured JSON as text and a note on the images;
/// Claude Code (which keeps `structuredContent` and images) gets the result as the app sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_shaped_for_the_measured_harness() {
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("features", json!([record_tool(), plain_tool("picture")]))
        .await;
    let record = json!({"ok": true, "content": [{"type": "text", "text": "record 7"}],
        "structured_content": {"build": 7, "url": "https://ci.example/7"}});
    let picture = json!({"ok": true, "content": [
        {"type": "image", "data": PNG, "mimeType": "image/png"}, {"type": "text", "text": "a pixel"}]});
    for (client, extra) in [("opencode", true), ("claude-code", false)] {
        let mut opts = leo_testkit::agent::AgentOpts::native(client);
        opts.client_name = client.to_owned();
        let agent = leo_testkit::agent::Agent::start(broker.home(), opts).await;
        let r = answered(&agent, &mut app, "record", record.clone()).await;
        let structured = json!({"build": 7, "url": "https://ci.example/7"});
        assert_eq!(r.structured_content, Some(structured.clone()), "{client}");
        let want: Vec<String> = if extra {
            vec!["record 7".into(), structured.to_string()]
        } else {
            vec!["record 7".into()]
        };
        assert_eq!(texts(&r), want, "{client}");
        let r = answered(&agent, &mut app, "picture", picture.clone()).await;
        assert_eq!(
            r.content.len(),
            if extra { 3 } else { 2 },
            "{client}: {r:?}"
        );
        assert!(r.content[0].as_image().is_some(), "{client}");
        if extra {
            assert_eq!(
                texts(&r)[1],
                "[this result has 1 image(s) (image/png) that this harness does not show to the model]"
            );
        }
    }
}
