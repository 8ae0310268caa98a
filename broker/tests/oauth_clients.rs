//! The pinned harness CLIs log in to `/mcp` by OAuth as a person would, then call an app's
//! tool with the token they stored: `codex mcp login`, `claude mcp login` and `opencode mcp
//! auth`, each with a throw-away `HOME`. Each CLI opens the authorization URL through
//! `$BROWSER` (a script here that writes it to a file); the test follows it, approves in the
//! console over HTTP as the operator would, and sends the browser's last redirect to the CLI's
//! own loopback callback. Claude Code and opencode refuse to log in without a terminal, so they
//! run under `script` (a pseudo-terminal); codex needs none. Each then runs against its scripted
//! model server (`harness-probe/clients/fake-*.mjs`), which asks for the tool once.

use std::path::Path;
use std::time::Duration;

use leo_testkit::cli_home::{CliHome, model_was_given};
use leo_testkit::{Broker, Http, WAIT, require};
use serde_json::json;

use crate::support::{App, Console};

const TOOL: &str = "oauth_check";
const REPLY: &str = "oauth check: the app answered";
/// The agent name the approver gives in the consent page.
const AGENT: &str = "by-oauth";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cli {
    Codex,
    Claude,
    Opencode,
}

/// `sh` lines that configure `cli` with the broker's `url`, without a token.
fn setup(cli: Cli, d: &Path, url: &str) -> String {
    let c = require::repo_root().join("harness-probe/clients");
    let (d, c) = (d.display(), c.display());
    match cli {
        Cli::Codex => format!(
            // What `codex mcp add leo --url URL` writes; that command would start the
            // login itself (it probes the URL and finds the 401's metadata), and the test
            // runs `codex mcp login` as its own step.
            r#"mkdir -p "{d}/codex-home" && printf '[mcp_servers.leo]\nurl = "{url}"\ntool_timeout_sec = 3600\n' >"{d}/codex-home/config.toml""#
        ),
        Cli::Claude => format!("claude mcp add --transport http leo {url}"),
        Cli::Opencode => format!(
            r#"printf '{{"mcp": {{"leo": {{"type": "remote", "url": "{url}", "enabled": true}}}}}}' >"{d}/in.json" && node "{c}/opencode-fake-config.mjs" "{d}/in.json" "{d}/opencode.json""#
        ),
    }
}

