//! Every agent setup line a person is shown, run with the real harness CLI: the blocks between
//! the README's `setup:<harness>` markers and the lines the broker's banner prints, after the
//! README's `run-broker` block started it. Nothing is retyped here.
//!
//! The CLIs are the pinned `@anthropic-ai/claude-code`, `@openai/codex` and `opencode-ai` of
//! `testdata/harness-clis/` (`cargo xtask test` installs them). Each runs with a throw-away
//! `HOME` and no model: its own `mcp add` writes its config, its `mcp list` must show `leo`
//! (Claude Code and opencode start the server for that health check), and then the server the
//! config names is started as the harness would start it and must list the app's tool, which
//! proves the command and `LEO_HOME` it was given reach the broker.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use leo_testkit::agent::{Agent, AgentOpts, text_of};
use leo_testkit::cli_home::CliHome as Home;
use leo_testkit::{Http, WAIT, bin, require};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::{App, tool};

/// The tool the test's app registers; every harness's server must list it.
const TOOL: &str = "setup_line_check";

#[derive(Clone, Copy, Debug)]
enum Harness {
    Claude,
    Codex,
    Opencode,
}

impl Harness {
    /// The name in the README's markers and the CLI's name.
    fn key(self) -> &'static str {
        match self {
            Harness::Claude => "claude",
            Harness::Codex => "codex",
            Harness::Opencode => "opencode",
        }
    }

    /// The label of its line in the broker's banner.
    fn banner_label(self) -> &'static str {
        match self {
            Harness::Claude => "Claude Code:",
            Harness::Codex => "codex:",
            Harness::Opencode => "opencode:",
        }
    }

    /// The `clientInfo.name` the harness sends.
    fn client_name(self) -> &'static str {
        match self {
            Harness::Claude => "claude-code",
            Harness::Codex => "codex-mcp-client",
            Harness::Opencode => "opencode",
        }
    }
}

fn repo() -> PathBuf {
    require::repo_root()
}

/// The fenced block between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in README.md.
fn readme_block(name: &str) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let (_, rest) = readme
        .split_once(&begin)
        .unwrap_or_else(|| panic!("README.md has no {begin} marker"));
    let (section, _) = rest
        .split_once(&end)
        .unwrap_or_else(|| panic!("README.md has no {end} marker"));
    section
        .trim()
        .strip_prefix("```sh\n")
        .and_then(|b| b.strip_suffix("```"))
        .unwrap_or_else(|| panic!("{begin} must wrap one ```sh block"))
        .to_owned()
}

