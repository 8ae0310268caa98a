//! The operator CLI against the real broker: `leo status`, `leo requests` (once, as JSON and
//! following with `--watch`), `leo call`, and the Python example app in `examples/python/`.

use std::path::Path;
use std::process::{Output, Stdio};

use leo_testkit::{Broker, WAIT, bin};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::support::{App, agent, tool, tool_with_timeout};

/// `leo ARGS` with `LEO_HOME=home`, run to its end.
async fn leo(home: &Path, args: &[&str]) -> Output {
    let child = leo_cmd(home, args).stdin(Stdio::null()).output();
    tokio::time::timeout(WAIT, child)
        .await
        .expect("leo did not exit")
        .expect("run leo")
}

fn leo_cmd(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("leo"));
    cmd.args(args)
        .env("LEO_HOME", home)
        .env_remove("LEO_AGENT")
        .env_remove("NO_COLOR")
        .kill_on_drop(true);
    cmd
}

/// `leo ARGS --json`'s stdout, asserting exit 0.
async fn leo_json(home: &Path, args: &[&str]) -> Value {
    let out = leo(home, args).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The line of `text` that contains every one of `words`.
fn line_with<'a>(text: &'a str, words: &[&str]) -> &'a str {
    text.lines()
        .find(|l| words.iter().all(|w| l.contains(w)))
        .unwrap_or_else(|| panic!("no line with {words:?} in:\n{text}"))
}

/// The next line of a child's stdout, within the testkit's bound.
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("no line in time")
        .expect("read stdout")
        .expect("stdout ended")
}

#[tokio::test]
async fn status_shows_apps_agents_tools_by_group_and_pending_calls_with_age() {
    let broker = Broker::start().await;
    let home = broker.home();
    let empty = text(&leo(home, &["status"]).await.stdout);
    assert_eq!(empty.matches("\n  none\n").count(), 4, "{empty}");

    let mut app = App::connect(&broker.http()).await;
    app.register(
        "files",
        json!([tool_with_timeout("open_file", 60), tool("save_file")]),
    )
    .await
    .data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "open_file", json!({"text": "a.txt"})).await;
    let request = app.next_request().await.data;

    let s = leo_json(home, &["status", "--json"]).await;
    assert_eq!(s["revision"], 1);
    assert!(s["seq"].as_u64().unwrap() >= 2, "{s}");
    let a = &s["apps"][0];
    assert_eq!(
        (
            &a["client_id"],
            &a["principal"],
            &a["provider"],
            &a["groups"]
        ),
        (
            &json!(app.id),
            &json!("operator"),
            &json!(true),
            &json!(["files"])
        )
    );
    let agent = &s["agents"][0];
    assert_eq!(agent["agent"], "rocket");
    assert_eq!(agent["session"], "rocket-s1");
    assert_eq!(
        agent["harness"],
        json!({"name": "test-harness", "version": "1"})
    );
    assert_eq!(agent["mode"], "native");
    let group = &s["groups"][0];
    assert_eq!(group["group"], "files");
    assert_eq!(group["clients"], json!([app.id]));
    let tools: Vec<_> = group["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["timeout_s"].clone()))
        .collect();
    assert_eq!(
        tools,
        [("open_file", json!(60)), ("save_file", json!(600))],
        "by name, with the broker's default timeout"
    );
    let p = &s["pending"][0];
    assert_eq!(s["pending"].as_array().unwrap().len(), 1);
    assert_eq!(p["id"], request["id"]);
    assert_eq!(
        (&p["agent"], &p["tool"]),
        (&json!("rocket"), &json!("open_file"))
    );
    assert_eq!(p["state"], "parked");
    assert_eq!(p["arguments"], json!({"text": "a.txt"}));
    let (age, left) = (
        p["age_s"].as_u64().unwrap(),
        p["timeout_left_s"].as_u64().unwrap(),
    );
    assert_eq!(
        age + left,
        60,
        "the time left is the timeout less the age: {p}"
    );

    let out = leo(home, &["status"]).await;
    assert!(out.status.success());
    let t = text(&out.stdout);
    assert!(
        !t.contains('\x1b'),
        "no colour when stdout is not a terminal:\n{t}"
    );
    assert!(t.starts_with("leo broker · revision 1 · seq "), "{t}");
    assert!(
        t.contains("1 app · 1 agent · 2 tools · 1 pending call\n"),
        "{t}"
    );
    // An app that gave itself no name is shown as such, with the token it came with.
    let unnamed = "unnamed, operator token";
    line_with(
        &t,
        &[&app.id, unnamed, "operator", "provider", "ago", "files"],
    );
    line_with(
        &t,
        &["rocket", "rocket-s1", "test-harness 1", "native", "ago"],
    );
    let served = format!("{} ({unnamed})", app.id);
    line_with(
        &t,
        &["files", "open_file", "1m00s", &served, "The open_file tool"],
    );
    line_with(&t, &["save_file", "10m00s"]);
    line_with(&t, &["Pending calls (1)"]);
    line_with(
        &t,
        &[
            request["id"].as_str().unwrap(),
            "rocket",
            "open_file",
            "parked",
        ],
    );
}

