//! `leo doctor`: checks what most often keeps tools from reaching an agent, and says how to fix
//! each problem it finds. The broker (running, answering on its sockets and port, the same
//! version as this `leo` and the `leo-mcp`s, a valid config), the modes of its secret files, every
//! harness's MCP configuration where that harness keeps it (a Leo entry, a command that exists,
//! the same `LEO_HOME`, codex's `tool_timeout_sec`), and the harness versions on `PATH` against
//! the measured capability table.
//!
//! Each check ends `ok`, `info` (nothing to check, or nothing wrong to say), `warn` (works, but
//! not as well as it could) or `fail` (something is wrong); only a `fail` makes the exit code 1.
//! `--json` prints the same checks as one object for scripts. The checks read files and run
//! programs with a bound on each (`--version` of a harness CLI, of `leo-mcp`); they change
//! nothing.

mod files;
mod harness;
mod running;

use leo_broker::home::Home;
use serde_json::{Value, json};

/// `--help` text for `leo doctor`.
pub const HELP: &str = "Each problem is printed with its fix. Exit codes: 0 nothing is wrong \
(warnings may remain); 1 something is wrong; 2 a bad argument.";

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object for scripts: {ok, leo_home, version, checks: [{area, check,
    /// status, detail, fix}]}.
    #[arg(long)]
    pub json: bool,
}

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct Check {
    /// `broker`, `files`, `harness`, `versions`.
    pub area: &'static str,
    /// What was checked, e.g. `running`, `codex ~/.codex/config.toml`.
    pub check: String,
    pub status: Status,
    pub detail: String,
    /// What to do about it, for `warn` and `fail`.
    pub fix: Option<String>,
}

impl Check {
    pub fn new(area: &'static str, check: impl Into<String>, status: Status) -> Check {
        Check {
            area,
            check: check.into(),
            status,
            detail: String::new(),
            fix: None,
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Check {
        self.detail = detail.into();
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }

    fn to_json(&self) -> Value {
        json!({
            "area": self.area,
            "check": self.check,
            "status": self.status.word(),
            "detail": self.detail,
            "fix": self.fix,
        })
    }
}

/// This build's version: `leo`, and the `leo-mcp` built from the same checkout.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn run(home: &Home, args: &DoctorArgs) -> crate::error::Result {
    crate::error::reported(checks(home, args))
}

/// Runs every check, prints them, and returns the exit code: 1 when one failed.
fn checks(home: &Home, args: &DoctorArgs) -> u8 {
    let mut checks = Vec::new();
    let config = running::config(home, &mut checks);
    running::broker(home, config.as_ref(), &mut checks);
    running::database(home, config.as_ref(), &mut checks);
    files::modes(home, &mut checks);
    harness::configs(home, &mut checks);
    harness::versions(&mut checks);
    let ok = !checks.iter().any(|c| c.status == Status::Fail);
    let text = if args.json {
        let all: Vec<Value> = checks.iter().map(Check::to_json).collect();
        let report = json!({
            "ok": ok,
            "leo_home": home.root.display().to_string(),
            "version": VERSION,
            "checks": all,
        });
        format!("{report:#}\n")
    } else {
        render(home, &checks)
    };
    let mut out = std::io::stdout().lock();
    // A closed stdout (`leo doctor | head`) still gets the exit code.
    let _ = std::io::Write::write_all(&mut out, text.as_bytes());
    if ok { 0 } else { 1 }
}

/// The text form: the checks by area, each problem followed by its fix, then a summary.
fn render(home: &Home, checks: &[Check]) -> String {
    let style = super::style::Style::detect();
    let mut out = format!(
        "{} {VERSION} · LEO_HOME={}\n",
        style.bold("leo doctor"),
        home.root.display()
    );
    let mut area = "";
    // One fix repairs every check it is given for (an entry's command and its LEO_HOME): it is
    // printed once, and pointed at after.
    let mut fixes: Vec<&str> = Vec::new();
    for c in checks {
        if c.area != area {
            area = c.area;
            out.push_str(&format!("\n{}\n", style.bold(area)));
        }
        let mark = match c.status {
            Status::Ok => style.dim("ok  "),
            Status::Info => style.dim("info"),
            Status::Warn => style.yellow("warn"),
            Status::Fail => style.bold("FAIL"),
        };
        out.push_str(&format!("  {mark} {}: {}\n", c.check, c.detail));
        match c.fix.as_deref() {
            Some(fix) if fixes.contains(&fix) => out.push_str("         fix: the one above\n"),
            Some(fix) => {
                fixes.push(fix);
                out.push_str(&format!("         fix: {fix}\n"));
            }
            None => {}
        }
    }
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    out.push_str(&format!(
        "\n{} problem(s), {} warning(s).\n",
        count(Status::Fail),
        count(Status::Warn)
    ));
    out
}
