//! Command-line flags and the settings they resolve to.
//!
//! Raw flags (`Cli`, what clap parses) and validated settings (`Settings`, what the rest of the
//! crate reads) are kept apart, so that nothing past start-up sees an unchecked agent name or
//! has to know which value came from a flag and which from the environment.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use leo_protocol::names::AgentName;

use crate::dial::{Dial, Remote};
use crate::error::{Result, SidecarError};
use crate::home::Home;

/// How often a parked call reports progress when the harness asked for it.
pub const DEFAULT_PROGRESS: Duration = Duration::from_secs(15);
/// Overrides `DEFAULT_PROGRESS`, in milliseconds (for tests).
pub const PROGRESS_ENV: &str = "LEO_MCP_PROGRESS_MS";

/// `--token-file`, as an environment variable.
pub const TOKEN_FILE_ENV: &str = "LEO_AGENT_TOKEN_FILE";
/// The agent token itself, for `--url` (a container holds no `$LEO_HOME`). Not a flag: a
/// command line is visible to every user of the host.
pub const TOKEN_ENV: &str = "LEO_AGENT_TOKEN";

/// `leo-mcp --agent NAME [--mode auto|native|fallback] [--token-file PATH] [--channels]`.
#[derive(Debug, Parser)]
#[command(
    name = "leo-mcp",
    version,
    about = "The stdio MCP server that shows Leo client tools to one agent's harness"
)]
pub struct Cli {
    /// The agent this session belongs to (as named in config.yaml `agents:`).
    #[arg(
        long,
        env = "LEO_AGENT",
        hide_env_values = true,
        value_parser = parse_agent,
        required = false,
        required_unless_present_any = ["completions", "man"]
    )]
    pub agent: AgentName,

    /// How to show client tools: `auto` picks by the harness's clientInfo.name.
    #[arg(long, value_enum, default_value_t = ModeChoice::Auto)]
    pub mode: ModeChoice,

    /// The broker's home (default: ~/.leo).
    #[arg(long, env = "LEO_HOME", hide_env_values = true)]
    pub home: Option<PathBuf>,

    /// A broker on another host, or outside this container: its TCP listener
    /// (`http://HOST:PORT`, or `https://` with the system's roots and `LEO_CA_FILE`). The
    /// token is `LEO_AGENT_TOKEN` or `--token-file`; `$LEO_HOME` is not read.
    #[arg(long, env = "LEO_URL", value_name = "URL", hide_env_values = true)]
    pub url: Option<String>,

    /// The token to open sessions with, for an agent given its own token (`leo agent add`)
    /// that cannot read `$LEO_HOME/state/` (a container, another user). Without it, leo-mcp
    /// uses `state/agents/<agent>.token` when that file exists, else the shared
    /// `state/agent.token`.
    #[arg(long, env = TOKEN_FILE_ENV, value_name = "PATH", hide_env_values = true)]
    pub token_file: Option<PathBuf>,

    /// Push messages from API clients into a Claude Code session as channel events (declares
    /// the experimental `claude/channel` capability). Claude Code must be started with this
    /// server enabled as a channel too. The variable takes 1/0, true/false, yes/no, on/off.
    #[arg(
        long,
        env = crate::channel::ENV,
        hide_env_values = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub channels: bool,

    /// Serve MCP 2026-07-28 beside `initialize` (on by default): answer `server/discover`,
    /// take each request's own client info, and deliver tool-list changes on
    /// `subscriptions/listen`. `--discover=false`, `--no-discover` or `LEO_MCP_DISCOVER=0`
    /// refuse discover instead, so that every client uses `initialize`. The variable takes
    /// 1/0, true/false, yes/no, on/off.
    #[arg(
        long,
        env = crate::discover::ENV,
        hide_env_values = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_value_t = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub discover: bool,

    /// Refuse `server/discover`: the `initialize` lifecycle only (wins over `--discover`).
    #[arg(long)]
    pub no_discover: bool,

    /// Print a completion script for SHELL (bash, zsh, fish) and exit. Not `exclusive`: a
    /// variable such as `LEO_HOME` in the environment counts as an argument given.
    #[arg(long, hide = true, value_name = "SHELL")]
    pub completions: Option<clap_complete::Shell>,

    /// Write the man page `leo-mcp.1` into DIR and exit (`cargo xtask man`).
    #[arg(long, hide = true, value_name = "DIR")]
    pub man: Option<PathBuf>,
}

