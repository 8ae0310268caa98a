//! `leo-mcp`: parse flags, log to stderr, serve MCP on stdio (see the library docs).

#![deny(clippy::print_stdout)]

use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    let matches = leo_mcp::cli::Cli::command().get_matches();
    if leo_mcp::cli::generate(&matches)? {
        return Ok(());
    }
    let cli = leo_mcp::cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let settings = cli.into_settings()?;
    init_tracing();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let result = runtime.block_on(leo_mcp::run(settings));
    // Do not wait for a blocking stdin read that will never finish.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(result?)
}

/// Logs go to stderr only; stdout is the MCP protocol. `LEO_MCP_LOG` (or `RUST_LOG`) filters.
fn init_tracing() {
    let filter = EnvFilter::try_from_env("LEO_MCP_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("leo_mcp=info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(filter)
        .init();
}
