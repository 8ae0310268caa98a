//! `leo`: the broker daemon and the operator CLI, one binary. Thin: parse the one clap tree
//! (`args`), run the command, map its error to an exit code in one place (`error`). Logs go to
//! stderr (`RUST_LOG`); stdout is for what the user asked for.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use leo_broker::home::Home;

mod admin;
mod agent;
mod args;
mod banner;
mod broker;
mod cluster;
mod commands;
mod config_edit;
mod error;
mod mcp;
mod serve_tool;
mod tls;

use args::{Cli, Command};

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(broker::log_colour())
        .init();
    let typed = matches.value_source("url") == Some(clap::parser::ValueSource::CommandLine);
    if let Err(e) = remote(&cli, typed) {
        eprintln!("leo: {e}");
        return ExitCode::from(2);
    }
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

/// `--url` (or `LEO_URL`) with its token, for the commands that speak the HTTP API. Given on
/// the command line to another command it is an error; from the environment (set for
/// `leo-mcp` in a container, say) it is left to the commands that use it.
fn remote(cli: &Cli, typed: bool) -> Result<(), String> {
    let Some(url) = cli.url.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    if !cli.command.takes_url() {
        return match typed {
            true => {
                Err("--url applies to status, requests, audit, cancel, tools and webhook".into())
            }
            false => Ok(()),
        };
    }
    let endpoint = leo_app::Endpoint::from_url(url).map_err(|e| e.to_string())?;
    let token = match (&cli.token_file, std::env::var("LEO_TOKEN")) {
        (Some(path), _) => {
            leo_broker::read_token_file(path).map_err(|e| leo_protocol::chain::error_chain(&e))?
        }
        (None, Ok(token)) if !token.trim().is_empty() => token.trim().to_owned(),
        _ => {
            return Err(format!(
                "--url {url} needs a token: set LEO_TOKEN, or give --token-file PATH"
            ));
        }
    };
    commands::api::set_remote(commands::api::Remote { endpoint, token });
    Ok(())
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
        Command::Cluster { command } => print(cluster::run(home, &command)?),
        Command::Device { command } => print(admin::device(home, &command)?),
        Command::Tls { command } => print(tls::run(home, &command)?),
    }
}

/// Writes what a command reports to stdout.
fn print(report: String) -> error::Result {
    let mut out = std::io::stdout().lock();
    out.write_all(report.as_bytes())?;
    out.flush()?;
    Ok(())
}