/// The commands of a block: its lines that are not comments or blank.
fn commands(block: &str) -> Vec<String> {
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// What the README's lines need beyond a `CliHome`: running them.
trait RunLines {
    async fn run(&self, lines: &[String]) -> String;
}

impl RunLines for Home {
    /// Runs `lines` in `sh -eu` in this home; returns stdout and stderr, failing on error.
    async fn run(&self, lines: &[String]) -> String {
        let script = format!("set -eu\n{}\n", lines.join("\n"));
        let out =
            tokio::time::timeout(WAIT * 6, self.command("sh").arg("-c").arg(&script).output())
                .await
                .unwrap_or_else(|_| panic!("did not finish in time:\n{script}"))
                .expect("sh");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "failed ({}):\n{script}\n--- output\n{text}",
            out.status
        );
        strip_ansi(&text)
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ … final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `mcp list` printed `leo` as healthy, in each CLI's words.
fn assert_listed(harness: Harness, out: &str) {
    let ok = out.lines().map(str::trim).any(|l| match harness {
        Harness::Claude => l.starts_with("leo:") && l.ends_with("Connected"),
        Harness::Codex => l.starts_with("leo ") && l.contains(" enabled"),
        Harness::Opencode => l.contains("leo") && l.ends_with("connected"),
    });
    assert!(
        ok,
        "{harness:?}: `mcp list` does not show leo healthy:\n{out}"
    );
}

/// `codex mcp get NAME --json`: codex keeps TOML, which this reads through codex itself.
async fn codex_get(home: &Home, name: &str) -> Value {
    let out = home
        .command("codex")
        .args(["mcp", "get", name, "--json"])
        .output()
        .await
        .expect("codex mcp get");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A harness's JSON config file (opencode's JSONC without comments reads as JSON).
fn read_json(p: PathBuf) -> Value {
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", p.display()))
}

/// The server the harness's own config names: program, arguments and environment.
async fn configured_server(harness: Harness, home: &Home) -> (String, Vec<String>, Value) {
    let read = read_json;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not a list: {v}"))
            .iter()
            .map(|s| s.as_str().expect("a string").to_owned())
            .collect()
    };
    match harness {
        Harness::Claude => {
            let s = read(home.path().join(".claude.json"))["mcpServers"]["leo"].clone();
            let cmd = s["command"].as_str().expect("command").to_owned();
            (cmd, strings(&s["args"]), s["env"].clone())
        }
        Harness::Codex => {
            let v = codex_get(home, "leo").await;
            let t = &v["transport"];
            let cmd = t["command"].as_str().expect("command").to_owned();
            (cmd, strings(&t["args"]), t["env"].clone())
        }
        Harness::Opencode => {
            let s = read(home.path().join(".config/opencode/opencode.jsonc"))["mcp"]["leo"].clone();
            assert_eq!(s["type"], "local", "{s}");
            let mut argv = strings(&s["command"]);
            let cmd = argv.remove(0);
            (cmd, argv, s["environment"].clone())
        }
    }
}

/// Starts the configured server as the harness would and checks it reaches the broker: the
/// app's tool is listed natively, or through `leo_app_tools` in fallback mode.
async fn assert_server_reaches_broker(harness: Harness, home: &Home) {
    let (program, args, env) = configured_server(harness, home).await;
    let mut cmd = home.command(&program);
    cmd.args(&args);
    for (k, v) in env.as_object().into_iter().flatten() {
        cmd.env(k, v.as_str().expect("an env value"));
    }
    let opts = AgentOpts::auto(harness.key(), harness.client_name());
    let agent = Agent::launch(cmd, &opts, home.path().join("leo-mcp.stderr")).await;
    let names = agent.tool_names().await;
    if !names.iter().any(|n| n == TOOL) {
        assert!(
            names.iter().any(|n| n == "leo_app_tools"),
            "{harness:?}: {program} {args:?} lists neither {TOOL} nor leo_app_tools: {names:?}"
        );
        let listed = text_of(&agent.call("leo_app_tools", json!({})).await);
        assert!(listed.contains(TOOL), "{harness:?}: {listed}");
    }
}

/// A broker started as `program args` in `leo_home` on a free port, with its banner.
struct Running {
    _child: Child,
    banner: Vec<String>,
    _app: App,
}

async fn start_broker(program: &Path, args: &[&str], leo_home: &Path, path_var: &str) -> Running {
    std::fs::create_dir_all(leo_home).expect("LEO_HOME");
    std::fs::write(leo_home.join("config.yaml"), "web:\n  port: 0\n").expect("config.yaml");
    let mut child = Command::new(program)
        .args(args)
        .env("LEO_HOME", leo_home)
        .env("PATH", path_var)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(leo_home.join("broker.stderr")).expect("log"))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut banner = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let last = line.trim_start().starts_with("then `claude mcp list`");
            banner.push(line);
            if last {
                return;
            }
        }
        panic!("the broker's banner ended early:\n{}", banner.join("\n"));
    })
    .await
    .unwrap_or_else(|_| panic!("no whole banner in time:\n{}", banner.join("\n")));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let addr = banner[0]
        .strip_prefix("leo broker listening on http://")
        .and_then(|a| a.trim().parse().ok())
        .unwrap_or_else(|| panic!("no address in {:?}", banner[0]));
    let token = std::fs::read_to_string(leo_home.join("state/operator.token")).expect("token");
    let app = App::connect(&Http::tcp(addr, Some(token.trim().to_owned()))).await;
    app.register("setup", json!([tool(TOOL)])).await.data();
    Running {
        _child: child,
        banner,
        _app: app,
    }
}

