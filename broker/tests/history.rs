//! The history of ended calls (`GET …/requests?state=ended`) and the audit trail
//! (`GET /api/v1/audit`): every outcome, paging and filters, who may see what, each bad
//! parameter by name, and that both survive a restart.

use leo_testkit::{Broker, Http, Sse};
use serde_json::{Value, json};

use crate::support::{App, agent, result_of, tool, tool_with_timeout};

const ENDED: &str = "/api/v1/client-tools/requests?state=ended";

/// An app whose stream carries `?name=`.
async fn named_app(http: &Http, name: &str) -> App {
    let path = format!("/api/v1/events?client_tools=1&name={name}");
    let mut sse = Sse::open(http, &path, None).await;
    let hello = sse.next().await;
    let id = hello.data["client_id"].as_str().unwrap().to_owned();
    let resume = hello.data["resume"].as_str().unwrap().to_owned();
    App {
        http: http.clone(),
        sse,
        id,
        resume,
    }
}

/// The ended calls `query` lists, once there are at least `n` of them.
async fn ended_at_least(http: &Http, query: &str, n: usize) -> Value {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let r = http.get(&format!("{ENDED}{query}")).await;
        assert_eq!(r.status, 200, "{r:?}");
        if r.data()["calls"].as_array().unwrap().len() >= n {
            return r.data().clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "only {r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn outcomes(list: &Value) -> Vec<&str> {
    list["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect()
}

/// A device token, paired before the broker starts.
async fn with_device(config: &str) -> (Broker, String) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    let (ok, out, err) = crate::security::leo(home.path(), &["device", "pair", "ipad"]).await;
    assert!(ok, "{err}");
    let device = out.lines().nth(1).unwrap().trim().to_owned();
    (Broker::start_in(home).await, device)
}

#[tokio::test]
async fn every_outcome_is_listed_newest_first_with_its_app_times_and_sizes() {
    let (broker, device) = with_device("history:\n  store_content: true\n").await;
    let http = broker.http();
    let mut app = named_app(&http, "Photo%20booth").await;
    app.register_ok("g", json!([tool("echo"), tool_with_timeout("slow", 1)]))
        .await;
    let mut ipc = agent(&broker, "rocket").await;

    // result, then an app error.
    ipc.call(1, "echo", json!({"text": "hi"})).await;
    let first = app.next_request_id().await;
    app.serve(&first, json!([{"type": "text", "text": "hi back"}]))
        .await;
    result_of(&mut ipc, 1).await;
    ipc.call(2, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.serve_error(&id, "forbidden_data", "no").await;
    result_of(&mut ipc, 2).await;
    // timeout (1 s), then the operator's cancel.
    ipc.call(3, "slow", json!({})).await;
    app.next_request_id().await;
    assert_eq!(outcome_code(&result_of(&mut ipc, 3).await), "timeout");
    ipc.call(4, "echo", json!({})).await;
    let id = app.next_request_id().await;
    http.post(
        &format!("/api/v1/client-tools/requests/{id}/cancel"),
        &json!({}),
    )
    .await
    .data();
    result_of(&mut ipc, 4).await;
    // A claimant that goes away no longer ends its calls: it may resume them, or they are
    // offered again after the grace period (see the ownership tests), so no `no_client` here.

    let list = ended_at_least(&http, "", 4).await;
    assert_eq!(outcomes(&list), ["cancelled", "timeout", "error", "result"]);
    let calls = list["calls"].as_array().unwrap();
    let seqs: Vec<u64> = calls.iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "{seqs:?}");
    assert_eq!(list["next_before"], Value::Null);

    let result = &calls[3];
    assert_eq!(result["id"], first.as_str());
    assert_eq!(result["tool"], "echo");
    assert_eq!(result["group"], "g");
    assert_eq!(result["agent"], "rocket");
    assert!(result["session"].is_string());
    assert_eq!(
        result["app"],
        json!({"client_id": app.id, "name": "Photo booth"})
    );
    assert_eq!(result["arguments_bytes"], r#"{"text":"hi"}"#.len());
    assert!(result["result_bytes"].as_u64().unwrap() > 10);
    let (wait, work, total) = (
        result["wait_ms"].as_u64().unwrap(),
        result["work_ms"].as_u64().unwrap(),
        result["duration_ms"].as_u64().unwrap(),
    );
    assert!(wait + work <= total + 1, "{result}");
    assert!(total < 60_000, "{result}");
    let (created, claimed, ended) = (
        result["created_at"].as_str().unwrap(),
        result["claimed_at"].as_str().unwrap(),
        result["ended_at"].as_str().unwrap(),
    );
    assert!(created <= claimed && claimed <= ended, "{result}");
    // The operator sees what was stored.
    assert_eq!(result["arguments"], json!({"text": "hi"}));
    assert_eq!(
        result["result"],
        json!({"content": [{"type": "text", "text": "hi back"}]})
    );

    let error = &calls[2];
    assert_eq!(error["error_code"], "forbidden_data");
    assert_eq!(error["reason"], Value::Null);
    assert_eq!(
        error["result"]["error"],
        json!({"code": "forbidden_data", "message": "no"})
    );
    let timeout = &calls[1];
    assert_eq!(timeout["reason"], "timeout");
    assert_eq!(timeout["app"], Value::Null);
    assert_eq!(timeout["claimed_at"], Value::Null);
    assert_eq!(timeout["result_bytes"], Value::Null);
    assert!(timeout["duration_ms"].as_u64().unwrap() >= 900, "{timeout}");
    assert_eq!(calls[0]["reason"], "cancelled_by_operator");

    // A device sees the history, never the contents.
    let r = http.with_token(Some(&device)).get(ENDED).await;
    let seen = r.data()["calls"].as_array().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|c| c.get("arguments").is_none()), "{r:?}");
    assert!(seen.iter().all(|c| c.get("result").is_none()), "{r:?}");
}

