//! Command-line flags and the settings they resolve to.
//!
//! Raw flags (`Cli`, what clap parses) and validated settings (`Settings`, what the rest of the
//! crate reads) are kept apart, so that nothing past start-up sees an unchecked agent name or
//! has to know which value came from a flag and which from the environment.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::error::{Result, SidecarError};
use crate::home::Home;

/// How often a parked call reports progress when the harness asked for it.
pub const DEFAULT_PROGRESS: Duration = Duration::from_secs(15);
/// Overrides `DEFAULT_PROGRESS`, in milliseconds (for tests).
pub const PROGRESS_ENV: &str = "LEO_MCP_PROGRESS_MS";

/// `leo-mcp --agent NAME [--mode auto|native|fallback]`.
#[derive(Debug, Parser)]
#[command(
    name = "leo-mcp",
    version,
    about = "The stdio MCP server that shows Leo client tools to one agent's harness"
)]
pub struct Cli {
    /// The agent this session belongs to (as named in config.yaml `agents:`).
    #[arg(long, env = "LEO_AGENT")]
    pub agent: String,

    /// How to show client tools: `auto` picks by the harness's clientInfo.name.
    #[arg(long, value_enum, default_value_t = ModeChoice::Auto)]
    pub mode: ModeChoice,

    /// The broker's home (default: ~/.leo).
    #[arg(long, env = "LEO_HOME", hide_env_values = true)]
    pub home: Option<PathBuf>,
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
    pub agent: String,
    pub mode: ModeChoice,
    pub home: Home,
    pub progress_every: Duration,
}

impl Cli {
    /// Validates the flags and reads the remaining environment.
    pub fn into_settings(self) -> Result<Settings> {
        if !is_valid_agent_name(&self.agent) {
            return Err(SidecarError::InvalidAgent { name: self.agent });
        }
        let home = match self.home.filter(|p| !p.as_os_str().is_empty()) {
            Some(root) => Home::new(root),
            None => Home::default_location(),
        };
        Ok(Settings {
            agent: self.agent,
            mode: self.mode,
            home,
            progress_every: progress_from_env(),
        })
    }
}

/// The broker's rule for agent names, checked here so a typo fails at start, not at hello.
pub fn is_valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn progress_from_env() -> Duration {
    std::env::var(PROGRESS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_PROGRESS)
}
