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
mod remote;
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
    // `--home` and `LEO_HOME` mean the same; an empty value is no value.
    let home = match cli.home.clone().filter(|p| !p.as_os_str().is_empty()) {
        Some(root) => Home::new(root),
        None => Home::from_env(),
    };
    let typed = matches.value_source("url") == Some(clap::parser::ValueSource::CommandLine);
    if let Err(e) = remote(&cli, &home, typed) {
        eprintln!("leo: {e}");
        return ExitCode::from(2);
    }
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

/// The broker on another host the commands that speak the HTTP API talk to, if any: `--url`
/// typed, else `--remote NAME`, else `LEO_URL`, else the remote `leo remote use` chose (see
/// `remote`). `--url` or `--remote` given on the command line to another command is an error;
/// `LEO_URL` from the environment (set for `leo-mcp` in a container, say) and the remote in
/// use are left to the commands that use them.
fn remote(cli: &Cli, home: &Home, typed: bool) -> Result<(), String> {
    let url = cli.url.as_deref().filter(|u| !u.is_empty());
    if !cli.command.takes_url() {
        return match (typed && url.is_some(), &cli.remote) {
            (true, _) => {
                Err("--url applies to status, requests, audit, cancel, tools and webhook".into())
            }
            (false, Some(_)) => {
                Err("--remote applies to status, requests, audit, cancel, tools and webhook".into())
            }
            (false, None) => Ok(()),
        };
    }
    let saved = match (&cli.remote, url) {
        (Some(_), Some(_)) if typed => return Err("give --url or --remote, not both".into()),
        (Some(name), _) => Some(name.clone()),
        (None, Some(_)) => None,
        (None, None) => remote::current(home).map_err(|e| e.to_string())?,
    };
    if let Some(name) = saved {
        let saved = remote::load(home, &name).map_err(|e| leo_protocol::chain::error_chain(&e))?;
        commands::api::set_remote(saved);
        return Ok(());
    }
    let Some(url) = url else {
        return Ok(());
    };
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
    commands::api::set_remote(commands::api::Remote {
        endpoint,
        token,
        ca: None,
    });
    Ok(())
}

fn run(home: &Home, command: Command) -> error::Result {
    match command {
        Command::Broker { port, bind } => Ok(broker::run(home.clone(), port, bind)?),
        Command::Status(args) => commands::status::run(home, &args),
        Command::Requests(args) => commands::requests::run(home, &args),
        Command::Audit(args) => commands::audit::run(home, &args),
        Command::Cancel(args) => commands::cancel::run(home, &args),
        Command::Approvals(args) => commands::approvals::list(home, &args),
        Command::Approve(args) => commands::approvals::approve(home, &args),
        Command::Deny(args) => commands::approvals::deny(home, &args),
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
        Command::Remote { command } => print(remote::run(home, &command)?),
    }
}

/// Writes what a command reports to stdout.
fn print(report: String) -> error::Result {
    let mut out = std::io::stdout().lock();
    out.write_all(report.as_bytes())?;
    out.flush()?;
    Ok(())
}