fn outcome_code(outcome: &Value) -> &str {
    outcome["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn pages_and_filters_and_no_contents_by_default() {
    let broker = Broker::start().await;
    let http = broker.http();
    let app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo"), tool("other")]))
        .await;
    let mut rocket = agent(&broker, "rocket").await;
    let mut scout = agent(&broker, "scout").await;
    let mut app = app;
    for n in 1..=4u64 {
        let (ipc, tool) = if n % 2 == 0 {
            (&mut scout, "other")
        } else {
            (&mut rocket, "echo")
        };
        ipc.call(n, tool, json!({"text": "secret"})).await;
        let id = app.next_request_id().await;
        if n == 4 {
            app.serve_error(&id, "nope", "no").await;
        } else {
            app.serve(&id, json!([{"type": "text", "text": "x"}])).await;
        }
        result_of(ipc, n).await;
    }
    let all = ended_at_least(&http, "", 4).await;
    // Not stored without `history.store_content`, so not shown even to the operator.
    for c in all["calls"].as_array().unwrap() {
        assert!(
            c.get("arguments").is_none() && c.get("result").is_none(),
            "{c}"
        );
        assert_eq!(c["arguments_bytes"], r#"{"text":"secret"}"#.len());
    }

    let page = http.get(&format!("{ENDED}&limit=3")).await;
    let page = page.data();
    assert_eq!(page["calls"].as_array().unwrap().len(), 3);
    let cursor = page["next_before"].as_u64().unwrap();
    assert_eq!(cursor, page["calls"][2]["seq"].as_u64().unwrap());
    let rest = http.get(&format!("{ENDED}&limit=3&before={cursor}")).await;
    let rest = rest.data();
    assert_eq!(rest["calls"].as_array().unwrap().len(), 1);
    assert_eq!(rest["calls"][0]["seq"], all["calls"][3]["seq"]);
    assert_eq!(rest["next_before"], Value::Null);

    let by_agent = http.get(&format!("{ENDED}&agent=scout")).await;
    assert_eq!(by_agent.data()["calls"].as_array().unwrap().len(), 2);
    let by_tool = http.get(&format!("{ENDED}&tool=echo")).await;
    let by_tool = by_tool.data()["calls"].as_array().unwrap().clone();
    assert_eq!(by_tool.len(), 2);
    assert!(by_tool.iter().all(|c| c["tool"] == "echo"));
    let errors = http
        .get(&format!("{ENDED}&outcome=error&agent=scout"))
        .await;
    assert_eq!(outcomes(errors.data()), ["error"]);
    let mut page = http
        .get(&format!("{ENDED}&limit=1&agent=rocket"))
        .await
        .data()
        .clone();
    for key in ["wait_ms", "work_ms", "duration_ms"] {
        page["calls"][0][key] = json!("<ms>");
    }
    leo_testkit::wire::check("http/history.response.json", &page);

    // `leo requests --ended`, as text and as JSON, with the same filters.
    let leo = |args: &'static [&'static str]| crate::security::leo(broker.home(), args);
    let (ok, out, err) = leo(&["requests", "--ended", "--agent", "scout"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("OUTCOME") && out.contains("error nope"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 3, "{out}");
    let (ok, out, err) = leo(&["requests", "--ended", "--json", "--limit", "1"]).await;
    assert!(ok, "{err}");
    let calls: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(calls[0]["outcome"], "error", "{out}");
    assert_eq!(calls.as_array().unwrap().len(), 1);
    let (ok, _, err) = leo(&["requests", "--ended", "--outcome", "won"]).await;
    assert!(!ok);
    assert!(
        err.contains("invalid_parameter") && err.contains("outcome"),
        "{err}"
    );
    let none = http.get(&format!("{ENDED}&outcome=timeout")).await;
    assert_eq!(none.data()["calls"], json!([]));
}

#[tokio::test]
async fn bad_parameters_are_refused_by_name_and_tokens_by_kind() {
    let broker = Broker::start().await;
    let http = broker.http();
    let cases = [
        ("&limit=0", "invalid_parameter", "\"limit\""),
        ("&limit=501", "invalid_parameter", "\"limit\""),
        ("&limit=ten", "invalid_parameter", "\"limit\""),
        ("&before=-1", "invalid_parameter", "\"before\""),
        ("&outcome=won", "invalid_parameter", "\"outcome\""),
        ("&tool=", "invalid_parameter", "\"tool\""),
        // U+0000, which the PostgreSQL store cannot hold, in a filter: refused as any bad one.
        ("&tool=%00", "invalid_parameter", "U+0000"),
        ("&agent=a%00b", "invalid_parameter", "\"agent\""),
        ("&pending=1", "unknown_parameter", "\"pending\""),
        ("&sort=asc", "unknown_parameter", "\"sort\""),
    ];
    for (query, code, name) in cases {
        let r = http.get(&format!("{ENDED}{query}")).await;
        assert_eq!(r.code(400), code, "{query}: {r:?}");
        assert!(r.error().contains(name), "{query}: {r:?}");
    }
    let r = http.get("/api/v1/client-tools/requests?state=done").await;
    assert_eq!(r.code(400), "invalid_parameter");
    assert!(r.error().contains("\"state\""), "{r:?}");
    for (query, code) in [
        ("?limit=0", "invalid_parameter"),
        ("?before=x", "invalid_parameter"),
        ("?tool=echo", "unknown_parameter"),
    ] {
        let r = http.get(&format!("/api/v1/audit{query}")).await;
        assert_eq!(r.code(400), code, "{query}: {r:?}");
    }

    let agent_http = http.with_token(Some(&broker.agent_token()));
    assert_eq!(agent_http.get(ENDED).await.code(403), "forbidden");
    assert_eq!(agent_http.get("/api/v1/audit").await.code(403), "forbidden");
    assert_eq!(
        http.with_token(None).get(ENDED).await.code(401),
        "unauthorized"
    );
    // `state=pending` is the live list.
    let r = http
        .get("/api/v1/client-tools/requests?state=pending")
        .await;
    assert_eq!(r.data(), &json!([]));
}

/// `rocket` calls `echo` on `broker` once, answered by an app of group `g`; its request id.
async fn one_answered_call(broker: &Broker) -> String {
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut ipc = agent(broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.serve(&id, json!([{"type": "text", "text": "x"}])).await;
    result_of(&mut ipc, 1).await;
    id
}

#[tokio::test]
async fn history_survives_a_kill_and_a_shutdown_ends_calls_into_it() {
    let broker = Broker::start().await;
    let http = broker.http();
    let id = one_answered_call(&broker).await;
    ended_at_least(&http, "", 1).await;

    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let http = broker.http();
    let list = ended_at_least(&http, "", 1).await;
    assert_eq!(list["calls"][0]["id"], id.as_str());

    // A call still parked at a clean stop ends `cancelled` (shutdown) and is written before
    // the broker exits.
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(2, "echo", json!({})).await;
    let parked = app.next_request_id().await;
    let (status, home) = broker.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    drop(ipc);
    let broker = Broker::start_in(home).await;
    let list = ended_at_least(&broker.http(), "", 2).await;
    assert_eq!(list["calls"][0]["id"], parked.as_str());
    assert_eq!(list["calls"][0]["reason"], "shutdown");
    let mode = std::fs::metadata(broker.home().join("state/history.db"))
        .unwrap()
        .permissions();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.mode() & 0o777, 0o600);
}

/// The actions of the audit trail, oldest first, as `principal kind action target`.
async fn trail(http: &Http, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let r = http.get("/api/v1/audit?limit=500").await;
        let entries = r.data()["entries"].as_array().unwrap().clone();
        if entries.len() >= n {
            return entries
                .iter()
                .rev()
                .map(|e| {
                    format!(
                        "{} {} {} {}",
                        e["principal"].as_str().unwrap(),
                        e["token_kind"].as_str().unwrap(),
                        e["action"].as_str().unwrap(),
                        e["target"].as_str().unwrap_or("-"),
                    )
                })
                .collect();
        }
        assert!(tokio::time::Instant::now() < deadline, "only {entries:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn every_authenticated_change_is_audited_with_principal_and_token_kind() {
    let (broker, device) = with_device("").await;
    let http = broker.http();
    let devhttp = http.with_token(Some(&device));
    let mut app = App::connect(&devhttp).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut changed = tool("echo");
    changed["description"] = json!("Echo, now louder");
    app.register_ok("g", json!([changed])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.serve(&id, json!([{"type": "text", "text": "x"}])).await;
    result_of(&mut ipc, 1).await;
    let r = http
        .post(
            "/web/agent/rocket/message",
            &json!({"text": "hello", "from": "ops"}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let console = crate::support::Console::login(&broker).await;
    let r = console
        .post("/console/ask-human", &json!({"on": true}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let refused = crate::support::Console::try_login(&http, &"0".repeat(64)).await;
    assert_eq!(refused.status, 401);
    let (ok, _, err) = crate::security::leo(
        broker.home(),
        &["client", "add", "scout", "--can-message", "rocket"],
    )
    .await;
    assert!(ok, "{err}");
    app.register_ok("g", json!([])).await;
    ipc.call(2, "echo", json!({})).await;
    let mut app2 = App::connect(&http).await;
    app2.register_ok("h", json!([tool("other")])).await;
    ipc.call(3, "other", json!({})).await;
    let last = app2.next_request_id().await;
    http.post(
        &format!("/api/v1/client-tools/requests/{last}/cancel"),
        &json!({}),
    )
    .await
    .data();

    let got = trail(&http, 13).await;
    let cid = &app.id;
    let want = [
        "device_pair ipad".to_owned(),
        "device:ipad device register g".into(),
        "device:ipad device definition_changed echo".into(),
        "device:ipad device register g".into(),
        format!("device:ipad device claim {id}"),
        format!("device:ipad device result {id}"),
        "operator operator message rocket".into(),
        "operator operator console_login -".into(),
        "console session ask_human_switch ask_human".into(),
        "unknown session console_login_refused -".into(),
        "client_add scout".into(),
        "device:ipad device withdraw g".into(),
        "operator operator register h".into(),
        format!("operator operator cancel {last}"),
    ];
    // The CLI's entries carry the local user: `cli:USER local ACTION NAME`.
    let got: Vec<String> = got
        .into_iter()
        .map(|line| match line.split_once(" local ") {
            Some((user, rest)) if user.starts_with("cli:") => rest.to_owned(),
            _ => line,
        })
        .collect();
    assert_eq!(got, want, "client {cid}");

    // The digest of the changed definition, and pages.
    let all = http.get("/api/v1/audit").await;
    let entries = all.data()["entries"].as_array().unwrap().clone();
    let digest = entries
        .iter()
        .find(|e| e["action"] == "definition_changed")
        .unwrap();
    assert!(digest["detail"].as_str().unwrap().starts_with("sha256:"));
    let page = http.get("/api/v1/audit?limit=1").await;
    let page = page.data().clone();
    leo_testkit::wire::check("http/audit.response.json", &page);
    let cursor = page["next_before"].as_u64().unwrap();
    let older = http
        .get(&format!("/api/v1/audit?limit=1&before={cursor}"))
        .await;
    assert_eq!(older.data()["entries"][0]["action"], "register");

    // `leo audit`: oldest first, like a log.
    let (ok, out, err) = crate::security::leo(broker.home(), &["audit", "--limit", "2"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains("operator (operator)  register  h"),
        "{out}"
    );
    assert!(lines[1].contains("cancel"), "{out}");
    let (ok, out, _) =
        crate::security::leo(broker.home(), &["audit", "--json", "--limit", "1"]).await;
    assert!(ok);
    let e: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(e["action"], "cancel");
}

#[tokio::test]
async fn agent_tokens_and_a_console_logout_are_audited() {
    let broker = Broker::start().await;
    let http = broker.http();
    for args in [["agent", "add", "scout"], ["agent", "rm", "scout"]] {
        let (ok, out, err) = crate::security::leo(broker.home(), &args).await;
        assert!(ok && !out.contains("Warning"), "{out}{err}");
    }
    // A refused change is not recorded.
    let (ok, _, _) = crate::security::leo(broker.home(), &["agent", "rm", "scout"]).await;
    assert!(!ok, "scout has no token of its own any more");
    let console = crate::support::Console::login(&broker).await;
    let r = console.post("/logout", &json!({})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    assert_eq!(
        trail(&http, 4).await,
        [
            format!("cli:{user} local agent_add scout"),
            format!("cli:{user} local agent_rm scout"),
            "operator operator console_login -".into(),
            "console session console_logout -".into(),
        ]
    );
}

#[tokio::test]
async fn leo_audit_follow_prints_new_entries() {
    let broker = Broker::start().await;
    let mut child = tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(["audit", "--follow"])
        .env("LEO_HOME", broker.home())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let app = App::connect(&broker.http()).await;
    app.register_ok("g", json!([tool("echo")])).await;
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(leo_testkit::WAIT, lines.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .unwrap();
    assert!(line.contains("register  g"), "{line}");
    child.kill().await.unwrap();
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn has_line(page: &str, line: &str) -> bool {
    page.lines().any(|l| l == line)
}

#[tokio::test]
async fn metrics_count_calls_refusals_and_live_state() {
    let port = free_port();
    let broker = Broker::start_with(&format!("metrics:\n  bind: 127.0.0.1:{port}\n")).await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let id = app.next_request_id().await;
    app.serve(&id, json!([{"type": "text", "text": "x"}])).await;
    result_of(&mut ipc, 1).await;
    ended_at_least(&http, "", 1).await;
    ipc.call(2, "nothing_here", json!({})).await;
    assert_eq!(outcome_code(&result_of(&mut ipc, 2).await), "no_client");
    ipc.call(3, "echo", json!({})).await;
    app.next_request_id().await;
    assert_eq!(http.get(&format!("{ENDED}&limit=0")).await.status, 400);

    let r = http.get("/metrics").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{r:?}"
    );
    let page = r.body.as_str().unwrap().to_owned();
    for line in [
        r#"leo_calls_total{tool="echo",outcome="result"} 1"#,
        "leo_call_duration_seconds_count 1",
        "leo_live_calls 1",
        "leo_connected_apps 1",
        "leo_connected_agents 1",
        "leo_sse_backlog_bytes 0",
        r#"leo_rejected_requests_total{door="ipc",code="no_client"} 1"#,
        r#"leo_rejected_requests_total{door="http",code="invalid_parameter"} 1"#,
        "# EOF",
    ] {
        assert!(has_line(&page, line), "{line:?} not in\n{page}");
    }
    assert!(
        page.contains("# TYPE leo_call_duration_seconds histogram"),
        "{page}"
    );

    // Only the operator's token, and no parameters.
    let device_less = http.with_token(Some(&broker.agent_token()));
    assert_eq!(device_less.get("/metrics").await.code(403), "forbidden");
    assert_eq!(
        http.with_token(None).get("/metrics").await.code(401),
        "unauthorized"
    );
    assert_eq!(
        http.get("/metrics?x=1").await.code(400),
        "unknown_parameter"
    );

    // `metrics.bind`: the same page without a token, and nothing else.
    let open = Http::tcp(([127, 0, 0, 1], port).into(), None);
    let r = open.get("/metrics").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(has_line(r.body.as_str().unwrap(), "leo_live_calls 1"));
    assert_eq!(open.get("/api/v1/status").await.code(404), "not_found");
    // And the probes, as on every listener.
    crate::support::readiness(&open, 200).await;
}

#[tokio::test]
async fn max_rows_keeps_the_newest_and_the_console_route_takes_only_a_login() {
    let broker = Broker::start_with("history:\n  max_rows: 2\n").await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    app.register_ok("g", json!([tool("echo")])).await;
    let mut ipc = agent(&broker, "rocket").await;
    let mut ids = Vec::new();
    for n in 1..=3u64 {
        ipc.call(n, "echo", json!({})).await;
        let id = app.next_request_id().await;
        app.serve(&id, json!([{"type": "text", "text": "x"}])).await;
        result_of(&mut ipc, n).await;
        ids.push(id);
    }
    let deadline = tokio::time::Instant::now() + leo_testkit::WAIT;
    loop {
        let r = http.get(ENDED).await;
        let got: Vec<String> = r.data()["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect();
        if got == [ids[2].clone(), ids[1].clone()] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got:?} of {ids:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let console = crate::support::Console::login(&broker).await;
    let r = console.http.get("/console/history").await;
    assert_eq!(r.data()["calls"].as_array().unwrap().len(), 2, "{r:?}");
    // The chart's hour, a minute a bar, counts the calls the history keeps.
    let minutes = r.data()["per_minute"].as_array().unwrap();
    assert_eq!(minutes.len(), 60, "{r:?}");
    let results: u64 = minutes.iter().map(|m| m["result"].as_u64().unwrap()).sum();
    assert_eq!(results, 2, "{r:?}");
    assert_eq!(
        console.http.get("/console/history?limit=1").await.code(400),
        "unknown_parameter"
    );
    assert_eq!(
        http.with_token(None)
            .get("/console/history")
            .await
            .code(401),
        "unauthorized"
    );
    assert_eq!(http.get("/console/history").await.code(403), "forbidden");
}

/// `leo audit verify` on `home`: its exit code and stdout.
async fn verify(home: &std::path::Path, json: bool) -> (Option<i32>, String) {
    let mut args = vec!["audit", "verify"];
    if json {
        args.push("--json");
    }
    let out = tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(&args)
        .env("LEO_HOME", home)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    (out.status.code(), stdout)
}

/// The trail chains as the broker and `leo` wrote it; an entry changed in the file by hand
/// (the broker stopped) is named, and so is the entry after one removed.
#[tokio::test]
async fn leo_audit_verify_passes_on_a_real_trail_and_names_an_entry_changed_in_the_file() {
    let broker = Broker::start().await;
    let http = broker.http();
    one_answered_call(&broker).await;
    // `leo` appends to the same chain beside the running broker.
    let (ok, _, err) = crate::security::leo(
        broker.home(),
        &["client", "add", "ci", "--can-message", "rocket"],
    )
    .await;
    assert!(ok, "{err}");
    http.post(
        "/web/agent/rocket/message",
        &json!({"text": "hi", "from": "ops"}),
    )
    .await
    .data();
    trail(&http, 5).await;
    let (code, out) = verify(broker.home(), false).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with("The audit trail chains: 5 entries"),
        "{out}"
    );
    let (code, out) = verify(broker.home(), true).await;
    assert_eq!(code, Some(0), "{out}");
    let verdict: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(verdict["verdict"], "chains", "{out}");
    assert_eq!(verdict["entries"], 5, "{out}");
    assert_eq!(verdict["head"].as_str().unwrap().len(), 64, "{out}");

    let (status, home) = broker.stop_keep_home().await;
    assert!(status.success(), "{status:?}");
    let file = rusqlite::Connection::open(home.path().join("state/history.db")).unwrap();
    let seq_of = |action: &str| -> i64 {
        file.query_row("SELECT seq FROM audit WHERE action = ?1", [action], |r| {
            r.get(0)
        })
        .unwrap()
    };
    let (claim, result) = (seq_of("claim"), seq_of("result"));
    let detail: String = file
        .query_row("SELECT detail FROM audit WHERE seq = ?1", [result], |r| {
            r.get(0)
        })
        .unwrap();
    file.execute(
        "UPDATE audit SET detail = 'someone else ok' WHERE seq = ?1",
        [result],
    )
    .unwrap();
    let (code, out) = verify(home.path(), false).await;
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.starts_with(&format!(
            "Audit entry #{result} does not chain: its content"
        )),
        "{out}"
    );
    let (_, out) = verify(home.path(), true).await;
    let verdict: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(verdict["seq"], result, "{out}");
    assert_eq!(verdict["why"], "changed", "{out}");

    // Put back, it chains again; the claim removed, the entry after it is named.
    file.execute(
        "UPDATE audit SET detail = ?1 WHERE seq = ?2",
        rusqlite::params![detail, result],
    )
    .unwrap();
    assert_eq!(verify(home.path(), false).await.0, Some(0));
    file.execute("DELETE FROM audit WHERE seq = ?1", [claim])
        .unwrap();
    let (code, out) = verify(home.path(), false).await;
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.starts_with(&format!(
            "Audit entry #{result} does not chain: it does not name"
        )),
        "{out}"
    );
}
