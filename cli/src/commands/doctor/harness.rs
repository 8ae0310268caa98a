//! Each harness's MCP configuration, read where the harness keeps it, and the harness versions
//! on `PATH` against the measured capability table (`testdata/harnesscaps.json`).
//!
//! The files: Claude Code's `~/.claude.json` (user scope, and this directory's entry under
//! `projects` for local scope) and the project's `.mcp.json`; codex's `config.toml` in
//! `$CODEX_HOME` (default `~/.codex`); opencode's `opencode.json` / `opencode.jsonc` in
//! `$XDG_CONFIG_HOME/opencode` (default `~/.config/opencode`) and in the project. An entry is
//! Leo's when it is named `leo` or runs a `leo-mcp`. Its `LEO_HOME` is the one in its own
//! environment or `--home`, else what the harness passes on: codex passes no variable it was not
//! told to, so `~/.leo`; Claude Code and opencode pass their own environment, taken to be this
//! shell's.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use leo_broker::home::Home;
use serde_json::Value;
use wait_timeout::ChildExt;

use super::{Check, Status, VERSION};
use crate::banner::{find_on_path, sh_quote};

const AREA: &str = "harness";
/// How long `PROGRAM --version` may take (the harness CLIs start a JavaScript runtime).
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);
/// The measured capability table, as `leo-mcp` builds it in.
const HARNESSCAPS: &str = include_str!("../../../../testdata/harnesscaps.json");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Harness {
    Claude,
    Codex,
    Opencode,
}

impl Harness {
    const ALL: [Harness; 3] = [Harness::Claude, Harness::Codex, Harness::Opencode];

    /// The CLI's name, on `PATH` and in `--agent`.
    fn cli(self) -> &'static str {
        match self {
            Harness::Claude => "claude",
            Harness::Codex => "codex",
            Harness::Opencode => "opencode",
        }
    }

    /// Its name in `harnesscaps.json`.
    fn caps_name(self) -> &'static str {
        match self {
            Harness::Claude => "Claude Code",
            Harness::Codex => "codex",
            Harness::Opencode => "opencode",
        }
    }

    /// The line that (re-)adds Leo's entry, as the broker's banner prints it; Claude Code's in
    /// the scope of the file the entry is in (`scope`), since a project's or a directory's
    /// entry wins over the user's.
    fn add_line(self, home: &Path, leo_mcp: &str, agent: &str, scope: Scope) -> String {
        let env = format!("LEO_HOME={}", sh_quote(&home.display().to_string()));
        match self {
            Harness::Claude => format!(
                "claude mcp remove --scope {scope} leo; claude mcp add --transport stdio --scope {scope} leo -e {env} -- {leo_mcp} --agent {agent}",
                scope = scope.word()
            ),
            Harness::Codex => format!(
                "codex mcp remove leo; codex mcp add leo --env {env} -- {leo_mcp} --agent {agent}"
            ),
            Harness::Opencode => {
                format!("opencode mcp add leo --env {env} -- {leo_mcp} --agent {agent}")
            }
        }
    }

    /// Where it keeps MCP servers, user files first.
    fn files(self) -> Vec<PathBuf> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let cwd = std::env::current_dir().unwrap_or_default();
        let var = |name: &str, default: PathBuf| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or(default)
        };
        match self {
            Harness::Claude => vec![home.join(".claude.json"), cwd.join(".mcp.json")],
            Harness::Codex => vec![var("CODEX_HOME", home.join(".codex")).join("config.toml")],
            Harness::Opencode => {
                let dir = var("XDG_CONFIG_HOME", home.join(".config")).join("opencode");
                ["opencode.json", "opencode.jsonc"]
                    .into_iter()
                    .flat_map(|f| [dir.join(f), cwd.join(f)])
                    .collect()
            }
        }
    }
}

/// Where Claude Code keeps an entry: `~/.claude.json` (user, or local: this directory's under
/// `projects`) or the project's `.mcp.json`. The other harnesses' entries are all `User`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Scope {
    #[default]
    User,
    Local,
    Project,
}

impl Scope {
    fn word(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Local => "local",
            Scope::Project => "project",
        }
    }
}

