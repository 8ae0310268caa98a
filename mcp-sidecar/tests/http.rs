//! `/mcp`: the sidecar's MCP server over Streamable HTTP at the broker, driven by the official
//! MCP SDK clients (`tests/interop/over_http.py`), with the app played by the test.
//!
//! What these show is that `/mcp` is `leo-mcp`: the same tools, progress, questions,
//! `list_changed` and cancellation as over stdio, and a session the broker lists as its own.

use leo_testkit::{Broker, Script, mcp, require};
use serde_json::{Value, json};

use crate::features::{ask, plain_tool};
use crate::support::{App, interop_command, tool, tool_with_timeout, typescript_sdk};

/// The sessions the broker lists.
async fn agents(broker: &Broker) -> Vec<Value> {
    // The API socket: it serves a broker whose TCP listener is HTTPS too.
    let status = broker.http_unix().get("/api/v1/status").await;
    status.data()["agents"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `script` (run by `program` with `args`) as a client of the broker's `/mcp` with `token`.
fn over_http(
    broker: &Broker,
    program: &std::path::Path,
    script: &str,
    args: &[&str],
    token: &str,
) -> Script {
    let mut cmd = interop_command(program, script, broker.home());
    cmd.args(args);
    cmd.env("LEO_MCP_URL", format!("http://{}/mcp", broker.addr))
        .env("LEO_AGENT_TOKEN", token);
    Script::spawn(cmd, &broker.home().join(format!("{script}.stderr")))
}

/// The script's `echo` call of `agent`, answered by the app, reaches the script.
async fn echo_round(app: &mut App, script: &mut Script, agent: &str) {
    let req = app.next_request().await;
    assert_eq!(req.data["agent"], agent);
    assert_eq!(req.data["arguments"], json!({"text": "hi"}));
    let id = req.data["id"].as_str().unwrap().to_owned();
    app.serve(&id, json!([{"type": "text", "text": "hi back"}]))
        .await;
    let called = script.step("called").await;
    assert_eq!(called["result"]["content"][0]["text"], "hi back");
}

/// The app hears that the agent cancelled `request`.
async fn cancelled_by_agent(app: &mut App, request: &str) {
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], request);
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");
}

/// Waits until the broker lists no session; panics after `WAIT`.
async fn gone(broker: &Broker) {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    while !agents(broker).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session is still listed: {:?}",
            agents(broker).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http() {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start_with_env("", &[("LEO_MCP_PROGRESS_MS", "200")]).await;
    let token = broker.add_agent("py-http");
    let mut app = App::connect(&broker.http()).await;
    app.register_ok(
        "demo",
        json!([
            tool("echo"),
            tool_with_timeout("slow", 0),
            plain_tool("confirm")
        ]),
    )
    .await;

    let mut script = over_http(&broker, &python, "over_http.py", &[], &token);

    let connected = script.step("connected").await;
    assert_eq!(connected["protocol"], "2025-11-25", "{connected}");
    let listed = script.step("listed").await;
    assert_eq!(
        listed["tools"],
        json!(["confirm", "echo", "leo_messages", "slow"])
    );
    // The agent's own token named the session; the broker shows how it arrived.
    let sessions = agents(&broker).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["agent"], "py-http");
    assert_eq!(sessions[0]["transport"], "http");
    assert_eq!(sessions[0]["mode"], "native");
    assert_eq!(sessions[0]["harness"]["version"], "0-python-http");

    echo_round(&mut app, &mut script, "py-http").await;

    // A long call reports progress (every 200 ms here, 15 s by default) until it ends.
    let id = app.next_request_id().await;
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    app.serve(&id, json!([{"type": "text", "text": "late"}]))
        .await;
    let slow = script.step("slow").await;
    assert_eq!(slow["result"]["content"][0]["text"], "late", "{slow}");
    assert!(slow["progress"].as_u64().unwrap() >= 1, "{slow}");

    // A question reaches the client as elicitation, on the call's own stream.
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
    assert_eq!(confirmed["result"]["content"][0]["text"], "confirmed");

    // A tool added mid-session: list_changed on the GET stream.
    script.step("ready_for_change").await;
    app.register_ok("more", json!([tool("later")])).await;
    script.send_line("go").await;
    let changed = script.step("changed").await;
    assert!(
        changed["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("later")),
        "{changed}"
    );

    // The client gives up on a call: the app hears that the agent cancelled it.
    let id = app.next_request_id().await;
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], id.as_str());
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");
    script.step("gave_up").await;

    // Leaving the client ends the session (its DELETE): it leaves the broker's list, and the
    // SDK, which takes anything but 200 and 204 for a failed termination, says nothing.
    script.step("done").await;
    gone(&broker).await;
    let log = broker.home().join("over_http.py.stderr");
    let status = script.exit().await;
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!log.contains("Session termination failed"), "{log}");
}

