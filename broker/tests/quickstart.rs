//! The README's quickstart, as written: the commands between the `quickstart` markers run in
//! bash, in a fresh `HOME`, from an empty project directory. Nothing is retyped here, so the
//! page cannot drift from what works.
//!
//! Two things differ from a user's machine, both said in the README: the `cargo install` lines
//! are checked (each names a package of this workspace whose binary the test build made) and
//! replaced by putting that build on `PATH`, and `~/.leo/config.yaml` sets `web.port: 0` so the
//! broker does not take port 8370 from a developer's own. A `# …` line right after a command is
//! that command's expected output. Then the agent is started the way Claude Code would start it,
//! from the `.mcp.json` the quickstart wrote, and calls the tool.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leo_testkit::agent::{Agent, AgentOpts, text_of};
use leo_testkit::{WAIT, bin};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::Command;

/// What each `cargo install --path` of the quickstart must give.
const INSTALLS: [(&str, &str); 2] = [("cli", "leo"), ("mcp-sidecar", "leo-mcp")];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The fenced `sh` block between the markers.
fn quickstart_block() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let (_, rest) = readme
        .split_once("<!-- quickstart:begin -->")
        .expect("the README has a quickstart:begin marker");
    let (section, _) = rest
        .split_once("<!-- quickstart:end -->")
        .expect("the README has a quickstart:end marker");
    let body = section
        .trim()
        .strip_prefix("```sh\n")
        .and_then(|b| b.strip_suffix("```"))
        .expect("the quickstart is one ```sh block");
    body.to_owned()
}

/// The script to run, and the expected output lines in order.
fn prepare(block: &str) -> (String, Vec<String>) {
    let mut script = String::from("set -eu\n");
    let mut expected = Vec::new();
    let mut installed = Vec::new();
    let mut after_command = false;
    let mut in_heredoc: Option<String> = None;
    for line in block.lines() {
        if let Some(end) = &in_heredoc {
            if line == end {
                in_heredoc = None;
            }
            script.push_str(line);
            script.push('\n');
            continue;
        }
        if let Some(rest) = line.strip_prefix("cargo install --locked --path ") {
            let (dir, binary) = INSTALLS
                .iter()
                .find(|(dir, _)| *dir == rest.trim())
                .unwrap_or_else(|| panic!("unexpected install line: {line}"));
            // The package at that path is the one whose binary the line promises.
            let manifest = std::fs::read_to_string(repo().join(dir).join("Cargo.toml"))
                .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
            assert!(
                manifest.contains(&format!("name = \"{binary}\"")),
                "cargo install --path {dir} does not install {binary}"
            );
            assert!(bin(binary).is_file(), "{binary} is not built");
            installed.push(*binary);
            script.push_str(&format!(": installed by the test: {binary}\n"));
            after_command = false;
            continue;
        }
        if let Some(output) = line.strip_prefix("# ") {
            if after_command {
                expected.push(output.to_owned());
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            after_command = false;
            continue;
        }
        if let Some((_, tag)) = line.split_once("<<'") {
            in_heredoc = tag.split('\'').next().map(str::to_owned);
        }
        after_command = !line.ends_with('\\');
        script.push_str(line);
        script.push('\n');
    }
    assert_eq!(
        installed,
        ["leo", "leo-mcp"],
        "the quickstart installs both"
    );
    (script, expected)
}

/// Kills the quickstart's process group (its background broker and serve-tool) when dropped.
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0), Signal::SIGTERM);
    }
}

fn path_with_our_build() -> String {
    let ours = bin("leo");
    let dir = ours.parent().expect("the build directory");
    match std::env::var("PATH") {
        Ok(p) => format!("{}:{p}", dir.display()),
        Err(_) => dir.display().to_string(),
    }
}

#[tokio::test]
async fn the_readme_quickstart_runs_and_an_agent_calls_the_script() {
    let (script, expected) = prepare(&quickstart_block());
    assert_eq!(expected, ["It is sunny in Paris."]);

    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(home.path().join(".leo")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(home.path().join(".leo/config.yaml"), "web:\n  port: 0\n").unwrap();
    let stdout_path = home.path().join("quickstart.stdout");
    let stderr_path = home.path().join("quickstart.stderr");
    let path = path_with_our_build();

    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(&script)
        .current_dir(&project)
        .env("HOME", home.path())
        .env("PATH", &path)
        .env_remove("LEO_HOME")
        .env_remove("LEO_AGENT")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .process_group(0);
    let child = bash.spawn().expect("bash");
    let _group = Group(child.id().expect("bash pid") as i32);
    let status = tokio::time::timeout(WAIT * 3, child.wait_with_output())
        .await
        .expect("the quickstart did not finish")
        .expect("bash");
    let out = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        status.status.success(),
        "the quickstart failed\n--- script\n{script}\n--- stdout\n{out}\n--- stderr\n{err}"
    );
    // `leo broker` printed how to connect an app and an agent.
    for hint in [
        "leo serve-tool --name",
        "Connect an agent",
        "leo-mcp --agent claude",
    ] {
        assert!(
            out.contains(hint),
            "{hint:?} is not in the broker's banner:\n{out}"
        );
    }
    let mut rest = out.as_str();
    for line in &expected {
        let at = rest
            .find(line.as_str())
            .unwrap_or_else(|| panic!("{line:?} is not in the output:\n{out}"));
        rest = &rest[at + line.len()..];
    }

    // The agent, started as Claude Code would from the project's .mcp.json.
    let config: Value =
        serde_json::from_slice(&std::fs::read(project.join(".mcp.json")).unwrap()).unwrap();
    let server = &config["mcpServers"]["leo"];
    assert_eq!(server["type"], "stdio");
    let mut cmd = Command::new(server["command"].as_str().expect("a command"));
    for arg in server["args"].as_array().expect("args") {
        cmd.arg(arg.as_str().expect("a string argument"));
    }
    cmd.current_dir(&project)
        .env("HOME", home.path())
        .env("PATH", &path)
        .env_remove("LEO_HOME")
        .env_remove("LEO_AGENT");
    let agent = Agent::launch(
        cmd,
        &AgentOpts::auto("claude", "claude-code"),
        home.path().join("leo-mcp.stderr"),
    )
    .await;
    let tools = agent.tool_names().await;
    assert!(tools.iter().any(|t| t == "weather"), "{tools:?}");
    let result = agent.call("weather", json!({"city": "Lyon"})).await;
    assert_eq!(text_of(&result), "It is sunny in Lyon.");
    drop(agent);
    tokio::time::sleep(Duration::from_millis(10)).await;
}