/// The README's block for `harness`, run as written with `leo-mcp` on PATH (the quickstart
/// installed it), against a broker on `~/.leo`.
async fn readme_lines_work(harness: Harness) {
    let lines = commands(&readme_block(&format!("setup:{}", harness.key())));
    let add = format!("{} mcp add ", harness.key());
    let list = format!("{} mcp list", harness.key());
    assert!(lines.iter().any(|l| l.starts_with(&add)), "{lines:?}");
    assert_eq!(lines.last(), Some(&list), "the block ends with {list}");
    let build = bin("leo-mcp").parent().expect("build dir").to_path_buf();
    let Some(home) = Home::new(Some(&build)) else {
        return;
    };
    let _broker = start_broker(
        &bin("leo"),
        &["broker"],
        &home.path().join(".leo"),
        home.path_var(),
    )
    .await;
    let out = home.run(&lines).await;
    assert_listed(harness, &out);
    assert_server_reaches_broker(harness, &home).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_claude_code_lines_work_with_claude_code() {
    readme_lines_work(Harness::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_codex_lines_work_with_codex() {
    readme_lines_work(Harness::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_opencode_lines_work_with_opencode() {
    readme_lines_work(Harness::Opencode).await;
}

/// The README's `run-broker` block: its build line builds both binaries, its run line starts
/// the broker that build made. Returns the run line's arguments after the program.
fn run_broker_block() -> Vec<String> {
    let lines = commands(&readme_block("run-broker"));
    let [build, run] = lines.as_slice() else {
        panic!("the run-broker block is a build line and a run line: {lines:?}");
    };
    let words: Vec<&str> = build.split_whitespace().collect();
    assert_eq!(&words[..2], ["cargo", "build"], "{build}");
    assert!(words.contains(&"--release"), "{build}");
    let packages: Vec<&str> = words
        .windows(2)
        .filter(|w| w[0] == "-p" || w[0] == "--package")
        .map(|w| w[1])
        .collect();
    for (package, binary) in [("leo-cli", "leo"), ("leo-mcp", "leo-mcp")] {
        assert!(
            packages.contains(&package),
            "{build} does not build {binary} (package {package})"
        );
    }
    let mut run_words = run.split_whitespace().map(str::to_owned);
    assert_eq!(
        run_words.next().as_deref(),
        Some("target/release/leo"),
        "{run}"
    );
    run_words.collect()
}

/// The broker as the README's first command starts it (the test's own build standing in for
/// `target/release`), with nothing of ours on PATH: every setup line its banner prints works as
/// printed, with each harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_banners_setup_lines_work_with_every_harness() {
    let args = run_broker_block();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(broker_home) = Home::new(None) else {
        return;
    };
    let leo_home = broker_home.path().join(".leo");
    let broker = start_broker(&bin("leo"), &args, &leo_home, broker_home.path_var()).await;
    let banner = broker.banner.join("\n");
    let leo_mcp = bin("leo-mcp").display().to_string();
    for harness in [Harness::Claude, Harness::Codex, Harness::Opencode] {
        let line = broker
            .banner
            .iter()
            .find_map(|l| l.trim().strip_prefix(harness.banner_label()))
            .unwrap_or_else(|| {
                panic!(
                    "no {} line in the banner:\n{banner}",
                    harness.banner_label()
                )
            })
            .trim()
            .to_owned();
        assert!(
            line.contains(&format!("-- {leo_mcp} --agent ")),
            "leo-mcp is not on PATH, so the banner must name it by its path: {line}"
        );
        let list = format!("{} mcp list", harness.key());
        assert!(banner.contains(&format!("`{list}`")), "{banner}");
        let home = Home::new(None).expect("the harness CLIs");
        let out = home.run(&[line, list]).await;
        assert_listed(harness, &out);
        assert_server_reaches_broker(harness, &home).await;
    }
    // The app lines name `leo` by the path the shell can run.
    let serve_tool = broker
        .banner
        .iter()
        .find(|l| l.contains(" serve-tool --name "))
        .unwrap_or_else(|| panic!("no serve-tool line:\n{banner}"));
    let program = serve_tool.split_whitespace().next().expect("a program");
    assert_eq!(program, bin("leo").display().to_string(), "{serve_tool}");
    let help = broker_home
        .command(program)
        .args(["serve-tool", "--help"])
        .output()
        .await
        .expect("leo");
    assert!(help.status.success(), "{serve_tool}");
}

/// The URL and token the remote setup lines are run with.
const REMOTE_URL: &str = "https://leo.internal:8370";

/// The entry `harness`'s own config holds for server `name`, as (transport, URL, how the token
/// is given): the header's value, or the variable codex reads it from.
async fn remote_entry(harness: Harness, home: &Home, name: &str) -> (String, String, String) {
    let read = read_json;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match harness {
        Harness::Claude => {
            let s = &read(home.path().join(".claude.json"))["mcpServers"][name];
            (
                text(&s["type"]),
                text(&s["url"]),
                text(&s["headers"]["Authorization"]),
            )
        }
        Harness::Codex => {
            let v = codex_get(home, name).await;
            let t = &v["transport"];
            (
                text(&t["type"]),
                text(&t["url"]),
                text(&t["bearer_token_env_var"]),
            )
        }
        Harness::Opencode => {
            let s = &read(home.path().join(".config/opencode/opencode.jsonc"))["mcp"][name];
            (
                text(&s["type"]),
                text(&s["url"]),
                text(&s["headers"]["Authorization"]),
            )
        }
    }
}

/// Runs the README's block `name` in a new offline home, with `REMOTE_URL` in `LEO_URL` and
/// `token` in `LEO_AGENT_TOKEN` as the README says; the home (`None` without the CLIs).
async fn run_remote_block(name: &str, token: &str) -> Option<Home> {
    let readme = commands(&readme_block(name));
    let home = Home::new(None)?;
    let mut script = vec![
        format!("export LEO_URL={REMOTE_URL}"),
        format!("export LEO_AGENT_TOKEN={token}"),
    ];
    script.extend(readme);
    home.run(&script).await;
    Some(home)
}

/// What `remote_entry` must read for `harness` after its line for `url` and `token`.
fn remote_wanted(harness: Harness, url: &str, token: &str) -> (String, String, String) {
    let (kind, auth) = match harness {
        Harness::Claude => ("http", format!("Bearer {token}")),
        Harness::Codex => ("streamable_http", "LEO_AGENT_TOKEN".to_owned()),
        Harness::Opencode => ("remote", format!("Bearer {token}")),
    };
    (kind.to_owned(), format!("{url}/mcp"), auth)
}

/// What `leo agent add far --remote REMOTE_URL` prints in a new home, and far's token.
fn agent_add_remote() -> (String, String) {
    let leo_home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin("leo"))
        .args(["agent", "add", "far", "--remote", REMOTE_URL])
        .env("LEO_HOME", leo_home.path())
        .output()
        .expect("leo agent add");
    assert!(out.status.success(), "{out:?}");
    let own = std::fs::read_to_string(leo_home.path().join("state/agents/far.token")).unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), own)
}

/// The README's remote line for `harness`, and the one `leo agent add NAME --remote URL`
/// prints, each run with the real CLI in an offline home: the CLI takes it and writes an HTTP
/// server entry with the broker's `/mcp` and the agent's token.
async fn remote_lines_work(harness: Harness) {
    let token = "0123456789abcdef".repeat(4);
    let Some(home) = run_remote_block(&format!("setup:remote-{}", harness.key()), &token).await
    else {
        return;
    };
    assert_eq!(
        remote_entry(harness, &home, "leo").await,
        remote_wanted(harness, REMOTE_URL, &token)
    );

    // The line the broker prints for a new agent with its own token.
    let (printed, own) = agent_add_remote();
    // Its line for this harness: `LABEL: <cli> mcp add …`, and for HTTP (not the leo-mcp one).
    let add = format!("{} mcp add ", harness.key());
    let line = printed
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(_, line)| line.trim()))
        .find(|l| l.starts_with(&add) && l.contains("/mcp"))
        .unwrap_or_else(|| panic!("no {harness:?} line in:\n{printed}"))
        .to_owned();
    let Some(home) = Home::new(None) else {
        return;
    };
    home.run(&[line]).await;
    assert_eq!(
        remote_entry(harness, &home, "leo").await,
        remote_wanted(harness, REMOTE_URL, own.trim())
    );
}