/// `--completions` and `--man`: answered from the flags alone, before `--agent` is required.
/// True when one of them was given and its output written.
pub fn generate(matches: &clap::ArgMatches) -> std::io::Result<bool> {
    use clap::CommandFactory;
    if let Some(shell) = matches.get_one::<clap_complete::Shell>("completions") {
        // Into memory first: clap_complete panics on a write error.
        let mut script = Vec::new();
        clap_complete::generate(*shell, &mut Cli::command(), "leo-mcp", &mut script);
        std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
        return Ok(true);
    }
    if let Some(dir) = matches.get_one::<PathBuf>("man") {
        std::fs::create_dir_all(dir)?;
        clap_mangen::generate_to(Cli::command(), dir)?;
        return Ok(true);
    }
    Ok(false)
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeChoice {
    Auto,
    Native,
    Fallback,
}

/// What the sidecar runs with, once checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub agent: AgentName,
    pub mode: ModeChoice,
    pub home: Home,
    pub progress_every: Duration,
    /// Declare `claude/channel` and push message arrivals (`--channels`).
    pub channels: bool,
    /// `--token-file`: the token to say hello with, instead of the one under `home`.
    pub token_file: Option<PathBuf>,
    /// Serve the 2026-07-28 lifecycle too (`--discover`, the default).
    pub discover: bool,
    /// Where the broker is, when not its socket under `home`: `--url` (`Dial::Url`), or
    /// `/mcp`'s in-process pipe (`Dial::InProcess`).
    pub broker: Option<Dial>,
    /// The token to say hello with, as given: `LEO_AGENT_TOKEN`, or `/mcp`'s bearer token.
    pub token: Option<String>,
    /// How the harness reaches this server, as the hello tells the broker.
    pub transport: leo_protocol::ipc::Transport,
}

impl Settings {
    /// Where the broker is: `broker`, else its sidecar socket under `home`.
    pub fn dial(&self) -> Dial {
        match &self.broker {
            Some(dial) => dial.clone(),
            None => Dial::Socket(self.home.sidecar_socket()),
        }
    }

    /// `--url`: a broker on another host.
    pub fn remote(&self) -> Option<&Remote> {
        match &self.broker {
            Some(Dial::Url(remote)) => Some(remote),
            _ => None,
        }
    }

    /// The home whose files may stand in for the broker while it is down: none with `--url`,
    /// whose broker's files are on another host.
    pub fn local_home(&self) -> Option<&Home> {
        self.remote().is_none().then_some(&self.home)
    }

    /// The token this session says hello with: `--token-file`, else the one given
    /// (`LEO_AGENT_TOKEN`, `/mcp`'s bearer token), else (without `--url`) the agent's own
    /// token (`state/agents/<agent>.token`) when it exists, else the shared agent token.
    pub fn read_token(&self) -> Result<String> {
        match (&self.token_file, &self.token) {
            (Some(path), _) => crate::home::read_token_at(path),
            (None, Some(token)) => Ok(token.clone()),
            (None, None) if self.remote().is_some() => Err(SidecarError::NoToken),
            (None, None) => crate::home::read_agent_token(&self.home, &self.agent),
        }
    }
}

impl Cli {
    /// Validates the flags and reads the remaining environment.
    pub fn into_settings(self) -> Result<Settings> {
        let home = match self.home.filter(|p| !p.as_os_str().is_empty()) {
            Some(root) => Home::new(root),
            None => Home::default_location(),
        };
        let token_file = self.token_file.filter(|p| !p.as_os_str().is_empty());
        if let Some(path) = &token_file {
            // A start-up mistake, like a bad name: say it now, not as "broker not running".
            crate::home::read_token_at(path)?;
        }
        let token = std::env::var(TOKEN_ENV)
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let remote = match self.url.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
            Some(url) => Some(Arc::new(Remote::parse(url, self.agent.clone())?)),
            None => None,
        };
        if remote.is_some() && token.is_none() && token_file.is_none() {
            return Err(SidecarError::NoToken);
        }
        Ok(Settings {
            broker: remote.map(Dial::Url),
            token,
            transport: leo_protocol::ipc::Transport::Stdio,
            agent: self.agent,
            mode: self.mode,
            home,
            progress_every: progress_from_env(),
            channels: self.channels,
            token_file,
            discover: self.discover && !self.no_discover,
        })
    }
}

/// `--agent`, as clap's value parser: the broker's rule for agent names, checked here so a typo
/// fails at start, not at hello.
pub fn parse_agent(text: &str) -> std::result::Result<AgentName, SidecarError> {
    AgentName::parse(text).map_err(|_| SidecarError::InvalidAgent {
        name: text.to_owned(),
    })
}

pub(crate) fn progress_from_env() -> Duration {
    std::env::var(PROGRESS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_PROGRESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_off_unless_asked_for() {
        let off = Cli::try_parse_from(["leo-mcp", "--agent", "a"]).unwrap();
        let on = Cli::try_parse_from(["leo-mcp", "--agent", "a", "--channels"]).unwrap();
        // The environment of `cargo test` does not set LEO_MCP_CHANNELS.
        if std::env::var_os(crate::channel::ENV).is_none() {
            assert!(!off.channels);
        }
        assert!(on.channels);
        assert!(on.into_settings().unwrap().channels);
    }

    #[test]
    fn discover_is_on_unless_turned_off() {
        let on = |args: &[&str]| {
            let mut argv = vec!["leo-mcp", "--agent", "a"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv)
                .unwrap()
                .into_settings()
                .unwrap()
                .discover
        };
        if std::env::var_os(crate::discover::ENV).is_none() {
            assert!(on(&[]));
        }
        assert!(on(&["--discover"]));
        assert!(on(&["--discover=1"]));
        assert!(!on(&["--discover=false"]));
        assert!(!on(&["--no-discover"]));
        assert!(!on(&["--discover", "--no-discover"]));
    }
}