#[tokio::test]
async fn status_and_requests_show_the_name_an_app_gave_itself() {
    let broker = Broker::start().await;
    let home = broker.home();
    let http = broker.http();
    let mut sse = leo_testkit::Sse::open(
        &http,
        "/api/v1/events?client_tools=1&name=Photo%20booth",
        None,
    )
    .await;
    let hello = sse.next().await.data;
    let id = hello["client_id"].as_str().unwrap().to_owned();
    let resume = hello["resume"].as_str().unwrap().to_owned();
    let mut app = App {
        http,
        sse,
        id,
        resume,
    };
    app.register("camera", json!([tool("snap")])).await.data();
    let call = spawn_call(home, &["snap"]);
    let request = app.next_request_id().await;
    app.claim(&request).await.data();

    let s = leo_json(home, &["status", "--json"]).await;
    assert_eq!(s["apps"][0]["name"], "Photo booth");
    assert_eq!(s["pending"][0]["claimed_by_name"], "Photo booth");
    let r = leo_json(home, &["requests", "--json"]).await;
    assert_eq!(r[0]["claimed_by"], json!(app.id));
    assert_eq!(r[0]["claimed_by_name"], "Photo booth");

    let t = text(&leo(home, &["status"]).await.stdout);
    line_with(&t, &["CLIENT", "NAME", "WHO"]);
    line_with(&t, &[&app.id, "Photo booth", "operator", "provider"]);
    line_with(
        &t,
        &["camera", "snap", &format!("{} (Photo booth)", app.id)],
    );
    let t = text(&leo(home, &["requests"]).await.stdout);
    line_with(
        &t,
        &[&request, &format!("claimed by Photo booth ({})", app.id)],
    );

    app.answer(&request, json!([])).await.data();
    assert_eq!(finish(call).await.status.code(), Some(0));
}

