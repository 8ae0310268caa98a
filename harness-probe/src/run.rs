//! `harness-probe run -- <client command…>`: starts a client that launches the probe, waits,
//! and turns the records into a verdict file and one line per probe session.
//!
//! The client learns how to launch the probe from the environment and from config files written
//! into the run directory, in each harness's own format:
//!
//! | env | placeholder | what |
//! |---|---|---|
//! | `HARNESS_PROBE_BIN` | `{bin}` | this binary |
//! | `HARNESS_PROBE_OUT` | `{out}` | the record file (`serve` reads it when `--out` is absent) |
//! | `HARNESS_PROBE_DIR` | `{dir}` | the run directory |
//! | `HARNESS_PROBE_MCP_CONFIG` | `{mcp_config}` | `{"mcpServers":{"probe":…}}` (Claude Code `--mcp-config`, Cursor, Gemini) |
//! | `HARNESS_PROBE_OPENCODE_CONFIG` | `{opencode_config}` | `opencode.json` with `"mcp":{"probe":…}` (use as `OPENCODE_CONFIG`) |
//! | `HARNESS_PROBE_CODEX_HOME` | `{codex_home}` | a directory with `config.toml` `[mcp_servers.probe]` (use as `CODEX_HOME`) |
//! | `HARNESS_PROBE_GRACE_MS` | | how long a client must stay after the notification for a `no` |
//! | `HARNESS_PROBE_NOTIFY_DELAY_MS` | | how long `serve` waits after the first `tools/list` |
//!
//! Placeholders are replaced in the command's arguments.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::record::{self, unix_ms, utc_date};
use crate::verdict::{self, ClientId, Honors, SessionVerdict};

/// Whether a verdict is about a harness (it goes into the capability table) or about a
/// reference client (an SDK driven by a script in `harness-probe/clients/`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Harness,
    Sdk,
}

/// A verdict file, as `run` writes it and `table` reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerdictFile {
    pub version: u32,
    pub kind: Kind,
    /// Human name of what was measured.
    pub harness: String,
    /// The `clientInfo.name` pattern for the table; absent means the client's name.
    #[serde(default)]
    pub pattern: Option<String>,
    /// How the client was driven, in words.
    pub how: String,
    /// The command as given, placeholders unexpanded.
    pub command: Vec<String>,
    pub date: String,
    pub grace_ms: u64,
    /// How long after the client's first `tools/list` the probe changed its tools.
    pub notify_delay_ms: u64,
    pub timeout_s: u64,
    pub client_exit: String,
    pub honors_list_changed: Honors,
    pub client: Option<ClientId>,
    pub latency_ms: Option<u64>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_output_tail: Vec<String>,
    pub sessions: Vec<SessionVerdict>,
}

/// Options of `run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub timeout: Duration,
    pub grace: Duration,
    pub dir: Option<PathBuf>,
    pub verdict: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub harness: Option<String>,
    pub pattern: Option<String>,
    pub how: Option<String>,
    pub notify_delay_ms: u64,
    pub kind: Kind,
    pub command: Vec<String>,
}

/// The files a run gives its client.
struct Prepared {
    dir: PathBuf,
    out: PathBuf,
    mcp_config: PathBuf,
    opencode_config: PathBuf,
    codex_home: PathBuf,
}

