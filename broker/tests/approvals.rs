//! A person approves before a call runs: the real `leo-mcp` (and `/mcp`) calls tools that need
//! approval; the app's stream and `?pending=1` never show such a call before it is approved;
//! the operator decides over HTTP and with `leo approve` / `leo deny`; a decision is bound to
//! the call's digest and made once; an awaiting call survives a SIGKILL of the broker.

use std::time::Duration;

use leo_testkit::agent::{Agent, AgentOpts, content_json, error_text, text_of, wait_until};
use leo_testkit::{Broker, Http, Reply, Sse, bin};
use serde_json::{Value, json};

use crate::support::App;

const CONFIG: &str = "approvals:
  expire_s: 3
  require:
    - tools: [\"tune*\"]
      agents: [\"ci-*\"]
      allow_edits: true
";

/// `deploy` needs approval by its app; `tune` by the operator's rule, with edits.
async fn serving(broker: &Broker) -> App {
    let app = App::connect(&broker.http()).await;
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"},
                                                         "env": {"type": "string"}}});
    app.register_ok(
        "ops",
        json!([
            {"name": "deploy", "description": "Deploys", "input_schema": schema,
             "approval": "required"},
            {"name": "tune", "description": "Tunes", "input_schema": schema},
        ]),
    )
    .await;
    app
}

/// The operator's plain stream, where approvals are announced.
async fn approver(broker: &Broker) -> Sse {
    let mut sse = Sse::open(&broker.http(), "/api/v1/events", None).await;
    assert_eq!(sse.next().await.event, "hello");
    sse
}

async fn requested(sse: &mut Sse) -> Value {
    sse.next_of("client_tool.approval_requested").await.data
}

fn decide(http: &Http, id: &str, what: &str, body: Value) -> impl Future<Output = Reply> {
    let (http, path) = (http.clone(), format!("/api/v1/approvals/{id}/{what}"));
    async move { http.post(&path, &body).await }
}

/// The app saw nothing of call `id` for a while (no request, no cancel, no approval; other
/// events such as `client_tools.changed` may pass), and lists no call pending.
async fn app_saw_nothing(app: &mut App, id: &str) {
    while let Some(event) = app.sse.within(Duration::from_millis(300)).await {
        assert!(
            !event.event.starts_with("client_tool.") && !event.data.to_string().contains(id),
            "the app saw {event:?} of a call awaiting approval"
        );
    }
    let pending = app
        .http
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data(), &json!([]), "{pending:?}");
}

async fn agent(broker: &Broker) -> Agent {
    Agent::start(
        broker.home(),
        AgentOpts::native("ci-1").env("LEO_MCP_PROGRESS_MS", "100"),
    )
    .await
}

/// A broker with `CONFIG`, serving, and `ci-1`'s call of `deploy` announced to the operator.
struct Deploying {
    broker: Broker,
    app: App,
    approvals: Sse,
    /// The call's harness: bound (as `_agent`) while the call runs.
    _agent: Agent,
    call: tokio::task::JoinHandle<leo_testkit::agent::CallToolResult>,
    asked: Value,
    id: String,
}