#[tokio::test]
async fn requests_lists_pending_calls_with_state_age_and_filters() {
    let broker = Broker::start().await;
    let home = broker.home();
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo"), tool_with_timeout("ask", 0)]))
        .await
        .data();
    let mut rocket = agent(&broker, "rocket").await;
    let mut scout = agent(&broker, "scout").await;
    rocket.call(1, "echo", json!({})).await;
    let first = app.next_request().await.data["id"].clone();
    scout.call(1, "ask", json!({"text": "ok?"})).await;
    let second = app.next_request().await.data["id"].clone();
    app.claim(first.as_str().unwrap()).await.data();

    let all = leo_json(home, &["requests", "--json"]).await;
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["id"], first, "oldest first");
    assert_eq!(all[0]["state"], "claimed");
    assert_eq!(all[0]["claimed_by"], json!(app.id));
    assert_eq!(all[1]["id"], second);
    assert_eq!(
        all[1]["timeout_left_s"],
        Value::Null,
        "timeout_s 0 never times out"
    );
    let only = leo_json(home, &["requests", "--json", "--agent", "scout"]).await;
    assert_eq!(only.as_array().unwrap().len(), 1);
    assert_eq!(only[0]["id"], second);
    let only = leo_json(home, &["requests", "--json", "--tool", "echo"]).await;
    assert_eq!(only.as_array().unwrap().len(), 1);
    assert_eq!(only[0]["id"], first);

    let t = text(&leo(home, &["requests"]).await.stdout);
    line_with(&t, &["ID", "AGENT", "TOOL", "STATE", "AGE", "TIMEOUT LEFT"]);
    line_with(
        &t,
        &[
            first.as_str().unwrap(),
            "rocket",
            "echo",
            &format!("claimed by {}", app.id),
        ],
    );
    line_with(
        &t,
        &[second.as_str().unwrap(), "scout", "ask", "parked", "never"],
    );
    let t = text(&leo(home, &["requests", "--agent", "nobody"]).await.stdout);
    assert_eq!(t, "no pending calls\n");
}