/// One MCP server entry of a harness's config.
#[derive(Debug, Default)]
struct Entry {
    name: String,
    scope: Scope,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// codex's `tool_timeout_sec`, when set.
    tool_timeout_sec: Option<f64>,
}

impl Entry {
    fn is_leo(&self) -> bool {
        self.name == "leo"
            || Path::new(&self.command)
                .file_name()
                .is_some_and(|n| n == "leo-mcp")
    }

    /// The value of `--flag X` or `--flag=X` in its arguments.
    fn flag(&self, flag: &str) -> Option<String> {
        let eq = format!("{flag}=");
        self.args.iter().enumerate().find_map(|(i, a)| {
            if a == flag {
                self.args.get(i + 1).cloned()
            } else {
                a.strip_prefix(&eq).map(str::to_owned)
            }
        })
    }
}

/// Checks every harness's config files.
pub fn configs(home: &Home, checks: &mut Vec<Check>) {
    for harness in Harness::ALL {
        let files: Vec<PathBuf> = harness
            .files()
            .into_iter()
            .filter(|f| f.is_file())
            .collect();
        if files.is_empty() {
            checks.push(
                Check::new(AREA, harness.cli(), Status::Info)
                    .detail(format!("no config file ({})", list(&harness.files()))),
            );
            continue;
        }
        let mut leo_entries = 0;
        for file in &files {
            match read(harness, file) {
                Err(e) => {
                    // An entry in it may be Leo's: "no Leo entry" is not said then.
                    leo_entries += 1;
                    checks.push(
                        Check::new(AREA, label(harness, file, None), Status::Fail)
                            .detail(e)
                            .fix(format!(
                                "correct {} (`{} mcp list` reads it too)",
                                file.display(),
                                harness.cli()
                            )),
                    );
                }
                Ok(entries) => {
                    for entry in entries.iter().filter(|e| e.is_leo()) {
                        leo_entries += 1;
                        entry_checks(harness, file, entry, home, checks);
                    }
                }
            }
        }
        if leo_entries == 0 {
            checks.push(
                Check::new(AREA, harness.cli(), Status::Warn)
                    .detail(format!("no Leo entry in {}", list(&files)))
                    .fix(harness.add_line(
                        &home.root,
                        &leo_mcp_to_suggest(),
                        harness.cli(),
                        Scope::User,
                    )),
            );
        }
    }
}

fn list(files: &[PathBuf]) -> String {
    let all: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    all.join(", ")
}

fn label(harness: Harness, file: &Path, entry: Option<&Entry>) -> String {
    match entry {
        Some(e) => format!("{} {} [{}]", harness.cli(), file.display(), e.name),
        None => format!("{} {}", harness.cli(), file.display()),
    }
}

/// The `leo-mcp` a fix line names: the one beside this `leo`, else the one on `PATH`.
fn leo_mcp_to_suggest() -> String {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("leo-mcp")))
        .filter(|p| p.is_file());
    match beside {
        Some(p) if find_on_path("leo-mcp").as_deref() != Some(p.as_path()) => {
            sh_quote(&p.display().to_string())
        }
        _ => "leo-mcp".into(),
    }
}

/// The entries of one file.
fn read(harness: Harness, file: &Path) -> Result<Vec<Entry>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    match harness {
        Harness::Claude => {
            let v: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            if file.file_name().is_some_and(|n| n == ".mcp.json") {
                return Ok(in_scope(
                    json_servers(&v["mcpServers"], "args", "env"),
                    Scope::Project,
                ));
            }
            let mut entries = json_servers(&v["mcpServers"], "args", "env");
            // Local scope: this directory's entry in ~/.claude.json.
            if let Some(cwd) = std::env::current_dir()
                .ok()
                .and_then(|d| d.to_str().map(str::to_owned))
            {
                let local = json_servers(&v["projects"][cwd]["mcpServers"], "args", "env");
                entries.extend(in_scope(local, Scope::Local));
            }
            Ok(entries)
        }
        Harness::Codex => {
            let v: toml::Table = toml::from_str(&text).map_err(|e| e.to_string())?;
            let servers = v.get("mcp_servers").and_then(|s| s.as_table());
            Ok(servers
                .into_iter()
                .flatten()
                .map(|(name, s)| codex_entry(name, s))
                .collect())
        }
        Harness::Opencode => {
            let v: Option<Value> = jsonc_parser::parse_to_serde_value(&text, &Default::default())
                .map_err(|e| e.to_string())?;
            let v = v.unwrap_or_default();
            Ok(json_servers(&v["mcp"], "", "environment"))
        }
    }
}