async fn deploying() -> Deploying {
    let broker = Broker::start_with(CONFIG).await;
    let app = serving(&broker).await;
    let mut approvals = approver(&broker).await;
    let agent = agent(&broker).await;
    let call = agent.spawn_call("deploy", json!({"env": "prod"}));
    let asked = requested(&mut approvals).await;
    let id = asked["id"].as_str().unwrap().to_owned();
    Deploying {
        broker,
        app,
        approvals,
        _agent: agent,
        call,
        asked,
        id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_reaches_the_app_once_and_only_after_approval() {
    let Deploying {
        broker,
        mut app,
        call,
        asked,
        id,
        _agent: agent,
        ..
    } = deploying().await;
    let http = broker.http();
    assert_eq!(asked["tool"], "deploy");
    assert_eq!(asked["agent"], "ci-1");
    assert_eq!(asked["arguments"], json!({"env": "prod"}));
    assert_eq!(asked["required_by"], "tool");
    assert_eq!(asked["editable"], false);
    app_saw_nothing(&mut app, &id).await;
    let claimed = app.claim(&id).await;
    assert_eq!(claimed.code(404), "unknown_request", "{claimed:?}");
    wait_until("the harness hears why it waits", || {
        let seen = agent.seen.progress_messages.lock().unwrap();
        seen.iter().filter(|m| *m == "waiting for approval").count() >= 2
    })
    .await;
    let listed = http.get("/api/v1/approvals").await;
    assert_eq!(
        listed.data()["approvals"][0]["id"],
        id.as_str(),
        "{listed:?}"
    );
    let status = http.get("/api/v1/status").await;
    assert!(
        status.body.to_string().contains("awaiting_approval"),
        "{status:?}"
    );

    let wrong = decide(&http, &id, "approve", json!({"digest": "sha256:00"})).await;
    assert_eq!(wrong.code(409), "digest_mismatch", "{wrong:?}");
    let digest = asked["digest"].clone();
    let edit = json!({"digest": digest, "arguments": {"env": "dev"}});
    let edit = decide(&http, &id, "approve", edit).await;
    assert_eq!(edit.code(403), "forbidden", "{edit:?}");

    let ok = decide(&http, &id, "approve", json!({"digest": digest})).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.data()["decision"], "approved");
    let again = decide(&http, &id, "approve", json!({"digest": digest})).await;
    assert_eq!(again.code(409), "already_decided", "{again:?}");

    let request = app.next_request().await;
    assert_eq!(request.data["id"], id.as_str());
    assert_eq!(request.data["arguments"], json!({"env": "prod"}));
    app.serve(&id, json!([{"type": "text", "text": "deployed"}]))
        .await;
    assert_eq!(text_of(&call.await.unwrap()), "deployed");

    let audit = http.get("/api/v1/audit").await;
    assert!(
        audit.body.to_string().contains(digest.as_str().unwrap()),
        "{audit:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_arguments_are_checked_again_and_the_agent_is_told() {
    let broker = Broker::start_with(CONFIG).await;
    let mut app = serving(&broker).await;
    let mut approvals = approver(&broker).await;
    let agent = agent(&broker).await;
    let http = broker.http();

    let call = agent.spawn_call("tune", json!({"n": 1}));
    let asked = requested(&mut approvals).await;
    assert_eq!(
        (asked["required_by"].clone(), asked["editable"].clone()),
        (json!("config"), json!(true))
    );
    let id = asked["id"].as_str().unwrap().to_owned();
    let digest = asked["digest"].clone();
    app_saw_nothing(&mut app, &id).await;

    let bad = json!({"digest": digest, "arguments": {"n": "two"}});
    let bad = decide(&http, &id, "approve", bad).await;
    assert_eq!(bad.code(422), "invalid_arguments", "{bad:?}");
    let good = json!({"digest": digest, "arguments": {"n": 2}});
    let good = decide(&http, &id, "approve", good).await;
    assert_eq!(good.data()["edited"], true, "{good:?}");

    let request = app.next_request().await;
    assert_eq!(request.data["arguments"], json!({"n": 2}));
    app.serve(&id, json!([{"type": "text", "text": "tuned"}]))
        .await;
    let content = content_json(&call.await.unwrap());
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .contains(r#"changed the arguments of this call; it ran with {"n":2}"#),
        "{content}"
    );
    assert_eq!(content[1]["text"], "tuned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_or_expired_call_ends_without_the_app_ever_seeing_it() {
    let broker = Broker::start_with(CONFIG).await;
    let mut app = serving(&broker).await;
    let mut approvals = approver(&broker).await;
    let agent = agent(&broker).await;

    let denied = agent.spawn_call("deploy", json!({"env": "prod"}));
    let asked = requested(&mut approvals).await;
    let id = asked["id"].as_str().unwrap().to_owned();
    let out = leo(&broker, &["deny", &id, "--reason", "not on a Friday"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        error_text(&denied.await.unwrap()),
        "denied: not on a Friday"
    );

    let expired = agent.spawn_call("deploy", json!({"env": "prod"}));
    let second = requested(&mut approvals).await;
    assert_eq!(
        error_text(&expired.await.unwrap()),
        "approval_timeout: nobody approved the call within 3 s"
    );
    app_saw_nothing(&mut app, &id).await;
    app_saw_nothing(&mut app, second["id"].as_str().unwrap()).await;
    assert!(
        broker.http().get("/api/v1/approvals").await.data()["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvers_at_once_one_decides_and_the_other_is_refused() {
    let Deploying {
        broker,
        mut app,
        call,
        asked,
        id,
        _agent,
        ..
    } = deploying().await;
    let http = broker.http();
    let approve = json!({"digest": asked["digest"]});
    let deny = json!({"digest": asked["digest"], "reason": "no"});
    let (a, d) = tokio::join!(
        decide(&http, &id, "approve", approve),
        decide(&http, &id, "deny", deny)
    );
    let mut statuses = [a.status, d.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{a:?} {d:?}");
    let loser = if a.status == 409 { &a } else { &d };
    assert!(!loser.error().is_empty());
    assert_eq!(loser.body["code"], "already_decided", "{loser:?}");
    if a.status == 200 {
        let request = app.next_request().await;
        app.serve(
            request.data["id"].as_str().unwrap(),
            json!([{"type": "text", "text": "ok"}]),
        )
        .await;
        assert_eq!(text_of(&call.await.unwrap()), "ok");
    } else {
        assert_eq!(error_text(&call.await.unwrap()), "denied: no");
        app_saw_nothing(&mut app, &id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_mcp_waits_for_approval_like_one_through_leo_mcp() {
    let broker = Broker::start_with(CONFIG).await;
    let mut app = serving(&broker).await;
    let mut approvals = approver(&broker).await;
    let mcp = leo_testkit::mcp::client(broker.addr, &broker.agent_token())
        .with_header("leo-agent", "ci-2");
    let session = leo_testkit::mcp::open_session(&mcp, "ci").await;
    let calling = tokio::spawn({
        let (mcp, session) = (mcp.clone(), session.clone());
        async move { leo_testkit::mcp::call_in(&mcp, &session, 7, "tune").await }
    });
    let asked = requested(&mut approvals).await;
    assert_eq!(asked["agent"], "ci-2");
    let id = asked["id"].as_str().unwrap().to_owned();
    app_saw_nothing(&mut app, &id).await;
    let ok = decide(
        &broker.http(),
        &id,
        "approve",
        json!({"digest": asked["digest"]}),
    )
    .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let request = app.next_request().await;
    assert_eq!(request.data["id"], id.as_str());
    app.serve(&id, json!([{"type": "text", "text": "tuned"}]))
        .await;
    let answer = calling.await.unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "tuned", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_awaiting_approval_survives_a_sigkill_and_then_runs_once() {
    let Deploying {
        broker,
        app,
        approvals,
        call,
        asked,
        id,
        _agent,
    } = deploying().await;
    drop((app, approvals));
    // The park is committed a moment after it is announced (a call lost before that ends
    // `no_client` for its harness, as any call would).
    tokio::time::sleep(Duration::from_millis(500)).await;

    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let mut app = serving(&broker).await;
    let listed = broker.http().get("/api/v1/approvals").await;
    assert_eq!(
        listed.data()["approvals"][0]["id"],
        id.as_str(),
        "{listed:?}"
    );
    assert_eq!(listed.data()["approvals"][0]["digest"], asked["digest"]);
    app_saw_nothing(&mut app, &id).await;
    let out = leo(&broker, &["approvals"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{out:?}"
    );

    approved_with_leo_it_runs_once(&broker, app, call, &id).await;
}

/// `leo approve ID` on `broker`: `app` is offered the call once, and its answer is `call`'s.
async fn approved_with_leo_it_runs_once(
    broker: &Broker,
    mut app: App,
    call: tokio::task::JoinHandle<leo_testkit::agent::CallToolResult>,
    id: &str,
) {
    let out = leo(broker, &["approve", id]);
    assert!(out.status.success(), "{out:?}");
    let request = app.next_request().await;
    assert_eq!(request.data["id"], id);
    app.serve(id, json!([{"type": "text", "text": "deployed once"}]))
        .await;
    assert_eq!(text_of(&call.await.unwrap()), "deployed once");
    assert!(app.sse.within(Duration::from_millis(300)).await.is_none());
}

/// Runs `leo ARGS` on the broker's home.
fn leo(broker: &Broker, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin("leo"))
        .args(args)
        .env("LEO_HOME", broker.home())
        .output()
        .expect("run leo")
}

/// The approval fixtures of `testdata/wire/`, sent or compared against the real broker.
#[tokio::test]
async fn the_approval_fixtures_match_the_broker() {
    use leo_testkit::wire;
    let broker = Broker::start_with("approvals:\n  allow_edits: true\n").await;
    let http = broker.http();
    let app = App::connect(&http).await;
    let body = wire::load(
        "http/register_approval.request.json",
        &[("<client_id>", &app.id)],
    );
    assert_eq!(http.post("/api/v1/client-tools", &body).await.status, 200);
    let mut approvals = approver(&broker).await;
    let mut ipc = crate::support::agent(&broker, "ci-1").await;
    let strip = |mut v: Value| {
        // Timestamps and the expiry are normalized; the session is the test's own.
        v["data"].as_object_mut().map(|o| o.remove("expires_at"));
        v
    };

    ipc.call(1, "deploy", json!({"env": "prod"})).await;
    let asked = approvals.next_of("client_tool.approval_requested").await;
    let event = json!({"event": asked.event, "data": asked.data});
    wire::check("events/client_tool.approval_requested.json", &strip(event));
    let id = asked.data["id"].as_str().unwrap().to_owned();
    let digest = asked.data["digest"].as_str().unwrap().to_owned();
    let listed = http.get("/api/v1/approvals").await;
    let mut listed = listed.body;
    listed["data"]["approvals"][0]
        .as_object_mut()
        .unwrap()
        .remove("expires_at");
    wire::check("http/approvals.response.json", &listed);
    // The operator's status shows the call, awaiting approval.
    let status = http.get("/api/v1/status").await.body;
    wire::check("http/status_awaiting_approval.response.json", &status);
    // The tools listing and `leo status` say that every call of it needs approval.
    let tools = http.get("/api/v1/client-tools").await.body;
    assert_eq!(tools["data"]["tools"][0]["needs_approval"], true, "{tools}");
    let shown = leo(&broker, &["status"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("deploy (needs approval)"), "{shown}");
    let wrong = wire::load(
        "http/approve_call.request.json",
        &[("<digest>", "sha256:0")],
    );
    let wrong = http
        .post(&format!("/api/v1/approvals/{id}/approve"), &wrong)
        .await;
    wire::check("http/error_digest_mismatch.response.json", &wrong.body);
    let body = wire::load("http/approve_call.request.json", &[("<digest>", &digest)]);
    let ok = http
        .post(&format!("/api/v1/approvals/{id}/approve"), &body)
        .await;
    wire::check("http/approve_call.response.json", &ok.body);
    let again = http
        .post(&format!("/api/v1/approvals/{id}/approve"), &body)
        .await;
    wire::check("http/error_already_decided.response.json", &again.body);

    ipc.call(2, "deploy", json!({"env": "prod"})).await;
    let asked = approvals.next_of("client_tool.approval_requested").await;
    let id = asked.data["id"].as_str().unwrap().to_owned();
    let digest = asked.data["digest"].as_str().unwrap().to_owned();
    let body = wire::load("http/deny_call.request.json", &[("<digest>", &digest)]);
    let denied = http
        .post(&format!("/api/v1/approvals/{id}/deny"), &body)
        .await;
    wire::check("http/deny_call.response.json", &denied.body);
    let outcome = crate::support::result_of(&mut ipc, 2).await;
    assert_eq!(outcome["error"]["message"], "not on a Friday", "{outcome}");
}

/// The app changes the tool's definition while a call awaits: an approval made against the old
/// one is refused `409 digest_mismatch`, the call stays awaiting under a new digest (approvers
/// are told again), and the approval of that one runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_changed_while_a_call_awaits_needs_a_new_approval() {
    let Deploying {
        broker,
        mut app,
        mut approvals,
        call,
        asked,
        id,
        _agent,
        ..
    } = deploying().await;
    let http = broker.http();
    let old = asked["digest"].clone();

    let schema = json!({"type": "object", "properties": {"env": {"type": "string"}}});
    app.register_ok(
        "ops",
        json!([{"name": "deploy", "description": "Deploys everywhere at once",
                "input_schema": schema, "approval": "required"}]),
    )
    .await;
    let stale = decide(&http, &id, "approve", json!({"digest": old})).await;
    assert_eq!(stale.code(409), "digest_mismatch", "{stale:?}");
    assert!(stale.error().contains("changed while"), "{stale:?}");
    // The call now names the new digest: the old one is refused as any other.
    let stale = decide(&http, &id, "deny", json!({"digest": old})).await;
    assert_eq!(stale.code(409), "digest_mismatch", "{stale:?}");
    let again = requested(&mut approvals).await;
    assert_eq!(again["id"], id.as_str());
    let new = again["digest"].clone();
    assert_ne!(new, old);
    let listed = http.get("/api/v1/approvals").await;
    assert_eq!(listed.data()["approvals"][0]["digest"], new, "{listed:?}");
    app_saw_nothing(&mut app, &id).await;

    let ok = decide(&http, &id, "approve", json!({"digest": new})).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let request = app.next_request().await;
    assert_eq!(request.data["id"], id.as_str());
    app.serve(&id, json!([{"type": "text", "text": "deployed"}]))
        .await;
    assert_eq!(text_of(&call.await.unwrap()), "deployed");
}

/// On a PostgreSQL store, across a cluster: the leader is killed while a call through the real
/// `leo-mcp` on a follower awaits approval; the follower takes the lease, still holds the call
/// awaiting (no app saw it), and `leo approve` there runs it once; the harness gets the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_awaiting_approval_survives_the_cluster_leaders_kill_and_runs_once() {
    let Some(db) = leo_testkit::postgres::database().await else {
        return;
    };
    let config = format!("{}{CONFIG}", db.config_with_short_lease());
    let mut nodes = leo_testkit::cluster::start(&config, 2).await;
    let (a, b) = (nodes.remove(0), nodes.remove(0));
    let app = serving(&b).await;
    let mut approvals = approver(&b).await;
    let agent = agent(&b).await;
    let call = agent.spawn_call("deploy", json!({"env": "prod"}));
    let asked = requested(&mut approvals).await;
    let id = asked["id"].as_str().unwrap().to_owned();
    // Killed once the park is committed (before that, the call would end `no_client` for its
    // harness, as any call lost with its leader).
    let pg = db.client().await;
    crate::support::eventually(|| async {
        let row = pg
            .query_opt("SELECT approval FROM live WHERE id = $1", &[&id])
            .await
            .unwrap();
        row.is_some_and(|r| r.get::<_, Option<String>>(0).is_some())
    })
    .await;
    drop((app, approvals));
    let _home_a = a.kill_keep_home().await;

    crate::support::eventually(|| async {
        let listed = b.http().try_get("/api/v1/approvals").await;
        listed.is_some_and(|r| r.status == 200 && r.data()["approvals"][0]["id"] == id.as_str())
    })
    .await;
    let mut app = serving(&b).await;
    app_saw_nothing(&mut app, &id).await;
    approved_with_leo_it_runs_once(&b, app, call, &id).await;
}
