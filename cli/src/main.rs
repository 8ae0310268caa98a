//! `leo`: the broker daemon and the operator CLI, one binary. Thin: parse the one clap tree
//! (`args`), run the command, map its error to an exit code in one place (`error`). Logs go to
//! stderr (`RUST_LOG`); stdout is for what the user asked for.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use leo_broker::home::Home;

mod admin;
mod agent;
mod args;
mod banner;
mod broker;
mod commands;
mod config_edit;
mod error;
mod mcp;
mod serve_tool;

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(broker::log_colour())
        .init();
    // `--home` and `LEO_HOME` mean the same; an empty value is no value.
    let home = match cli.home.filter(|p| !p.as_os_str().is_empty()) {
        Some(root) => Home::new(root),
        None => Home::from_env(),
    };
    match run(&home, cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`leo status | head`) is not a failure.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(message) = e.message() {
                eprintln!("leo: {message}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(home: &Home, command: Command) -> error::Result {
    match command {
        Command::Broker { port, bind } => Ok(broker::run(home.clone(), port, bind)?),
        Command::Status(args) => commands::status::run(home, &args),
        Command::Requests(args) => commands::requests::run(home, &args),
        Command::Audit(args) => commands::audit::run(home, &args),
        Command::Cancel(args) => commands::cancel::run(home, &args),
        Command::Call(args) => commands::call::run(home, &args),
        Command::Tools { command } => commands::tools::run(home, &command),
        Command::Webhook { command } => commands::webhook::run(home, &command),
        Command::ServeTool(args) => Ok(serve_tool::run(home, args)?),
        Command::Service { command } => commands::service::run(home, &command),
        Command::Doctor(args) => commands::doctor::run(home, &args),
        Command::Completions(args) => Ok(commands::completions::print(Cli::command(), &args)?),
        Command::Man { out } => Ok(commands::completions::man(Cli::command(), &out)?),
        Command::Client { command } => print(admin::client(home, &command)?),
        Command::Agent { command } => print(agent::run(home, &command)?),
        Command::Device { command } => print(admin::device(home, &command)?),
    }
}

/// Writes what a command reports to stdout.
fn print(report: String) -> error::Result {
    let mut out = std::io::stdout().lock();
    out.write_all(report.as_bytes())?;
    out.flush()?;
    Ok(())
}
