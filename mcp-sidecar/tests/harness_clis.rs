//! The real harness CLIs call an app's tool through `leo-mcp` as it starts by default (MCP
//! 2026-07-28 served beside `initialize`): `claude -p`, `codex exec` and `opencode run`, the
//! pinned versions of `testdata/harness-clis/`, each against a scripted model server on
//! loopback (`harness-probe/clients/fake-anthropic.mjs`, `fake-openai.mjs`) that asks for the
//! tool once, with a throw-away `HOME` and no account. The JSON-RPC lines each CLI sent are
//! kept, so the test also checks the lifecycle it settled on: Claude Code stays on 2026-07-28,
//! codex and opencode use `initialize`. Claude Code and opencode also call it over the broker's
//! `/mcp`, configured as their HTTP setup lines configure them (a URL and an
//! `Authorization: Bearer` header with the agent's own token).

use std::path::Path;

use leo_testkit::cli_home::CliHome;
use leo_testkit::{Broker, WAIT, bin, require};
use serde_json::{Value, json};

use crate::support::App;

/// The tool the app registers and the model asks for.
const TOOL: &str = "cli_check";
/// What the app answers; the model must be given it.
const REPLY: &str = "cli check: the app answered";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cli {
    Claude,
    Codex,
    Opencode,
}

/// How the CLI reaches Leo: `leo-mcp` launched through the wrapper script, or the broker's
/// `/mcp` with a bearer token.
enum Server {
    Stdio(std::path::PathBuf),
    Http { url: String, token: String },
}

/// `sh` lines that run `cli` against its scripted model server in `dir`, configured with its
/// HTTP setup (the fields `claude mcp add --transport http … --header`, `codex mcp add --url …
/// --bearer-token-env-var` and `opencode mcp add --url … --header` write, and codex's
/// `tool_timeout_sec`, which the docs add to its line).
fn http_script(cli: Cli, dir: &Path, url: &str, token: &str) -> String {
    let clients = require::repo_root().join("harness-probe/clients");
    let (d, c) = (dir.display(), clients.display());
    let auth = format!("Bearer {token}");
    match cli {
        Cli::Claude => format!(
            r#"printf '{{"mcpServers": {{"leo": {{"type": "http", "url": "{url}", "headers": {{"Authorization": "{auth}"}}}}}}}}' >"{d}/mcp.json"
ENABLE_TOOL_SEARCH=false exec node "{c}/fake-anthropic.mjs" -- claude -p "Call the tool." --mcp-config "{d}/mcp.json" --strict-mcp-config --allowedTools mcp__leo"#
        ),
        Cli::Opencode => format!(
            r#"printf '{{"mcp": {{"leo": {{"type": "remote", "url": "{url}", "headers": {{"Authorization": "{auth}"}}, "enabled": true}}}}}}' >"{d}/in.json"
exec node "{c}/fake-openai.mjs" -- sh -c "node '{c}/opencode-fake-config.mjs' '{d}/in.json' '{d}/opencode.json' && cd '{d}/proj' && OPENCODE_CONFIG='{d}/opencode.json' exec opencode run 'Call the tool.'""#
        ),
        Cli::Codex => format!(
            r#"mkdir -p "{d}/codex-home"
printf '[mcp_servers.leo]\nurl = "{url}"\nbearer_token_env_var = "LEO_AGENT_TOKEN"\ntool_timeout_sec = 3600\n' >"{d}/codex-home/config.toml"
export LEO_AGENT_TOKEN='{token}'
{}"#,
            codex_exec(dir)
        ),
    }
}

/// `codex exec` against the scripted model server, with its home in `dir/codex-home`.
fn codex_exec(dir: &Path) -> String {
    let clients = require::repo_root().join("harness-probe/clients");
    let (d, c) = (dir.display(), clients.display());
    format!(
        r#"CODEX_HOME="{d}/codex-home" exec node "{c}/fake-openai.mjs" -- codex exec --skip-git-repo-check -C "{d}" -c model_provider=fake -c 'model_providers.fake={{name="fake",base_url="{{model_url}}",wire_api="responses",env_key="OPENAI_API_KEY"}}' -m fake-model -c approval_policy=never --dangerously-bypass-approvals-and-sandbox "Call the tool.""#
    )
}