fn in_scope(entries: Vec<Entry>, scope: Scope) -> Vec<Entry> {
    entries.into_iter().map(|e| Entry { scope, ..e }).collect()
}

/// Entries of a JSON map of servers. An empty `args_key` means the command is an array that
/// holds the arguments too (opencode).
fn json_servers(servers: &Value, args_key: &str, env_key: &str) -> Vec<Entry> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let Some(map) = servers.as_object() else {
        return Vec::new();
    };
    map.iter()
        .map(|(name, s)| {
            let (command, args) = if args_key.is_empty() {
                let mut argv = strings(&s["command"]);
                let command = if argv.is_empty() {
                    String::new()
                } else {
                    argv.remove(0)
                };
                (command, argv)
            } else {
                (
                    s["command"].as_str().unwrap_or_default().to_owned(),
                    strings(&s[args_key]),
                )
            };
            let env = s[env_key]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect();
            Entry {
                name: name.clone(),
                scope: Scope::User,
                command,
                args,
                env,
                tool_timeout_sec: None,
            }
        })
        .collect()
}

fn codex_entry(name: &str, s: &toml::Value) -> Entry {
    let strings = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(|a| a.as_array())
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let env = s
        .get("env")
        .and_then(|e| e.as_table())
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect();
    let timeout = s.get("tool_timeout_sec");
    Entry {
        name: name.to_owned(),
        scope: Scope::User,
        command: s
            .get("command")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_owned(),
        args: strings(s.get("args")),
        env,
        tool_timeout_sec: timeout
            .and_then(|t| t.as_float().or_else(|| t.as_integer().map(|i| i as f64))),
    }
}

/// The checks of one Leo entry: its command, its version, its `LEO_HOME`, codex's timeout.
fn entry_checks(
    harness: Harness,
    file: &Path,
    entry: &Entry,
    home: &Home,
    checks: &mut Vec<Check>,
) {
    let name = label(harness, file, Some(entry));
    let agent = entry
        .flag("--agent")
        .or_else(|| entry.env.get("LEO_AGENT").cloned())
        .unwrap_or_else(|| harness.cli().to_owned());
    let add = harness.add_line(&home.root, &leo_mcp_to_suggest(), &agent, entry.scope);
    checks.push(command_check(&name, entry, &add));
    checks.push(home_check(harness, &name, entry, home, &add));
    if harness == Harness::Codex {
        let check = match entry.tool_timeout_sec {
            Some(s) => Check::new(AREA, format!("{name} tool_timeout_sec"), Status::Ok)
                .detail(format!("{s} s")),
            None => Check::new(AREA, format!("{name} tool_timeout_sec"), Status::Warn)
                .detail("not set: codex gives up on a call after 60 s, though the broker waits for the tool's own timeout")
                .fix(format!("add `tool_timeout_sec = 3600` under [mcp_servers.{}] in {}", entry.name, file.display())),
        };
        checks.push(check);
    }
}