/// `DELETE /mcp` ends the session: its call in flight is cancelled by the agent (the client
/// ended it), the session leaves the broker, and the id is unknown from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_the_session_and_its_calls() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool_with_timeout("slow", 0)]))
        .await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "raw");
    let id = mcp::open_session(&http, "claude-code").await;
    let sessions = agents(&broker).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["agent"], "raw");
    assert_eq!(sessions[0]["transport"], "http");

    let _in_flight = mcp::start_call(&http, &id, 2, "slow").await;
    let request = app.next_request_id().await;
    let deleted = http
        .send("DELETE", "/mcp", Default::default(), &mcp::in_session(&id))
        .await;
    // 204: clients (the Python SDK) take 202 for a failed termination.
    assert_eq!(deleted.status, 204, "{deleted:?}");
    cancelled_by_agent(&mut app, &request).await;
    gone(&broker).await;
    let after = http
        .send(
            "POST",
            "/mcp",
            mcp::call(3, "slow").into(),
            &mcp::in_session(&id),
        )
        .await;
    assert_eq!(after.status, 404, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_over_http() {
    if !typescript_sdk() {
        return;
    }
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo"), tool_with_timeout("slow", 0)]))
        .await;
    let node = std::path::Path::new("node");
    let mut script = over_http(&broker, node, "over_http.mjs", &[], &broker.agent_token());

    let connected = script.step("connected").await;
    assert_eq!(connected["server"]["name"], "leo-mcp", "{connected}");
    assert!(connected["session"].is_string(), "{connected}");
    // The pinned TypeScript SDK speaks the session era only: 2026-07-28 over `/mcp` is tested
    // with the Python SDK (`python_sdk_over_http_2026`). An SDK that adds it fails here, to be
    // tested in that era too.
    assert_eq!(connected["protocol"], "2025-11-25", "{connected}");
    let supported = connected["supported"]
        .as_array()
        .expect("the SDK's revisions");
    assert!(
        !supported.contains(&json!("2026-07-28")),
        "the TypeScript SDK now speaks 2026-07-28: drive /mcp with it in that era too ({connected})"
    );
    let listed = script.step("listed").await;
    assert_eq!(listed["tools"], json!(["echo", "leo_messages", "slow"]));
    // The shared token, with the agent named in Leo-Agent.
    let sessions = agents(&broker).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["agent"], "ts-http");
    assert_eq!(sessions[0]["transport"], "http");
    assert_eq!(sessions[0]["harness"]["name"], "opencode");

    echo_round(&mut app, &mut script, "ts-http").await;

    script.step("ready_for_change").await;
    app.register_ok("more", json!([tool("later")])).await;
    script.send_line("go").await;
    let changed = script.step("changed").await;
    assert_eq!(
        changed["tools"],
        json!(["echo", "later", "leo_messages", "slow"])
    );

    script.step("calling").await;
    let id = app.next_request_id().await;
    script.send_line("go").await;
    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], id.as_str());
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");
    let gave_up = script.step("gave_up").await;
    assert!(
        gave_up["outcome"].as_str().unwrap().starts_with("aborted"),
        "{gave_up}"
    );
    script.step("done").await;
    gone(&broker).await;
}

/// A call whose client goes away (its response stream dropped: the harness was killed, its
/// connection cut) is cancelled at once; the session itself goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_went_away_is_cancelled() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool_with_timeout("slow", 0), tool("echo")]))
        .await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "gone");
    let id = mcp::open_session(&http, "claude-code").await;

    let stream = mcp::start_call(&http, &id, 2, "slow").await;
    let request = app.next_request_id().await;
    drop(stream);
    cancelled_by_agent(&mut app, &request).await;
    mcp::call_answered(&http, &id, 3, "echo", &mut app, "still on").await;
}

/// A harness killed in the middle of a call: its call is cancelled, and the app hears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_client_cancels_its_call() {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool_with_timeout("slow", 0)]))
        .await;
    let token = broker.add_agent("doomed");
    let mut script = over_http(&broker, &python, "over_http.py", &["killed"], &token);
    script.step("connected").await;
    script.step("in_flight").await;
    let request = app.next_request_id().await;
    drop(script);
    cancelled_by_agent(&mut app, &request).await;
}