fn prepare(dir: &Path, bin: &Path, notify_delay_ms: u64) -> anyhow::Result<Prepared> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let out = dir.join("records.jsonl");
    let bin_s = bin.to_string_lossy().into_owned();
    let out_s = out.to_string_lossy().into_owned();
    let delay = notify_delay_ms.to_string();
    let args = json!(["serve", "--out", out_s, "--notify-delay-ms", delay]);
    let env = json!({"HARNESS_PROBE_OUT": out_s});
    let mcp_config = dir.join("mcp.json");
    let mcp = json!({"mcpServers": {"probe": {"type": "stdio", "command": bin_s, "args": args, "env": env}}});
    std::fs::write(&mcp_config, serde_json::to_string_pretty(&mcp)? + "\n")?;
    let opencode_config = dir.join("opencode.json");
    let opencode = json!({
        "$schema": "https://opencode.ai/config.json",
        "mcp": {"probe": {"type": "local", "command": [bin_s, "serve", "--out", out_s, "--notify-delay-ms", delay], "enabled": true, "environment": env}}
    });
    std::fs::write(
        &opencode_config,
        serde_json::to_string_pretty(&opencode)? + "\n",
    )?;
    let codex_home = dir.join("codex-home");
    std::fs::create_dir_all(&codex_home)?;
    // JSON string escapes are valid TOML basic-string escapes.
    let toml = format!(
        "[mcp_servers.probe]\ncommand = {}\nargs = [\"serve\", \"--out\", {}, \"--notify-delay-ms\", \"{delay}\"]\nstartup_timeout_sec = 30\n\n[mcp_servers.probe.env]\nHARNESS_PROBE_OUT = {}\n",
        serde_json::to_string(&bin_s)?,
        serde_json::to_string(&out_s)?,
        serde_json::to_string(&out_s)?,
    );
    std::fs::write(codex_home.join("config.toml"), toml)?;
    Ok(Prepared {
        dir,
        out,
        mcp_config,
        opencode_config,
        codex_home,
    })
}

fn expand(arg: &str, p: &Prepared, bin: &Path) -> String {
    arg.replace("{bin}", &bin.to_string_lossy())
        .replace("{out}", &p.out.to_string_lossy())
        .replace("{dir}", &p.dir.to_string_lossy())
        .replace("{mcp_config}", &p.mcp_config.to_string_lossy())
        .replace("{opencode_config}", &p.opencode_config.to_string_lossy())
        .replace("{codex_home}", &p.codex_home.to_string_lossy())
}