/// The lines without a token that `leo agent add NAME --remote URL` prints for OAuth: it says
/// the CLI will open a browser, and each CLI's line, run with the real CLI in an offline home,
/// writes an HTTP server entry with the broker's `/mcp` and no token at all (the login that
/// follows is `oauth_clients`'s test). Claude Desktop's connector is named with its URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oauth_lines_without_a_token_work_with_each_cli() {
    let (printed, own) = agent_add_remote();
    let (_, oauth) = printed
        .split_once("Or with no token at all, by OAuth")
        .unwrap_or_else(|| panic!("no OAuth lines in:\n{printed}"));
    assert!(oauth.contains("the CLI will open a browser"), "{oauth}");
    assert!(
        oauth.contains(&format!("Add custom connector, URL {REMOTE_URL}/mcp")),
        "{oauth}"
    );
    assert!(!oauth.contains(own.trim()), "{oauth}");
    for harness in [Harness::Claude, Harness::Codex, Harness::Opencode] {
        let label = harness.banner_label();
        let line = oauth
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|l| l.split("   (").next())
            .unwrap_or_else(|| panic!("no {harness:?} line in:\n{oauth}"))
            .trim()
            .to_owned();
        let Some(home) = Home::new(None) else {
            return;
        };
        home.run(&[line]).await;
        let (kind, url, auth) = remote_wanted(harness, REMOTE_URL, "");
        assert_eq!(
            remote_entry(harness, &home, "leo").await,
            (kind, url, String::new()),
            "{harness:?}: {auth:?} must be absent"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_lines_work_with_each_cli() {
    for harness in [Harness::Claude, Harness::Codex, Harness::Opencode] {
        remote_lines_work(harness).await;
    }
}

/// The README's `leo-mcp --url` line: Claude Code takes it and its entry starts `leo-mcp` with
/// the URL and the token in its environment and no `$LEO_HOME`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_leo_mcp_line_works_with_claude_code() {
    let token = "fedcba9876543210".repeat(4);
    let Some(home) = run_remote_block("setup:remote-leo-mcp", &token).await else {
        return;
    };
    let (program, args, env) = configured_server(Harness::Claude, &home).await;
    assert_eq!(program, "leo-mcp");
    assert_eq!(args, ["--agent", "scout"]);
    assert_eq!(
        env,
        json!({"LEO_URL": REMOTE_URL, "LEO_AGENT_TOKEN": token})
    );
}