/// `sh` lines that run `claude -p PROMPT` against its scripted model server in `dir`, with
/// `wrap` as the MCP server command.
fn claude_script(dir: &Path, wrap: &Path, prompt: &str) -> String {
    let clients = require::repo_root().join("harness-probe/clients");
    let (d, w, c) = (dir.display(), wrap.display(), clients.display());
    format!(
        r#"printf '{{"mcpServers": {{"leo": {{"type": "stdio", "command": "{w}", "args": []}}}}}}' >"{d}/mcp.json"
ENABLE_TOOL_SEARCH=false exec node "{c}/fake-anthropic.mjs" -- claude -p "{prompt}" --mcp-config "{d}/mcp.json" --strict-mcp-config --allowedTools mcp__leo"#
    )
}

/// `sh` lines that run `cli` against its scripted model server in `dir`, with `wrap` as the
/// MCP server command.
fn script(cli: Cli, dir: &Path, wrap: &Path) -> String {
    let clients = require::repo_root().join("harness-probe/clients");
    let (d, w, c) = (dir.display(), wrap.display(), clients.display());
    match cli {
        Cli::Claude => claude_script(dir, wrap, "Call the tool."),
        Cli::Codex => format!(
            r#"mkdir -p "{d}/codex-home"
printf '[mcp_servers.leo]\ncommand = "{w}"\nstartup_timeout_sec = 30\n' >"{d}/codex-home/config.toml"
{}"#,
            codex_exec(dir)
        ),
        Cli::Opencode => format!(
            r#"printf '{{"mcp": {{"leo": {{"type": "local", "command": ["{w}"], "enabled": true}}}}}}' >"{d}/in.json"
exec node "{c}/fake-openai.mjs" -- sh -c "node '{c}/opencode-fake-config.mjs' '{d}/in.json' '{d}/opencode.json' && cd '{d}/proj' && OPENCODE_CONFIG='{d}/opencode.json' exec opencode run 'Call the tool.'""#
        ),
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `cli` calls the app's tool through a default `leo-mcp`; returns what the CLI sent leo-mcp
/// (`None` only when the CLIs are missing and `LEO_TEST_SKIP` allows it).
async fn calls_a_tool(cli: Cli) -> Option<Vec<Value>> {
    let home = CliHome::new(None)?;
    let broker = Broker::start().await;
    let wrap = wrapper(cli, &broker, home.path());
    calls_through(cli, &home, &broker, &Server::Stdio(wrap)).await;
    Some(lines(&home.path().join("in.jsonl")))
}

/// `cli` calls the app's tool through the broker's `/mcp`, with the agent's own token.
async fn calls_a_tool_over_http(cli: Cli) -> Option<Broker> {
    let home = CliHome::new(None)?;
    let broker = Broker::start().await;
    let server = Server::Http {
        url: format!("http://{}/mcp", broker.addr),
        token: broker.add_agent("cli"),
    };
    calls_through(cli, &home, &broker, &server).await;
    Some(broker)
}

/// The wrapper the CLI launches as `leo-mcp`: it keeps what the CLI sent in `in.jsonl`.
fn wrapper(cli: Cli, broker: &Broker, d: &Path) -> std::path::PathBuf {
    // codex does not re-list tools, so auto mode gives it the fallback tools; native mode
    // shows it the app's tool (registered before it starts). codex passes MCP servers only a
    // few variables, so the wrapper sets LEO_HOME itself.
    let mode = if cli == Cli::Codex {
        " --mode native"
    } else {
        ""
    };
    let wrap = d.join("wrap.sh");
    std::fs::write(
        &wrap,
        format!(
            "#!/bin/sh\nexport LEO_HOME='{}'\ntee -a '{}/in.jsonl' | exec '{}' --agent cli{mode} 2>>'{}/leo-mcp.log'\n",
            broker.home().display(),
            d.display(),
            bin("leo-mcp").display(),
            d.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrap, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrap
}

/// The CLI's `lines` in `home`, its model scripted to call `tools`.
fn spawn_cli(home: &CliHome, lines: &str, tools: &str) -> tokio::process::Child {
    cli_command(home, lines, tools).spawn().expect("sh")
}

/// [`spawn_cli`]'s command, not yet started.
fn cli_command(home: &CliHome, lines: &str, tools: &str) -> tokio::process::Command {
    let d = home.path();
    let mut cmd = home.command("sh");
    cmd.arg("-c")
        .arg(lines)
        .env("HARNESS_PROBE_OUT", d.join("model.jsonl"))
        .env("HARNESS_PROBE_TOOLS", tools)
        .env("HARNESS_PROBE_WATCH", "none")
        .env("HARNESS_PROBE_GRACE_MS", "0")
        .stdout(std::fs::File::create(d.join("cli.out")).unwrap())
        .stderr(std::fs::File::create(d.join("cli.err")).unwrap());
    cmd
}

/// `cli`, configured with `server`, calls the app's tool once; the model is given the answer.
async fn calls_through(cli: Cli, home: &CliHome, broker: &Broker, server: &Server) {
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("check", json!([leo_testkit::app::tool(TOOL)]))
        .await;
    let d = home.path();
    let lines_of = match server {
        Server::Stdio(wrap) => script(cli, d, wrap),
        Server::Http { url, token } => http_script(cli, d, url, token),
    };
    let mut child = spawn_cli(home, &lines_of, TOOL);
    let req = next_call(&mut app, home, cli).await;
    assert_eq!(req.data["tool"], TOOL, "{:?}", req.data);
    app.serve(
        req.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": REPLY}]),
    )
    .await;
    finished(&mut child, home, cli).await;
    let saw = lines(&d.join("model.jsonl"));
    assert!(
        saw.iter()
            .any(|r| r["event"] == "model_saw" && r.to_string().contains(REPLY)),
        "{cli:?}: the model was not given the result: {saw:?}\n{}",
        output(home)
    );
}

/// What the CLI and its `leo-mcp` wrote, for a failure's message.
fn output(home: &CliHome) -> String {
    let d = home.path();
    format!(
        "{}{}\n--- leo-mcp\n{}",
        std::fs::read_to_string(d.join("cli.out")).unwrap_or_default(),
        std::fs::read_to_string(d.join("cli.err")).unwrap_or_default(),
        std::fs::read_to_string(d.join("leo-mcp.log")).unwrap_or_default()
    )
}

/// The next call the app is offered. A CLI may take longer than one event wait to start on a
/// loaded machine.
async fn next_call(app: &mut App, home: &CliHome, cli: Cli) -> leo_testkit::SseEvent {
    let next = async {
        loop {
            match app.sse.next_or_end().await {
                Some(e) if e.event == "client_tool.request" => return e,
                Some(_) => {}
                None => panic!("the app's event stream ended"),
            }
        }
    };
    tokio::time::timeout(WAIT * 4, next)
        .await
        .unwrap_or_else(|_| panic!("{cli:?} called no tool:\n{}", output(home)))
}

/// The CLI ends, successfully.
async fn finished(child: &mut tokio::process::Child, home: &CliHome, cli: Cli) {
    let status = tokio::time::timeout(WAIT * 4, child.wait())
        .await
        .unwrap_or_else(|_| panic!("{cli:?} did not finish:\n{}", output(home)))
        .unwrap();
    assert!(status.success(), "{cli:?}: {status}\n{}", output(home));
}

/// A tool added while the CLI's session is open over `/mcp` reaches it (`list_changed`): the
/// model calls a first tool; while its call waits, an app adds the second; the model's next
/// turn is offered it, and calls it.
async fn sees_a_tool_added_over_http(cli: Cli) {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("check", json!([leo_testkit::app::tool("cli_first")]))
        .await;
    let url = format!("http://{}/mcp", broker.addr);
    let lines_of = http_script(cli, home.path(), &url, &broker.add_agent("cli"));
    let mut child = spawn_cli(&home, &lines_of, &format!("cli_first,{TOOL}"));
    let first = next_call(&mut app, &home, cli).await;
    assert_eq!(first.data["tool"], "cli_first", "{:?}", first.data);
    app.register_ok("more", json!([leo_testkit::app::tool(TOOL)]))
        .await;
    // The change reaches the CLI within the coalescing second; give it that and its re-list.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    app.serve(
        first.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": "first done"}]),
    )
    .await;
    let added = next_call(&mut app, &home, cli).await;
    assert_eq!(added.data["tool"], TOOL, "{:?}", added.data);
    app.serve(
        added.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": REPLY}]),
    )
    .await;
    finished(&mut child, &home, cli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_sees_a_tool_added_over_http() {
    sees_a_tool_added_over_http(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_sees_a_tool_added_over_http() {
    sees_a_tool_added_over_http(Cli::Opencode).await;
}

/// The protocol revision of the CLI's `tools/call`: its own `_meta` (2026-07-28) or the one
/// `initialize` offered.
fn revision(sent: &[Value]) -> String {
    let call = sent.iter().find(|m| m["method"] == "tools/call");
    let meta =
        call.and_then(|c| c["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str());
    let init = sent.iter().find(|m| m["method"] == "initialize");
    meta.or_else(|| init.and_then(|m| m["params"]["protocolVersion"].as_str()))
        .unwrap_or("none")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_calls_a_tool_on_2026_07_28() {
    let Some(sent) = calls_a_tool(Cli::Claude).await else {
        return;
    };
    assert!(sent.iter().any(|m| m["method"] == "server/discover"));
    assert_eq!(revision(&sent), "2026-07-28");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_calls_a_tool_on_initialize() {
    let Some(sent) = calls_a_tool(Cli::Codex).await else {
        return;
    };
    assert_eq!(revision(&sent), "2025-06-18");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_calls_a_tool_on_initialize() {
    let Some(sent) = calls_a_tool(Cli::Opencode).await else {
        return;
    };
    assert_eq!(revision(&sent), "2025-11-25");
}

/// `cli` calls the app's tool over `/mcp`, and the history names the agent its token opened.
async fn over_http_names_the_agent(cli: Cli) {
    let Some(broker) = calls_a_tool_over_http(cli).await else {
        return;
    };
    let history = broker
        .http()
        .get("/api/v1/client-tools/requests?state=ended")
        .await;
    assert_eq!(history.data()["calls"][0]["agent"], "cli", "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_calls_a_tool_over_http() {
    over_http_names_the_agent(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_calls_a_tool_over_http() {
    over_http_names_the_agent(Cli::Opencode).await;
}

/// codex re-lists no tools, so `/mcp` shows it the fallback pair, as `leo-mcp --mode auto`
/// does: its model is offered `leo_app_tools` and `leo_app_call`, not the app's tool, and
/// `leo_app_tools` names the app's tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_gets_the_fallback_tools_over_http() {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register_ok("check", json!([leo_testkit::app::tool(TOOL)]))
        .await;
    let url = format!("http://{}/mcp", broker.addr);
    let lines_of = http_script(Cli::Codex, home.path(), &url, &broker.add_agent("cli"));
    let mut child = spawn_cli(&home, &lines_of, "leo_app_tools");
    let status = tokio::time::timeout(WAIT * 4, child.wait())
        .await
        .expect("codex did not finish")
        .unwrap();
    let d = home.path();
    let out = std::fs::read_to_string(d.join("cli.err")).unwrap_or_default();
    assert!(status.success(), "{status}\n{out}");
    let saw = lines(&d.join("model.jsonl"));
    let offered: Vec<String> = saw
        .iter()
        .filter(|r| r["event"] == "model_offered")
        .flat_map(|r| r["tools_offered"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    let has = |name: &str| {
        offered
            .iter()
            .any(|n| n == name || n.ends_with(&format!("_{name}")))
    };
    assert!(has("leo_app_tools") && has("leo_app_call"), "{offered:?}");
    assert!(!has(TOOL), "{offered:?}");
    assert!(
        saw.iter()
            .any(|r| r["event"] == "model_saw" && r.to_string().contains(TOOL)),
        "leo_app_tools did not name the app's tool: {saw:?}"
    );
}

/// A call the app answers after 75 s completes over `/mcp`: the answer stream stays open
/// (its keep-alives pass the listener's 60 s idle timeout) and the CLI waits for it: Claude
/// Code and opencode (whose own timeout progress resets) as their setup lines configure them,
/// codex with `tool_timeout_sec` raised as the docs say (its default gives up after 60 s).
/// codex is shown the fallback pair over `/mcp`, so its model calls the app's tool through
/// `leo_app_call`.
async fn waits_75_s_for_a_call_over_http(cli: Cli) {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok(
        "check",
        json!([leo_testkit::app::tool_with_timeout(TOOL, 0)]),
    )
    .await;
    let url = format!("http://{}/mcp", broker.addr);
    let lines_of = http_script(cli, home.path(), &url, &broker.add_agent("cli"));
    let (tools, args) = match cli {
        Cli::Codex => (
            "leo_app_call",
            json!({"leo_app_call": {"tool": TOOL, "args": {}}}),
        ),
        _ => (TOOL, json!({})),
    };
    let mut child = cli_command(&home, &lines_of, tools)
        .env("HARNESS_PROBE_ARGS", args.to_string())
        .spawn()
        .expect("sh");
    let call = next_call(&mut app, &home, cli).await;
    assert_eq!(call.data["tool"], TOOL, "{:?}", call.data);
    let started = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(75)).await;
    app.serve(
        call.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": REPLY}]),
    )
    .await;
    finished(&mut child, &home, cli).await;
    assert!(started.elapsed().as_secs() >= 75);
    let saw = lines(&home.path().join("model.jsonl"));
    assert!(
        saw.iter()
            .any(|r| r["event"] == "model_saw" && r.to_string().contains(REPLY)),
        "{cli:?}: the model was not given the late result: {saw:?}\n{}",
        output(&home)
    );
}

/// The three CLIs wait side by side, each on a broker of its own, and Claude Code waits for an
/// approval beside them: the 75 s and the 70 s are wall time, not work, and tests of their own
/// would hold the suite's two test threads for minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cli_waits_75_s_for_a_call_over_http() {
    tokio::join!(
        waits_75_s_for_a_call_over_http(Cli::Claude),
        waits_75_s_for_a_call_over_http(Cli::Opencode),
        waits_75_s_for_a_call_over_http(Cli::Codex),
        waits_70_s_for_an_approval(),
    );
}

/// Claude Code calls, through the real `leo-mcp`, a tool its app registered with `approval:
/// "required"`; nobody decides for 70 s (the app is offered nothing meanwhile), then the operator
/// approves with `leo approve`; the app answers and the model is given the answer: `leo-mcp`'s
/// progress ("waiting for approval") kept Claude Code waiting.
async fn waits_70_s_for_an_approval() {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    let mut needs_approval = leo_testkit::app::tool(TOOL);
    needs_approval["approval"] = json!("required");
    app.register_ok("check", json!([needs_approval])).await;
    let mut approver = leo_testkit::Sse::open(&broker.http(), "/api/v1/events", None).await;
    let wrap = wrapper(Cli::Claude, &broker, home.path());
    let mut child = spawn_cli(
        &home,
        &claude_script(home.path(), &wrap, "Call the tool."),
        TOOL,
    );
    // A CLI may take longer than one event wait to start on a loaded machine.
    let asked = tokio::time::timeout(WAIT * 4, async {
        loop {
            match approver.next_or_end().await {
                Some(e) if e.event == "client_tool.approval_requested" => return e,
                Some(_) => {}
                None => panic!("the approver's event stream ended"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("Claude Code called no tool:\n{}", output(&home)));
    let id = asked.data["id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let offered = tokio::time::timeout(std::time::Duration::from_secs(70), async {
        loop {
            match app.sse.next_or_end().await {
                Some(e) if e.event.starts_with("client_tool.") => return e,
                Some(_) => {}
                None => panic!("the app's event stream ended"),
            }
        }
    })
    .await;
    assert!(offered.is_err(), "the app saw {offered:?} before approval");
    let approved = tokio::process::Command::new(bin("leo"))
        .args(["approve", &id])
        .env("LEO_HOME", broker.home())
        .output()
        .await
        .unwrap();
    assert!(approved.status.success(), "{approved:?}\n{}", output(&home));
    let req = next_call(&mut app, &home, Cli::Claude).await;
    assert_eq!(req.data["id"], id.as_str(), "{:?}", req.data);
    app.serve(&id, json!([{"type": "text", "text": REPLY}]))
        .await;
    finished(&mut child, &home, Cli::Claude).await;
    assert!(started.elapsed().as_secs() >= 70);
    let saw = lines(&home.path().join("model.jsonl"));
    assert!(
        saw.iter()
            .any(|r| r["event"] == "model_saw" && r.to_string().contains(REPLY)),
        "the model was not given the approved call's result: {saw:?}\n{}",
        output(&home)
    );
    let log = std::fs::read_to_string(home.path().join("in.jsonl")).unwrap_or_default();
    assert!(log.contains("tools/call"), "{log}");
}

/// Killing the harness cancels its call: Claude Code calls over `/mcp` a tool whose app claims
/// the call and holds it; the CLI's whole process group is killed (`SIGKILL`: nothing is said
/// to the broker, the connection just drops). The app hears the call cancelled by its agent,
/// its late answer is refused, and the history records the call cancelled, by its agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_claude_code_cancels_its_call_over_http() {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok(
        "check",
        json!([leo_testkit::app::tool_with_timeout(TOOL, 0)]),
    )
    .await;
    let url = format!("http://{}/mcp", broker.addr);
    let lines_of = http_script(Cli::Claude, home.path(), &url, &broker.add_agent("cli"));
    // A group of its own: the CLI, its scripted model server and whatever the CLI started.
    let mut child = cli_command(&home, &lines_of, TOOL)
        .process_group(0)
        .spawn()
        .expect("sh");
    let call = next_call(&mut app, &home, Cli::Claude).await;
    let id = call.data["id"].as_str().unwrap().to_owned();
    app.claim_ok(&id).await;
    let group = format!("-{}", child.id().expect("the CLI's pid"));
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &group])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL -- {group}");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the killed CLI is reaped")
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status}");

    let cancelled = app.next_cancelled().await;
    assert_eq!(cancelled.data["id"], id.as_str(), "{:?}", cancelled.data);
    assert_eq!(cancelled.data["reason"], "cancelled_by_agent");
    let late = app
        .answer(&id, json!([{"type": "text", "text": REPLY}]))
        .await;
    assert_eq!(late.code(409), "already_settled");
    let history = broker
        .http()
        .get("/api/v1/client-tools/requests?state=ended")
        .await;
    let ended = &history.data()["calls"][0];
    assert_eq!(ended["id"], id.as_str(), "{history:?}");
    assert_eq!(ended["agent"], "cli", "{ended}");
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    assert_eq!(ended["reason"], "cancelled_by_agent", "{ended}");
    assert!(ended["claimed_at"].is_string(), "{ended}");
}

/// An app's prompt and resource reach Claude Code's model through `leo-mcp`. In print mode
/// (`claude -p`) the pinned CLI runs an MCP prompt as its `/mcp__leo__NAME ARGS` command: it
/// sends `prompts/get` with the words after the command as the arguments, in order, and the
/// prompt's messages become the user's turn. It reads resources through its own tools,
/// `ListMcpResourcesTool` and `ReadMcpResourceTool` (the scripted model calls both). An
/// `@leo:URI` mention in a print-mode prompt is not expanded (no `resources/read` is sent and
/// the model gets the text as typed); the interactive input's `@` mentions need a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_gets_an_apps_prompt_and_resource() {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    let broker = Broker::start().await;
    crate::offers::serve_offers(&broker).await;
    let wrap = wrapper(Cli::Claude, &broker, home.path());
    let lines_of = claude_script(home.path(), &wrap, "/mcp__leo__greet Ada");
    let args = json!({"ListMcpResourcesTool": {"server": "leo"},
                      "ReadMcpResourceTool": {"server": "leo", "uri": "test://notes"}});
    let mut child = cli_command(&home, &lines_of, "ListMcpResourcesTool,ReadMcpResourceTool")
        .env("HARNESS_PROBE_ARGS", args.to_string())
        .spawn()
        .expect("sh");
    finished(&mut child, &home, Cli::Claude).await;
    let saw = lines(&home.path().join("model.jsonl"));
    let record = |event: &str, tool: Option<&str>| {
        saw.iter()
            .find(|r| r["event"] == event && tool.is_none_or(|t| r["tool"] == t))
            .map(Value::to_string)
            .unwrap_or_else(|| panic!("no {event} {tool:?}: {saw:?}\n{}", output(&home)))
    };
    let asked = record("model_asked", None);
    assert!(asked.contains("Say hello to Ada"), "{asked}");
    let listed = record("model_saw", Some("ListMcpResourcesTool"));
    assert!(listed.contains("test://pixel.png"), "{listed}");
    let read = record("model_saw", Some("ReadMcpResourceTool"));
    assert!(read.contains("text of test://notes"), "{read}");
    let sent = lines(&home.path().join("in.jsonl"));
    let get = sent.iter().find(|m| m["method"] == "prompts/get");
    assert_eq!(
        get.map(|m| &m["params"]["arguments"]),
        Some(&json!({"name": "Ada"})),
        "{sent:?}"
    );
}