/// Sends `signal` to the process group `pgid` (the client and everything it started).
fn kill_group(pgid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([format!("-{signal}"), "--".into(), format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Runs the client, then judges. Returns the verdict file it wrote and where.
#[allow(
    clippy::too_many_lines,
    reason = "a measurement or probe script read top to bottom; not split yet"
)]
pub async fn run(options: RunOptions) -> anyhow::Result<(VerdictFile, PathBuf)> {
    let started = unix_ms();
    let bin = std::env::current_exe()
        .context("locating this binary")?
        .canonicalize()?;
    let dir = match &options.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("harness-probe-{started}")),
    };
    let prepared = prepare(&dir, &bin, options.notify_delay_ms)?;
    tracing::info!(dir = %prepared.dir.display(), "run directory (records, generated configs)");
    let Some((program, args)) = options.command.split_first() else {
        anyhow::bail!("no client command given (harness-probe run -- <command…>)");
    };
    let grace_ms = u64::try_from(options.grace.as_millis()).unwrap_or(u64::MAX);
    let mut cmd = tokio::process::Command::new(expand(program, &prepared, &bin));
    cmd.args(args.iter().map(|a| expand(a, &prepared, &bin)))
        .env("HARNESS_PROBE_BIN", &bin)
        .env("HARNESS_PROBE_OUT", &prepared.out)
        .env("HARNESS_PROBE_DIR", &prepared.dir)
        .env("HARNESS_PROBE_MCP_CONFIG", &prepared.mcp_config)
        .env("HARNESS_PROBE_OPENCODE_CONFIG", &prepared.opencode_config)
        .env("HARNESS_PROBE_CODEX_HOME", &prepared.codex_home)
        .env("HARNESS_PROBE_GRACE_MS", grace_ms.to_string())
        .env(
            "HARNESS_PROBE_NOTIFY_DELAY_MS",
            options.notify_delay_ms.to_string(),
        )
        .kill_on_drop(true);
    if let Some(log) = &options.log {
        let file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdout(file.try_clone()?)
            .stderr(file)
            .stdin(Stdio::null());
    }
    // An interactive harness needs the terminal's foreground process group; anything else gets
    // its own group, so a timeout ends the client and everything it started.
    let own_group = options.log.is_some() || !std::io::IsTerminal::is_terminal(&std::io::stdin());
    if own_group {
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
    let pid = child.id();
    let exit = tokio::select! {
        status = child.wait() => match status {
            Ok(s) => format!("exited with {s}"),
            Err(e) => format!("wait failed: {e}"),
        },
        _ = tokio::time::sleep(options.timeout) => "still running at the timeout; stopped".to_owned(),
        _ = tokio::signal::ctrl_c() => "interrupted (Ctrl-C); stopped".to_owned(),
    };
    if let Some(pid) = pid {
        if own_group {
            kill_group(pid, "TERM");
            let waited = tokio::time::timeout(Duration::from_secs(3), child.wait()).await;
            if waited.is_err() {
                kill_group(pid, "KILL");
            }
        } else {
            let _ = child.start_kill();
        }
        let _ = tokio::time::timeout(Duration::from_secs(3), child.wait()).await;
        if own_group {
            // Whatever the client left behind in its group (a daemon, a language server).
            kill_group(pid, "KILL");
        }
    }
    // Let every probe session record its end (the client's exit closes their stdin).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (records, _) = record::read(&prepared.out)?;
        let open = sessions_open(&records);
        if open == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (records, skipped) = record::read(&prepared.out)?;
    if skipped > 0 {
        tracing::warn!(skipped, "skipped malformed record lines");
    }
    let sessions = verdict::judge(&records, grace_ms);
    let chosen = verdict::overall(&sessions).and_then(|i| sessions.get(i));
    let client = chosen.and_then(|s| s.client.clone());
    let (honors, latency_ms, reason) = match chosen {
        Some(s) => (s.honors_list_changed, s.latency_ms, s.reason.clone()),
        None => (
            Honors::Unknown,
            None,
            format!("the client never started the probe (client {exit})"),
        ),
    };
    let tail = match &options.log {
        Some(log) => output_tail(log),
        None => Vec::new(),
    };
    let harness = options
        .harness
        .clone()
        .or_else(|| client.as_ref().map(|c| c.name.clone()))
        .unwrap_or_else(|| program.clone());
    let file = VerdictFile {
        version: 1,
        kind: options.kind,
        harness,
        pattern: options.pattern.clone(),
        how: options
            .how
            .clone()
            .unwrap_or_else(|| "harness-probe run".to_owned()),
        command: options.command.clone(),
        date: utc_date(started),
        grace_ms,
        notify_delay_ms: options.notify_delay_ms,
        timeout_s: options.timeout.as_secs(),
        client_exit: exit,
        honors_list_changed: honors,
        client,
        latency_ms,
        reason,
        client_output_tail: tail,
        sessions,
    };
    let path = options
        .verdict
        .clone()
        .unwrap_or_else(|| prepared.dir.join("verdict.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&file)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((file, path))
}

fn sessions_open(records: &[record::Record]) -> usize {
    let mut open: Vec<&str> = Vec::new();
    for r in records {
        let Some(s) = r.session.as_deref() else {
            continue;
        };
        if r.event == "closed" {
            open.retain(|x| *x != s);
        } else if r.event == "session_start" {
            open.push(s);
        }
    }
    open.len()
}

/// The last few lines the client printed, for the verdict's reason.
fn output_tail(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
        .collect();
    let start = lines.len().saturating_sub(6);
    lines[start..].to_vec()
}

/// The lines `run` prints: one per probe session, or one saying there was none.
pub fn verdict_lines(file: &VerdictFile) -> Vec<String> {
    if file.sessions.is_empty() {
        return vec![format!(
            "{}: honors_list_changed=unknown latency=- ({})",
            file.harness, file.reason
        )];
    }
    file.sessions
        .iter()
        .map(|s| {
            let (name, version) = match &s.client {
                Some(c) => (c.name.clone(), c.version.clone().unwrap_or_default()),
                None => (file.harness.clone(), String::new()),
            };
            let latency = s
                .latency_ms
                .map(|l| format!("{l}ms"))
                .unwrap_or_else(|| "-".into());
            format!(
                "{name} {version}: honors_list_changed={} latency={latency} ({})",
                s.honors_list_changed.as_str(),
                s.reason
            )
        })
        .collect()
}