#[tokio::test]
async fn watch_json_follows_changes_and_survives_a_broker_restart() {
    let broker = Broker::start().await;
    let mut watch = leo_cmd(
        broker.home(),
        &["status", "--watch", "--json", "--interval", "0.2"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut errors = BufReader::new(watch.stderr.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(first["groups"], json!([]));
    let second: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(second["revision"], 0, "one object per line, every interval");

    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    loop {
        let s: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
        if s["revision"] == 1 {
            assert_eq!(s["groups"][0]["tools"][0]["name"], "echo");
            break;
        }
    }

    drop(app);
    let home = broker.kill_keep_home().await;
    // A GET cut short by the kill may be reported first; then the broker is not running.
    loop {
        let said = tokio::time::timeout(WAIT, errors.next_line()).await;
        let said = said.unwrap().unwrap().expect("stderr ended");
        assert!(said.ends_with("(retrying)"), "{said}");
        if said == "leo: broker not running (retrying)" {
            break;
        }
    }
    let broker = Broker::start_in(home).await;
    loop {
        let s: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
        if s["apps"] == json!([]) && s["revision"] == 0 {
            break;
        }
    }
    assert!(watch.try_wait().unwrap().is_none(), "still watching");
    watch.kill().await.unwrap();
    drop(broker);
}

/// `leo call` run in the background, with its output collected at the end.
fn spawn_call(home: &Path, args: &[&str]) -> Child {
    leo_cmd(home, &[&["call"], args].concat())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn finish(child: Child) -> Output {
    tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("leo call did not exit")
        .unwrap()
}

#[tokio::test]
async fn call_prints_text_blocks_as_text_and_other_blocks_as_json_lines() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let call = spawn_call(
        broker.home(),
        &["echo", r#"{"text": "hi"}"#, "--agent", "rocket"],
    );
    let request = app.next_request().await.data;
    assert_eq!(request["agent"], "rocket");
    assert_eq!(request["arguments"], json!({"text": "hi"}));
    let status = leo_json(broker.home(), &["status", "--json"]).await;
    assert_eq!(status["agents"][0]["harness"]["name"], "leo call");
    let image = json!({"type": "image", "data": "aGk=", "mimeType": "image/png"});
    let id = request["id"].as_str().unwrap();
    app.claim(id).await.data();
    app.answer(
        id,
        json!([{"type": "text", "text": "hello\nworld"}, image, {"type": "text", "text": "bye\n"}]),
    )
    .await
    .data();
    let out = finish(call).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("hello\nworld\n{image}\nbye\n"));

    // Without --agent: $LEO_AGENT, else `cli`.
    let call = spawn_call(broker.home(), &["echo"]);
    let request = app.next_request().await.data;
    assert_eq!(
        (&request["agent"], &request["arguments"]),
        (&json!("cli"), &json!({}))
    );
    app.claim(request["id"].as_str().unwrap()).await.data();
    app.answer(request["id"].as_str().unwrap(), json!([]))
        .await
        .data();
    assert_eq!(finish(call).await.status.code(), Some(0));
}

#[tokio::test]
async fn call_errors_exit_1_with_code_and_message() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let call = spawn_call(broker.home(), &["echo", "{}"]);
    let id = app.next_request_id().await;
    app.claim(&id).await.data();
    app.fail(&id, "access_denied", "the user said no")
        .await
        .data();
    let out = finish(call).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "access_denied: the user said no\n");
    assert!(out.stdout.is_empty());

    let out = leo(broker.home(), &["call", "nothing"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "no_client: no connected app serves tool \"nothing\"; tools served now: echo\n"
    );
    let out = leo(broker.home(), &["call", "echo", r#"{"text": 5}"#]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("invalid_arguments: at $.text: "),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn call_reports_a_refused_session_with_exit_2() {
    let broker = Broker::start().await;
    let out = leo(broker.home(), &["call", "echo", "--agent", "no spaces"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "leo call: the broker refused the session: invalid_frame: at $.agent: must be 1 to 64 of [A-Za-z0-9_.-]\n"
    );
}

#[tokio::test]
async fn call_timeout_and_ctrl_c_cancel_the_call() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();

    let call = spawn_call(broker.home(), &["echo", "--timeout", "0.5"]);
    let id = app.next_request().await.data["id"].clone();
    let cancelled = app.sse.next_of("client_tool.cancelled").await.data;
    assert_eq!(
        (&cancelled["id"], &cancelled["reason"]),
        (&id, &json!("cancelled_by_agent"))
    );
    let out = finish(call).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "timeout: no result within 0.5 s (the call was cancelled)\n"
    );

    let call = spawn_call(broker.home(), &["echo"]);
    let id = app.next_request().await.data["id"].clone();
    let pid = call.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let cancelled = app.sse.next_of("client_tool.cancelled").await.data;
    assert_eq!(
        (&cancelled["id"], &cancelled["reason"]),
        (&id, &json!("cancelled_by_agent"))
    );
    let out = finish(call).await;
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
}

#[tokio::test]
async fn call_refuses_bad_arguments_and_says_when_no_broker_runs() {
    let nowhere = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            r#"{text: "hi"}"#,
            "ARGS_JSON is not valid JSON: key must be a string at line 1 column 2",
        ),
        (
            "[1, 2]",
            "ARGS_JSON must be a JSON object such as '{\"text\": \"hi\"}', not an array",
        ),
        (
            "",
            "ARGS_JSON is not valid JSON: EOF while parsing a value at line 1 column 0",
        ),
    ] {
        let out = leo(nowhere.path(), &["call", "echo", args]).await;
        assert_eq!(out.status.code(), Some(2), "{args}");
        assert_eq!(text(&out.stderr), format!("leo call: {says}\n"));
    }
    let out = leo(nowhere.path(), &["call", "echo", "--timeout", "0"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--timeout"),
        "{}",
        text(&out.stderr)
    );

    // Never started here: no token. Started, then killed: the socket file is left, nobody listens.
    let out = leo(nowhere.path(), &["call", "echo"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("leo call: broker not running: no agent token at "));
    let home = Broker::start().await.kill_keep_home().await;
    for args in [&["call", "echo"][..], &["status"], &["requests", "--json"]] {
        let out = leo(home.path(), args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("broker not running (nothing listens on "),
            "{err}"
        );
        assert!(
            err.ends_with("; start it with `leo broker` (same LEO_HOME or --home)\n"),
            "says how to start it: {err}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = leo(nowhere.path(), &["status"]).await;
    assert!(
        text(&out.stderr).ends_with(" yet; start it with `leo broker` (same LEO_HOME or --home)\n"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn an_unknown_tool_suggests_the_closest_and_lists_only_what_the_agent_may_call() {
    let broker = Broker::start_with(
        "console:\n  ask_human: true\nagents:\n  rocket:\n    deny_tools: [ask_human]\n",
    )
    .await;
    let app = App::connect(&broker.http()).await;
    app.register("desk", json!([tool("read_clipboard"), tool("write_file")]))
        .await
        .data();
    let said = async |tool: &str, agent: &str| {
        let out = leo(broker.home(), &["call", tool, "--agent", agent]).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        text(&out.stderr)
    };
    assert_eq!(
        said("read_clipbaord", "rocket").await,
        "no_client: no connected app serves tool \"read_clipbaord\" (did you mean \
         \"read_clipboard\"?); tools served now: read_clipboard, write_file\n"
    );
    // The denied tool is neither suggested nor listed to the agent it is denied to.
    assert_eq!(
        said("ask_humn", "rocket").await,
        "no_client: no connected app serves tool \"ask_humn\"; tools served now: \
         read_clipboard, write_file\n"
    );
    assert_eq!(
        said("ask_humn", "scout").await,
        "no_client: no connected app serves tool \"ask_humn\" (did you mean \"ask_human\"?); \
         tools served now: ask_human, read_clipboard, write_file\n"
    );
}

#[tokio::test]
async fn the_home_flag_means_what_leo_home_means_before_or_after_the_command() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let dir = broker.home().to_str().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        &["--home", dir, "status", "--json"][..],
        &["status", "--json", "--home", dir],
    ] {
        // LEO_HOME points elsewhere: the flag wins.
        let out = leo(elsewhere.path(), args).await;
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(s["groups"][0]["group"], "g", "{args:?}");
    }
    let out = leo(elsewhere.path(), &["status"]).await;
    assert_eq!(out.status.code(), Some(2), "without the flag: LEO_HOME");
    let mut cmd = leo_cmd(elsewhere.path(), &["client", "list", "--home", dir]);
    let out = cmd.env_remove("LEO_HOME").output().await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test]
async fn cancel_ends_a_pending_call_as_the_operator_and_refuses_what_is_not_live() {
    let broker = Broker::start().await;
    let home = broker.home();
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let call = spawn_call(home, &["echo"]);
    let id = app.next_request_id().await;

    let out = leo(home, &["cancel", &id]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("cancelled {id}\n"));
    let event = app.sse.next_of("client_tool.cancelled").await.data;
    assert_eq!(
        (event["id"].as_str(), event["reason"].as_str()),
        (Some(id.as_str()), Some("cancelled_by_operator"))
    );
    let out = finish(call).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "cancelled: the operator cancelled the call\n"
    );

    let out = leo(home, &["cancel", &id]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "leo: the broker answered POST /api/v1/client-tools/requests/{id}/cancel with 409: already_settled: "
        )),
        "{err}"
    );
    let out = leo(home, &["cancel", "r_nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown_request"),
        "{}",
        text(&out.stderr)
    );
    for bad in ["../status", "foo", "r_"] {
        let out = leo(home, &["cancel", bad]).await;
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            text(&out.stderr).contains("is not a request id"),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
    let nowhere = tempfile::tempdir().unwrap();
    let out = leo(nowhere.path(), &["cancel", &id]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[tokio::test]
async fn status_passes_on_the_brokers_refusal() {
    let broker = Broker::start().await;
    // The broker read its tokens at start; a token file changed since is a wrong token.
    let path = broker.home().join("state/operator.token");
    std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
    for args in [&["status"][..], &["requests"]] {
        let out = leo(broker.home(), args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.starts_with("leo: the broker answered GET /api/v1/"),
            "{err}"
        );
        assert!(err.contains(" with 401: unauthorized: "), "{err}");
    }
}

#[tokio::test]
async fn the_python_example_serves_its_tools_and_comes_back_after_a_broker_restart() {
    // The test venv's interpreter (`cargo xtask test` makes it); the example needs only the
    // standard library.
    let Some(python) = leo_testkit::require::python(&[]) else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/leo_app.py");
    let lines = std::fs::read_to_string(&script).unwrap().lines().count();
    assert!(
        lines < 150,
        "the example is meant to stay under 150 lines, it has {lines}"
    );
    let broker = Broker::start().await;
    // The example logs to stderr; a failure shows that log.
    let log_file = tempfile::NamedTempFile::new().unwrap();
    let log = || std::fs::read_to_string(log_file.path()).unwrap_or_default();
    let mut example = Command::new(&python)
        .arg(&script)
        .env("LEO_HOME", broker.home())
        .stdout(Stdio::piped())
        .stderr(log_file.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(example.stdout.take().unwrap()).lines();
    let mut serving = async || match tokio::time::timeout(WAIT, stdout.next_line()).await {
        Ok(Ok(Some(line))) if line.starts_with("serving reverse_text, word_count as c_") => line,
        other => panic!(
            "the example does not serve ({other:?}); its log:\n{}",
            log()
        ),
    };
    let call = async |home: &Path, tool: &str, args: &str| {
        let out = leo(home, &["call", tool, args]).await;
        let err = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{err}\nthe example's log:\n{}",
            log()
        );
        text(&out.stdout)
    };

    let first = serving().await;
    let home = broker.home();
    assert_eq!(
        call(home, "reverse_text", r#"{"text": "stressed"}"#).await,
        "desserts\n"
    );
    assert_eq!(
        call(home, "word_count", r#"{"text": "one two\nthree"}"#).await,
        "3 words, 2 lines, 13 characters\n"
    );

    let home = broker.kill_keep_home().await;
    let broker = Broker::start_in(home).await;
    let again = serving().await;
    assert_eq!(
        again, first,
        "the same client_id after the restart: the SDK resumed with its key"
    );
    assert_eq!(
        call(broker.home(), "reverse_text", r#"{"text": "abc"}"#).await,
        "cba\n"
    );
    example.kill().await.unwrap();
}

/// The Python example running against `home`, its stdout lines and its log file.
fn start_example(
    python: &Path,
    home: &Path,
) -> (
    Child,
    Lines<BufReader<ChildStdout>>,
    tempfile::NamedTempFile,
) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/leo_app.py");
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut example = Command::new(python)
        .arg(&script)
        .env("LEO_HOME", home)
        .stdout(Stdio::piped())
        .stderr(log.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = BufReader::new(example.stdout.take().unwrap()).lines();
    (example, stdout, log)
}

#[tokio::test]
async fn the_python_example_names_itself_and_leaves_other_apps_calls_alone() {
    let Some(python) = leo_testkit::require::python(&[]) else {
        return;
    };
    let broker = Broker::start().await;
    let home = broker.home();
    let mut other = App::connect(&broker.http()).await;
    other
        .register("other", json!([tool("other_tool")]))
        .await
        .data();
    let (mut example, mut stdout, log_file) = start_example(&python, home);
    let log = || std::fs::read_to_string(log_file.path()).unwrap_or_default();
    let serving = tokio::time::timeout(WAIT, stdout.next_line()).await;
    assert!(
        matches!(&serving, Ok(Ok(Some(l))) if l.starts_with("serving ")),
        "{serving:?}\n{}",
        log()
    );

    // Every provider stream sees this call; only the app serving its group may take it.
    let call = spawn_call(home, &["other_tool"]);
    let id = other.next_request_id().await;
    other.claim(&id).await.data();
    other
        .answer(&id, json!([{"type": "text", "text": "theirs"}]))
        .await
        .data();
    assert_eq!(text(&finish(call).await.stdout), "theirs\n");
    // The example reads its events in order: once it has answered a later call of its own, it
    // has seen the other app's call, and must not have tried to claim it.
    let out = leo(home, &["call", "reverse_text", r#"{"text": "abc"}"#]).await;
    assert_eq!(
        text(&out.stdout),
        "cba\n",
        "{}\n{}",
        text(&out.stderr),
        log()
    );
    let log = log();
    assert!(!log.contains("not claimed"), "{log}");
    assert!(!log.contains("not_provider"), "{log}");

    let s = leo_json(home, &["status", "--json"]).await;
    let named: Vec<(Value, Value)> = s["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["groups"].clone(), a["name"].clone()))
        .collect();
    assert_eq!(
        named,
        [
            (json!(["other"]), Value::Null),
            (json!(["text"]), json!("leo_app.py"))
        ]
    );
    example.kill().await.unwrap();
}

#[tokio::test]
async fn call_wait_gives_a_script_time_to_start_the_broker_and_the_app() {
    // Started before the broker exists: the call waits for it, then for the tool.
    let home = tempfile::tempdir().unwrap();
    let call = spawn_call(home.path(), &["echo", r#"{"text": "hi"}"#, "--wait", "20"]);
    let broker = Broker::start_in(home).await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let id = app.next_request_id().await;
    app.claim(&id).await.data();
    app.answer(&id, json!([{"type": "text", "text": "waited"}]))
        .await
        .data();
    let out = finish(call).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "waited\n");

    // A tool nobody serves within the wait is the broker's no_client, exit 1.
    let out = leo(broker.home(), &["call", "missing", "--wait", "0.3"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("no_client: "),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn client_add_and_rm_change_only_their_entry_in_a_commented_config() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("config.yaml");
    // Comments everywhere, odd indents, flow style, quoting, a blank line, no final newline.
    let before = "# Leo settings for this laptop\n\
                  web:\n   port: 8371      # not the default\n   allowed_hosts: ['host.docker.internal']\n\
                  \n\
                  api_clients:            # who may message agents\n\
                  \u{20}   \"ci-bot\":  {can_message: [ \"ci-*\" ]}   # the CI runner\n\
                  \u{20}   # scout goes here later\n\
                  agents:\n  rocket: {deny_tools: []}\n# the end";
    std::fs::write(&path, before).unwrap();
    let out = leo(
        home.path(),
        &["client", "add", "scout", "--can-message", "rocket,scout-*"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let added = std::fs::read_to_string(&path).unwrap();
    let entry = "    \"scout\":\n        can_message: [\"rocket\", \"scout-*\"]\n";
    let at = before.find("    # scout goes here later").unwrap();
    assert_eq!(
        added,
        format!("{}{entry}{}", &before[..at], &before[at..]),
        "only the entry is new"
    );
    let listed = text(&leo(home.path(), &["client", "list"]).await.stdout);
    assert!(listed.contains("ci-bot\tcan_message: ci-*\t"), "{listed}");
    assert!(
        listed.contains("scout\tcan_message: rocket,scout-*\ttoken: present"),
        "{listed}"
    );

    let out = leo(home.path(), &["client", "rm", "scout"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        before,
        "back to the byte"
    );
    assert!(!home.path().join("config.yaml.bak").exists());

    // The last client removed: an empty mapping, the comment on its line kept.
    let out = leo(home.path(), &["client", "rm", "ci-bot"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let emptied = std::fs::read_to_string(&path).unwrap();
    assert!(
        emptied.contains("\napi_clients: {}            # who may message agents\n    # scout goes here later\nagents:"),
        "{emptied}"
    );
    assert_eq!(
        emptied.replace("api_clients: {}", "api_clients:"),
        before.replace(
            "    \"ci-bot\":  {can_message: [ \"ci-*\" ]}   # the CI runner\n",
            ""
        )
    );
}

/// A reader that goes away (`leo … | head -0`) ends every command with 0 and nothing on
/// stderr: the one broken-pipe rule of `leo`'s `main`, whichever way the command writes.
#[tokio::test]
async fn a_closed_stdout_is_success_for_every_command() {
    let broker = Broker::start().await;
    let home = broker.home();
    let commands: [&[&str]; 5] = [
        &["webhook", "list"],
        &["status"],
        &["requests", "--json"],
        &["client", "list"],
        &["completions", "bash"],
    ];
    for args in commands {
        let mut child = leo_cmd(home, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run leo");
        // Close the read end before leo writes: its first write fails with EPIPE.
        drop(child.stdout.take());
        let out = tokio::time::timeout(WAIT, child.wait_with_output())
            .await
            .expect("leo did not exit")
            .expect("wait for leo");
        assert_eq!(
            out.status.code(),
            Some(0),
            "leo {args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stderr), "", "leo {args:?}");
    }
}

/// `leo remote add|use|list|remove` and `leo --remote NAME`: an HTTPS broker saved with its
/// token and CA in another home is reached by name or as the remote in use, with nothing in the
/// environment; `--url` still wins; the saved token is 0600; removing the one in use goes back
/// to the local broker.
#[tokio::test]
async fn a_saved_remote_reaches_its_broker_by_name_and_when_in_use() {
    use std::os::unix::fs::PermissionsExt;
    let broker = Broker::start_tls().await;
    let elsewhere = tempfile::tempdir().unwrap();
    let home = elsewhere.path();
    let token_file = home.join("box.token");
    std::fs::write(&token_file, broker.operator_token()).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = format!("https://localhost:{}", broker.addr.port());
    let ca = leo_testkit::tls::ca_file(broker.home());
    let (tf, ca) = (token_file.to_str().unwrap(), ca.to_str().unwrap());
    let run = |args: &'static [&'static str]| leo(home, args);
    let ok = |out: &Output| {
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };

    ok(&leo(
        home,
        &["remote", "add", "box", &url, "--token-file", tf, "--ca", ca],
    )
    .await);
    let saved = home.join("remotes/box/token");
    let mode = std::fs::metadata(&saved).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", saved.display());
    std::fs::remove_file(&token_file).unwrap();
    let shown = ok(&run(&["--remote", "box", "status"]).await);
    assert!(shown.starts_with("leo broker · revision"), "{shown}");
    // Not in use yet: plain `leo status` is the local broker, which does not run here.
    assert_eq!(run(&["status"]).await.status.code(), Some(2));

    ok(&run(&["remote", "use", "box"]).await);
    assert!(ok(&run(&["status"]).await).starts_with("leo broker · revision"));
    assert_eq!(
        ok(&run(&["remote", "list"]).await),
        format!("* box  {url}  (own CA)\n")
    );
    // --url on the command line wins over the remote in use.
    let out = leo_cmd(home, &["--url", "http://127.0.0.1:1", "status"])
        .env("LEO_TOKEN", "t".repeat(40))
        .output()
        .await
        .unwrap();
    assert!(
        text(&out.stderr).contains("127.0.0.1:1"),
        "{}",
        text(&out.stderr)
    );

    for (args, code, want) in [
        (
            &["remote", "add", "x", "https://h:1", "--token-file", "/x"][..],
            1,
            "cannot read /x",
        ),
        (
            &[
                "remote",
                "add",
                "box",
                "https://h:1",
                "--token-file",
                &saved.to_string_lossy(),
            ],
            1,
            "saved already",
        ),
        (
            &["remote", "add", "..", "https://h:1", "--token-file", "/x"],
            2,
            "remote name",
        ),
        (
            &["--remote", "nope", "status"],
            2,
            "no remote named \"nope\"",
        ),
        (&["--remote", "box", "call", "t"], 2, "--remote applies to"),
    ] {
        let out = leo(home, args).await;
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }

    ok(&run(&["remote", "remove", "box"]).await);
    assert_eq!(run(&["status"]).await.status.code(), Some(2));
    assert!(ok(&run(&["remote", "list"]).await).starts_with("no saved remote"));
}