/// The command exists, can be run, and is a `leo-mcp` of this version.
fn command_check(name: &str, entry: &Entry, add: &str) -> Check {
    let check = |status| Check::new(AREA, format!("{name} command"), status);
    let resolved = if entry.command.contains('/') {
        Some(PathBuf::from(&entry.command))
    } else {
        find_on_path(&entry.command)
    };
    let Some(path) = resolved.filter(|p| p.is_file()) else {
        return check(Status::Fail)
            .detail(format!(
                "{:?} does not exist (moved or not installed), so the harness cannot start it",
                entry.command
            ))
            .fix(add.to_owned());
    };
    let executable = std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
    if !executable {
        return check(Status::Fail)
            .detail(format!("{} is not executable", path.display()))
            .fix(format!(
                "chmod +x {}",
                sh_quote(&path.display().to_string())
            ));
    }
    match version_of(&path) {
        Some(v) if v.version == VERSION => {
            check(Status::Ok).detail(format!("{} ({})", path.display(), v.text))
        }
        Some(v) => check(Status::Fail)
            .detail(format!("{} is {}, this leo is {VERSION}", path.display(), v.text))
            .fix("install leo and leo-mcp from the same checkout (cargo install --locked --path cli; cargo install --locked --path mcp-sidecar)"),
        None => check(Status::Fail)
            .detail(format!("{} does not answer --version as leo-mcp does", path.display()))
            .fix(add.to_owned()),
    }
}

/// The entry's `LEO_HOME` is this broker's.
fn home_check(harness: Harness, name: &str, entry: &Entry, home: &Home, add: &str) -> Check {
    let check = |status| Check::new(AREA, format!("{name} LEO_HOME"), status);
    let (theirs, how) = if let Some(h) = entry.flag("--home") {
        (PathBuf::from(h), "--home")
    } else if let Some(h) = entry.env.get("LEO_HOME").filter(|h| !h.is_empty()) {
        (PathBuf::from(h), "its env")
    } else if harness == Harness::Codex {
        (
            Home::default_location().root,
            "codex passes no LEO_HOME: the default",
        )
    } else {
        (
            Home::from_env().root,
            "none set: the harness's environment, taken as this shell's",
        )
    };
    let same = |a: &Path, b: &Path| {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        canon(a) == canon(b)
    };
    if same(&theirs, &home.root) {
        check(Status::Ok).detail(format!("{} ({how})", theirs.display()))
    } else {
        check(Status::Fail)
            .detail(format!(
                "{} ({how}), but the broker's is {}: this agent talks to another broker, or none",
                theirs.display(),
                home.root.display()
            ))
            .fix(add.to_owned())
    }
}

/// A program's answer to `--version`.
pub struct Version {
    /// The first word that reads as a version, `1.18.33`.
    pub version: String,
    /// The whole first line, `codex-cli 0.171.0`.
    pub text: String,
}

/// Runs `program --version`, bounded in time.
pub fn version_of(program: &Path) -> Option<Version> {
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    if child.wait_timeout(VERSION_TIMEOUT).ok()?.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    let text = out.lines().next()?.trim().to_owned();
    let version = text
        .split_whitespace()
        .map(|w| w.trim_start_matches('v'))
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))?
        .to_owned();
    Some(Version { version, text })
}

/// The harness CLIs on `PATH`, and `leo-mcp`, against the versions measured.
pub fn versions(checks: &mut Vec<Check>) {
    let table = leo_protocol::harness::Table::parse(HARNESSCAPS).ok();
    for harness in Harness::ALL {
        let check = |status| Check::new("versions", harness.cli(), status);
        let Some(path) = find_on_path(harness.cli()) else {
            checks.push(check(Status::Info).detail("not on PATH"));
            continue;
        };
        let Some(v) = version_of(&path) else {
            checks.push(
                check(Status::Warn)
                    .detail(format!("{} did not answer --version", path.display()))
                    .fix(format!("run `{} --version` to see why", harness.cli())),
            );
            continue;
        };
        let measured: Vec<String> = table
            .as_ref()
            .and_then(|t| {
                t.harnesses
                    .iter()
                    .find(|e| e.harness == harness.caps_name())
            })
            .map(|e| e.versions_seen.clone())
            .unwrap_or_default();
        let c = if measured.contains(&v.version) {
            check(Status::Ok).detail(format!("{} ({}): measured", v.version, path.display()))
        } else {
            check(Status::Warn)
                .detail(format!(
                    "{} ({}): not measured; measured: {}",
                    v.version,
                    path.display(),
                    if measured.is_empty() { "none".into() } else { measured.join(", ") }
                ))
                .fix("it may differ from the measured behaviour (docs/agents.md); `harness-probe` measures it")
        };
        checks.push(c);
    }
}