/// The 2026-07-28 era over `/mcp`: `server/discover`, no session, each request answered on its
/// own; a tool-list change arrives on `subscriptions/listen`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http_2026() {
    let Some(python) = require::python(&["mcp"]) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo")])).await;
    let token = broker.add_agent("py-modern");
    let mut script = over_http(&broker, &python, "over_http.py", &["modern"], &token);
    let connected = script.step("connected").await;
    assert_eq!(connected["protocol"], "2026-07-28", "{connected}");
    let listed = script.step("listed").await;
    assert_eq!(listed["tools"], json!(["echo", "leo_messages"]));
    echo_round(&mut app, &mut script, "py-modern").await;
    script.step("ready_for_change").await;
    app.register_ok("more", json!([tool("later")])).await;
    script.send_line("go").await;
    let changed = script.step("changed").await;
    assert_eq!(changed["tools"], json!(["echo", "later", "leo_messages"]));
    script.step("done").await;
}

/// `/mcp` over HTTPS when the listener has TLS (`leo tls init`): the TypeScript SDK client
/// trusts the broker's CA through `NODE_EXTRA_CA_CERTS`, as Claude Code and opencode do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_over_https() {
    if !typescript_sdk() {
        return;
    }
    let broker = Broker::start_tls().await;
    let mut app = App::connect(&broker.http_unix()).await;
    app.register_ok("demo", json!([tool("echo"), tool_with_timeout("slow", 0)]))
        .await;
    let mut cmd = interop_command("node", "over_http.mjs", broker.home());
    let url = format!("https://localhost:{}/mcp", broker.addr.port());
    cmd.env("LEO_MCP_URL", url)
        .env("LEO_AGENT_TOKEN", broker.agent_token())
        .env(
            "NODE_EXTRA_CA_CERTS",
            leo_testkit::tls::ca_file(broker.home()),
        );
    let mut script = Script::spawn(cmd, &broker.home().join("over-https-ts.stderr"));
    script.step("connected").await;
    script.step("listed").await;
    echo_round(&mut app, &mut script, "ts-http").await;
    let sessions = agents(&broker).await;
    assert_eq!(sessions[0]["transport"], "http", "{sessions:?}");
}

/// A `/mcp` stream read raw, event by event, as a client that parses SSE by hand reads it.
struct Raw {
    body: hyper::body::Incoming,
    text: String,
}

/// One SSE event: its fields (`id`, `retry`, `data`…) in order, comments left out.
type Event = Vec<(String, String)>;

impl Raw {
    fn of(response: hyper::Response<hyper::body::Incoming>) -> Raw {
        assert_eq!(response.status(), 200, "{response:?}");
        Raw {
            body: response.into_body(),
            text: String::new(),
        }
    }

    /// The next event, or `None` at the end of the stream; panics after `WAIT`.
    async fn next(&mut self) -> Option<Event> {
        use http_body_util::BodyExt;
        let read = async {
            loop {
                while let Some(end) = self.text.find("\n\n") {
                    let block: String = self.text.drain(..end + 2).collect();
                    let event: Event = block
                        .lines()
                        .filter(|l| !l.is_empty() && !l.starts_with(':'))
                        .map(|l| {
                            let (k, v) = l.split_once(':').unwrap_or((l, ""));
                            (k.to_owned(), v.trim_start().to_owned())
                        })
                        .collect();
                    if !event.is_empty() {
                        return Some(event);
                    }
                }
                let frame = self.body.frame().await?.ok()?;
                if let Ok(data) = frame.into_data() {
                    self.text.push_str(&String::from_utf8_lossy(&data));
                }
            }
        };
        tokio::time::timeout(leo_testkit::WAIT, read)
            .await
            .expect("no event in time")
    }

    /// The events up to the first whose message is `wanted`.
    async fn until(&mut self, wanted: impl Fn(&Value) -> bool) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            let event = self
                .next()
                .await
                .unwrap_or_else(|| panic!("ended: {events:?}"));
            let found = message(&event).is_some_and(|m| wanted(&m));
            events.push(event);
            if found {
                return events;
            }
        }
    }
}

/// The JSON-RPC message an event carries.
fn message(event: &Event) -> Option<Value> {
    let data = event.iter().find(|(k, _)| k == "data")?;
    serde_json::from_str(&data.1).ok()
}

fn list_changed(m: &Value) -> bool {
    m["method"] == "notifications/tools/list_changed"
}