/// The CLI's login command; Claude Code's and opencode's in a pseudo-terminal.
fn login(cli: Cli, d: &Path) -> String {
    let d = d.display();
    match cli {
        Cli::Codex => format!(r#"CODEX_HOME="{d}/codex-home" exec codex mcp login leo"#),
        Cli::Claude => "exec script -qfec 'claude mcp login leo' /dev/null".to_owned(),
        Cli::Opencode => format!(
            r#"OPENCODE_CONFIG="{d}/opencode.json" exec script -qfec 'opencode mcp auth leo' /dev/null"#
        ),
    }
}

/// The CLI against its scripted model server, asking for the tool once.
fn run(cli: Cli, d: &Path) -> String {
    let c = require::repo_root().join("harness-probe/clients");
    let (d, c) = (d.display(), c.display());
    match cli {
        Cli::Codex => format!(
            r#"CODEX_HOME="{d}/codex-home" exec node "{c}/fake-openai.mjs" -- codex exec --skip-git-repo-check -C "{d}" -c model_provider=fake -c 'model_providers.fake={{name="fake",base_url="{{model_url}}",wire_api="responses",env_key="OPENAI_API_KEY"}}' -m fake-model -c approval_policy=never --dangerously-bypass-approvals-and-sandbox "Call the tool.""#
        ),
        Cli::Claude => format!(
            r#"ENABLE_TOOL_SEARCH=false exec node "{c}/fake-anthropic.mjs" -- claude -p "Call the tool." --allowedTools mcp__leo"#
        ),
        Cli::Opencode => format!(
            r#"exec node "{c}/fake-openai.mjs" -- sh -c "node '{c}/opencode-fake-config.mjs' '{d}/in.json' '{d}/opencode.json' && OPENCODE_CONFIG='{d}/opencode.json' exec opencode run 'Call the tool.'""#
        ),
    }
}

/// `lines` in `home` with `sh`, its output kept under `name`.
fn sh(home: &CliHome, lines: &str, name: &str) -> tokio::process::Command {
    let d = home.path();
    let mut cmd = home.command("sh");
    cmd.arg("-c")
        .arg(lines)
        .env("BROWSER", d.join("browser.sh"))
        .stdout(std::fs::File::create(d.join(format!("{name}.out"))).unwrap())
        .stderr(std::fs::File::create(d.join(format!("{name}.err"))).unwrap());
    cmd
}

/// What the CLI wrote in its step `name`.
fn output(home: &CliHome, name: &str) -> String {
    let read = |ext: &str| {
        std::fs::read_to_string(home.path().join(format!("{name}.{ext}"))).unwrap_or_default()
    };
    format!("{}{}", read("out"), read("err"))
}

/// `child` ends well within `limit`.
async fn ends_well(child: &mut tokio::process::Child, home: &CliHome, name: &str) {
    let status = tokio::time::timeout(WAIT * 4, child.wait())
        .await
        .unwrap_or_else(|_| panic!("{name} did not finish:\n{}", output(home, name)))
        .unwrap();
    assert!(status.success(), "{name}: {status}\n{}", output(home, name));
}

/// The URL the CLI asked `$BROWSER` to open.
async fn opened_url(home: &CliHome, login: &mut tokio::process::Child) -> String {
    let file = home.path().join("url.txt");
    let deadline = tokio::time::Instant::now() + WAIT * 4;
    loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if let Some(url) = text.lines().next().filter(|_| text.ends_with('\n')) {
            return url.trim().to_owned();
        }
        if let Ok(Some(status)) = login.try_wait() {
            panic!(
                "the login ended ({status}) without opening a browser:\n{}",
                output(home, "login")
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no browser was opened:\n{}",
            output(home, "login")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The person's part: follows `url` to the consent page, approves as [`AGENT`], and lets the
/// browser follow the redirect to the CLI's loopback callback. The client's name as the
/// consent page showed it.
async fn approve(broker: &Broker, url: &str) -> String {
    let base = format!("http://{}", broker.addr);
    let path = url
        .strip_prefix(&base)
        .unwrap_or_else(|| panic!("{url} is not on {base}"));
    let authorized = broker.http().with_token(None).get(path).await;
    assert_eq!(authorized.status, 303, "{authorized:?}");
    let page = authorized.header("location").unwrap().to_owned();
    let console = Console::login(broker).await;
    let shown = console.http.get(&page).await;
    assert_eq!(shown.status, 200, "{shown:?}");
    let html = shown.body.as_str().unwrap().to_owned();
    let name = html
        .split("<strong>")
        .nth(1)
        .and_then(|s| s.split("</strong>").next())
        .unwrap_or_else(|| panic!("no client name in {html}"))
        .to_owned();
    let r = console
        .post(&page, &json!({"approve": true, "agent": AGENT}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let back = r.data()["redirect"].as_str().unwrap().to_owned();
    // The browser's last step: the CLI's own callback on loopback.
    let rest = back
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{back}: not a loopback http callback"));
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let port: u16 = authority.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        authority.starts_with("127.0.0.1:") || authority.starts_with("localhost:"),
        "{back}"
    );
    let callback = Http::tcp(([127, 0, 0, 1], port).into(), None).with_host(authority);
    let answered = callback.get(path).await;
    assert_eq!(answered.status, 200, "{answered:?}");
    name
}

/// `cli` logs in through the console, then calls the app's tool over `/mcp` as the agent the
/// approver named; the grant is listed with the client's name.
async fn logs_in_and_calls_a_tool(cli: Cli) {
    let Some(home) = CliHome::new(None) else {
        return;
    };
    // codex and Claude Code prefer their Client ID Metadata Documents (on chatgpt.com and
    // claude.ai) where the broker supports them, which an offline broker cannot fetch: with
    // them off, each registers itself (RFC 7591), as it does with any broker that lacks them.
    let broker = Broker::start_with("auth:\n  metadata_documents: false\n").await;
    let mut app = App::connect(&broker.http()).await;
    app.register_ok("check", json!([leo_testkit::app::tool(TOOL)]))
        .await;
    let d = home.path();
    let browser = d.join("browser.sh");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$1\" >>'{}/url.txt'\n",
            d.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();

    let url = format!("http://{}/mcp", broker.addr);
    let mut added = sh(&home, &setup(cli, d, &url), "setup").spawn().unwrap();
    ends_well(&mut added, &home, "setup").await;
    let mut login = sh(&home, &login(cli, d), "login").spawn().unwrap();
    let opened = opened_url(&home, &mut login).await;
    let name = approve(&broker, &opened).await;
    ends_well(&mut login, &home, "login").await;

    let grants = broker.http().get("/api/v1/oauth/grants").await;
    let grant = &grants.data()["grants"][0];
    assert_eq!(grant["agent"], AGENT, "{grants:?}");
    assert_eq!(
        grant["client_name"].as_str(),
        Some(name.as_str()),
        "{grant}"
    );

    // codex is shown the fallback pair over `/mcp`, so its model calls through leo_app_call.
    let (tools, args) = match cli {
        Cli::Codex => (
            "leo_app_call",
            json!({"leo_app_call": {"tool": TOOL, "args": {}}}),
        ),
        _ => (TOOL, json!({})),
    };
    let mut child = sh(&home, &run(cli, d), "run")
        .env("HARNESS_PROBE_OUT", d.join("model.jsonl"))
        .env("HARNESS_PROBE_TOOLS", tools)
        .env("HARNESS_PROBE_ARGS", args.to_string())
        .env("HARNESS_PROBE_WATCH", "none")
        .env("HARNESS_PROBE_GRACE_MS", "0")
        .spawn()
        .unwrap();
    let call = app
        .next_request_within(WAIT * 4)
        .await
        .unwrap_or_else(|| panic!("{cli:?} called no tool:\n{}", output(&home, "run")));
    assert_eq!(call.data["tool"], TOOL, "{:?}", call.data);
    assert_eq!(call.data["agent"], AGENT, "{:?}", call.data);
    app.serve(
        call.data["id"].as_str().unwrap(),
        json!([{"type": "text", "text": REPLY}]),
    )
    .await;
    ends_well(&mut child, &home, "run").await;
    let (given, saw) = model_was_given(&d.join("model.jsonl"), REPLY);
    assert!(
        given,
        "{cli:?}: the model was not given the result: {saw:?}\n{}",
        output(&home, "run")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_mcp_login_then_calls_a_tool() {
    logs_in_and_calls_a_tool(Cli::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_mcp_login_then_calls_a_tool() {
    logs_in_and_calls_a_tool(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_mcp_auth_then_calls_a_tool() {
    logs_in_and_calls_a_tool(Cli::Opencode).await;
}