/// `leo agent add NAME --remote https://…` on the home of a broker with `leo tls init`'s CA:
/// every printed line names the server `leo` as the README does and says how its harness trusts
/// that CA, and the printed `leo-mcp` line, run as Claude Code would run it, reaches the broker
/// over HTTPS. An `http://` URL gets no CA lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remote_lines_of_leo_agent_add_trust_the_brokers_ca() {
    let broker = leo_testkit::Broker::start_tls().await;
    let app = App::connect(&broker.http_unix()).await;
    app.register_ok("g", json!([tool(TOOL)])).await;
    let url = format!("https://localhost:{}", broker.addr.port());
    let add = |name: &str, url: &str| {
        let out = std::process::Command::new(bin("leo"))
            .args(["agent", "add", name, "--remote", url])
            .env("LEO_HOME", broker.home())
            .output()
            .expect("leo agent add");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let printed = add("far", &url);
    let ca = leo_testkit::tls::ca_file(broker.home());
    let ca = ca.display();
    for want in [
        format!("claude mcp add --transport http --scope user leo {url}/mcp "),
        format!("codex mcp add leo --url {url}/mcp "),
        format!("opencode mcp add leo --url {url}/mcp "),
        "[mcp_servers.leo]".to_owned(),
        format!("SSL_CERT_FILE={ca} in codex's environment"),
        format!("claude mcp add --transport stdio --scope user leo -e LEO_URL={url} "),
    ] {
        assert!(printed.contains(&want), "no {want:?} in:\n{printed}");
    }
    let node = format!("(and NODE_EXTRA_CA_CERTS={ca} in its environment)");
    assert_eq!(printed.matches(&node).count(), 2, "{printed}");

    // The leo-mcp line: its environment and command, run as the harness runs them.
    let line = printed
        .lines()
        .map(str::trim)
        .find(|l| l.contains("-- leo-mcp"))
        .unwrap_or_else(|| panic!("no leo-mcp line in:\n{printed}"));
    let (head, command) = line.split_once(" -- ").unwrap();
    assert_eq!(command, "leo-mcp --agent far");
    let words: Vec<&str> = head.split(' ').collect();
    let env: Vec<(&str, &str)> = words
        .windows(2)
        .filter(|w| w[0] == "-e")
        .map(|w| w[1].split_once('=').unwrap())
        .collect();
    let keys: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["LEO_URL", "LEO_AGENT_TOKEN", "LEO_CA_FILE"]);
    let mut opts = AgentOpts::native("far");
    for (k, v) in env {
        opts = opts.env(k, v);
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let agent = Agent::start(elsewhere.path(), opts).await;
    leo_testkit::agent::wait_for_tools(&agent, |names| names.iter().any(|n| n == TOOL)).await;

    let plain = add("near", "http://localhost:8370");
    for variable in ["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "LEO_CA_FILE"] {
        assert!(!plain.contains(variable), "{plain}");
    }
}