/// Posts `body` in session `id`.
async fn post_in(http: &leo_testkit::Http, id: &str, body: &Value) -> leo_testkit::Reply {
    http.send(
        "POST",
        "/mcp",
        body.to_string().into(),
        &mcp::in_session(id),
    )
    .await
}

/// Opens a session of a client that can be asked questions and sample, and lists its tools; its id and
/// the events of the `initialize` stream.
async fn open_asking(http: &leo_testkit::Http) -> (String, Vec<Event>) {
    let mut init = mcp::initialize("claude-code");
    init["params"]["capabilities"] = json!({"elicitation": {}, "sampling": {}});
    let opened = http
        .open("POST", "/mcp", init.to_string().into(), &[])
        .await;
    let id = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut stream = Raw::of(opened);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event);
    }
    let body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let sent = post_in(http, &id, &body).await;
    assert_eq!(sent.status, 202, "{sent:?}");
    // The client has seen the tools: a change is news to it from now on.
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
    let listed = post_in(http, &id, &list).await;
    assert_eq!(listed.status, 200, "{listed:?}");
    (id, events)
}

/// Opens session `id`'s standalone stream, with `Last-Event-ID` if given.
async fn get_stream(http: &leo_testkit::Http, id: &str, last: Option<&str>) -> Raw {
    let mut headers = mcp::in_session(id).to_vec();
    headers.push(("accept", "text/event-stream"));
    if let Some(last) = last {
        headers.push(("last-event-id", last));
    }
    Raw::of(http.open("GET", "/mcp", Default::default(), &headers).await)
}

/// Every event of a session's three kinds of stream: `initialize`'s, the standalone `GET`
/// stream's (up to a `list_changed`) and a call's, in a session on a new broker whose app
/// serves `echo`.
struct Streamed {
    _broker: Broker,
    app: App,
    http: leo_testkit::Http,
    id: String,
    events: Vec<Event>,
}

async fn session_events() -> Streamed {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo")])).await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "raw");
    let (id, mut events) = open_asking(&http).await;
    let mut get = get_stream(&http, &id, None).await;
    app.register_ok("more", json!([tool("later")])).await;
    events.extend(get.until(list_changed).await);
    let mut call = Raw::of(mcp::start_call(&http, &id, 2, "echo").await);
    let request = app.next_request_id().await;
    app.serve(&request, json!([{"type": "text", "text": "hi"}]))
        .await;
    events.extend(call.until(|m| m["id"] == 2).await);
    Streamed {
        _broker: broker,
        app,
        http,
        id,
        events,
    }
}

/// Event ids are unique within a session, across all its streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_ids_do_not_repeat_within_a_session() {
    let Streamed { events, .. } = session_events().await;
    let ids: Vec<&String> = events
        .iter()
        .flatten()
        .filter(|(k, _)| k == "id")
        .map(|(_, v)| v)
        .collect();
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{events:?}");
}

/// `/mcp` does not offer resumption (a dropped call stream cancels its call): no event id and
/// no `retry:` announce it, and a `GET` with `Last-Event-ID` is a standalone stream like any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_resumption_is_advertised() {
    let Streamed {
        _broker,
        app,
        http,
        id,
        events,
    } = session_events().await;
    let announced: Vec<&Event> = events
        .iter()
        .filter(|e| e.iter().any(|(k, _)| k == "id" || k == "retry"))
        .collect();
    assert!(announced.is_empty(), "{announced:?}");
    let mut resumed = get_stream(&http, &id, Some("0")).await;
    app.register_ok("again", json!([tool("last")])).await;
    resumed.until(list_changed).await;
}

/// A question raised during a call travels on that call's stream, to a client that never
/// opened the standalone stream; its answer ends the question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_travels_on_its_calls_stream() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([plain_tool("confirm")]))
        .await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "raw");
    let (id, _) = open_asking(&http).await;
    let mut call = Raw::of(mcp::start_call(&http, &id, 2, "confirm").await);
    let request = app.claim_next().await;
    let client = async {
        let events = call.until(|m| m["method"] == "elicitation/create").await;
        let asked = message(events.last().unwrap()).unwrap();
        assert_eq!(asked["params"]["message"], "Deploy now?", "{asked}");
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
            "result": {"action": "accept", "content": {"confirm": true}}});
        let sent = post_in(&http, &id, &answer).await;
        assert_eq!(sent.status, 202, "{sent:?}");
    };
    let (asked, ()) = tokio::join!(ask(&app, &request, "Deploy now?"), client);
    assert_eq!(
        asked.data(),
        &json!({"action": "accept", "content": {"confirm": true}})
    );
    app.answer(&request, json!([{"type": "text", "text": "confirmed"}]))
        .await
        .data();
    let ended = call.until(|m| m["id"] == 2).await;
    let result = message(ended.last().unwrap()).unwrap();
    assert_eq!(
        result["result"]["content"][0]["text"], "confirmed",
        "{result}"
    );
}

/// A sampling request raised during a call travels on that call's stream and the client's
/// answer is the app's; the call's log messages travel there too, to a client that never opened
/// the standalone stream, filtered by the level it set with `logging/setLevel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_and_log_messages_travel_on_their_calls_stream() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([plain_tool("summarize")]))
        .await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "raw");
    let (id, _) = open_asking(&http).await;
    let level = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
                       "params": {"level": "warning"}});
    let set = post_in(&http, &id, &level).await;
    assert_eq!(mcp::response_of(&set, 3)["result"], json!({}), "{set:?}");
    let mut call = Raw::of(mcp::start_call(&http, &id, 2, "summarize").await);
    let request = app.claim_next().await;
    for (level, data) in [("info", "chatty"), ("warning", "slow disk")] {
        let log = json!({"level": level, "logger": "reader", "data": data});
        app.post_for(&request, "log", log).await.data();
    }
    let logged = call.until(|m| m["method"] == "notifications/message").await;
    let note = message(logged.last().unwrap()).unwrap();
    assert_eq!(
        note["params"],
        json!({"level": "warning", "logger": "reader", "data": "slow disk"})
    );
    let heard = |events: &[Event]| {
        events
            .iter()
            .filter_map(message)
            .filter(|m| m["method"] == "notifications/message")
            .count()
    };
    assert_eq!(heard(&logged), 1, "the info message passed: {logged:?}");
    let params = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Sum up"}}],
                        "maxTokens": 10});
    let client = async {
        let events = call
            .until(|m| m["method"] == "sampling/createMessage")
            .await;
        let asked = message(events.last().unwrap()).unwrap();
        assert_eq!(asked["params"]["maxTokens"], 10, "{asked}");
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
            "content": {"type": "text", "text": "short"}, "model": "m1"}});
        let sent = post_in(&http, &id, &answer).await;
        assert_eq!(sent.status, 202, "{sent:?}");
    };
    let (sampled, ()) = tokio::join!(
        app.post_for(&request, "sample", json!({"params": params})),
        client
    );
    assert_eq!(sampled.data()["content"]["text"], "short", "{sampled:?}");
    assert_eq!(sampled.data()["model"], "m1");
    // A message sent just before the result comes before it, on the same stream.
    let log = json!({"level": "error", "data": "last words"});
    app.post_for(&request, "log", log).await.data();
    app.answer(&request, json!([{"type": "text", "text": "done"}]))
        .await
        .data();
    let ended = call.until(|m| m["id"] == 2).await;
    let last: Vec<Value> = ended.iter().filter_map(message).collect();
    let at = last.len() - 1;
    assert_eq!(last[at - 1]["params"]["data"], "last words", "{last:?}");
    assert_eq!(heard(&ended), 1, "{ended:?}");
}

/// A new standalone stream does not replay what an earlier one delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_standalone_stream_replays_nothing_delivered() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo")])).await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "raw");
    let (id, _) = open_asking(&http).await;
    let mut first = get_stream(&http, &id, None).await;
    app.register_ok("more", json!([tool("later")])).await;
    first.until(list_changed).await;
    drop(first);
    let mut second = get_stream(&http, &id, None).await;
    // A replay comes at once, if at all.
    let quiet = std::time::Duration::from_millis(500);
    while let Ok(Some(event)) = tokio::time::timeout(quiet, second.next()).await {
        assert!(message(&event).is_none(), "replayed: {event:?}");
    }
    app.register_ok("again", json!([tool("last")])).await;
    second.until(list_changed).await;
}

/// `/mcp` answers as `leo-mcp` does: an unknown method is -32601 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_method_is_named_in_its_json_rpc_error() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("demo", json!([tool("echo")])).await;
    let http = mcp::client(broker.addr, &broker.agent_token()).with_header("leo-agent", "raw");
    let id = mcp::open_session(&http, "claude-code").await;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "foo/bar", "params": {}});
    let reply = mcp::response_of(&post_in(&http, &id, &body).await, 2);
    assert_eq!(reply["error"]["code"], -32601, "{reply}");
    assert_eq!(
        reply["error"]["message"], "method not found: foo/bar",
        "{reply}"
    );
}
