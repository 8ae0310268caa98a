//! `leo`: the broker daemon and the operator CLI. Thin: parse flags, call the library, map
//! errors to exit codes. Logs go to stderr (`RUST_LOG`); stdout is for what the user asked for.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use leo_broker::home::Home;
use leo_broker::server;
use leo_protocol::names::AgentName;

mod banner;
mod cli;
mod serve_tool;

#[derive(Parser)]
#[command(
    name = "leo",
    version,
    about = "Leo client tools: let apps offer tools to AI agents"
)]
struct Cli {
    /// The broker's home, as LEO_HOME sets it [default: ~/.leo].
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "LEO_HOME",
        hide_env_values = true
    )]
    home: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker in the foreground.
    Broker {
        /// TCP port (overrides web.port; 0 picks a free one).
        #[arg(long)]
        port: Option<u16>,
        /// TCP bind address (overrides web.bind).
        #[arg(long)]
        bind: Option<IpAddr>,
    },
    /// API clients: scoped tokens that may only message agents.
    Client {
        #[command(subcommand)]
        command: ClientCommand,
    },
    /// Per-agent tokens: a token that alone opens sessions under one agent name.
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Paired devices: tokens for apps on other devices.
    Device {
        #[command(subcommand)]
        command: DeviceCommand,
    },
    /// What runs now: apps, agents, tools by group, pending calls.
    #[command(after_help = cli::EXIT_CODES)]
    Status(cli::status::StatusArgs),
    /// The audit trail: every authenticated change, who made it and with which token.
    #[command(after_help = cli::EXIT_CODES)]
    Audit(cli::audit::AuditArgs),
    /// The pending calls, one line each: who asked for what, and for how long.
    #[command(after_help = cli::EXIT_CODES)]
    Requests(cli::requests::RequestsArgs),
    /// Cancel a pending call (its agent gets `cancelled`), as the console's Cancel button does.
    #[command(after_help = cli::CANCEL_HELP)]
    Cancel(cli::cancel::CancelArgs),
    /// Client tools: approve a changed definition.
    Tools {
        #[command(subcommand)]
        command: cli::tools::ToolsCommand,
    },
    /// Webhook providers: apps the broker calls over HTTP instead of an event stream.
    Webhook {
        #[command(subcommand)]
        command: cli::webhook::WebhookCommand,
    },
    /// Call a client tool as an agent would, and print its result.
    #[command(after_help = cli::CALL_HELP)]
    Call(cli::call::CallArgs),
    /// Make any program a client tool: each call runs COMMAND with the arguments on stdin.
    ServeTool(serve_tool::Args),
    /// Run the broker at login and restart it after a crash (systemd user unit, LaunchAgent).
    #[command(after_help = cli::service::HELP)]
    Service {
        #[command(subcommand)]
        command: cli::service::ServiceCommand,
    },
    /// Check the broker, its files and every harness's MCP configuration; say how to fix each
    /// problem.
    #[command(after_help = cli::doctor::HELP)]
    Doctor(cli::doctor::DoctorArgs),
    /// Print a shell completion script: `leo completions bash > ~/.local/share/bash-completion/completions/leo`.
    Completions(cli::completions::CompletionsArgs),
    /// Write the man pages of `leo` and its commands into DIR (`cargo xtask man`).
    #[command(hide = true)]
    Man {
        /// The directory to write `leo.1`, `leo-broker.1`, … into.
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum ClientCommand {
    /// Create a client and its token, allowed to message the given targets (globs allowed).
    Add {
        name: String,
        /// Targets, comma-separated or repeated: `rocket`, `scout-*`.
        #[arg(long = "can-message", required = true, value_delimiter = ',')]
        can_message: Vec<String>,
    },
    /// List clients, their targets, and whether their token file exists.
    List,
    /// Remove a client and its token (takes effect at the next broker restart).
    Rm { name: String },
}

#[derive(Subcommand)]
enum AgentCommand {
    /// Give an agent its own token (state/agents/NAME.token); the shared agent token is then
    /// refused for that name.
    Add {
        #[arg(value_parser = leo_broker::agent_tokens::parse_name)]
        name: AgentName,
    },
    /// List the agents that have their own token.
    List,
    /// Remove an agent's own token; the shared agent token opens its sessions again.
    Rm {
        #[arg(value_parser = leo_broker::agent_tokens::parse_name)]
        name: AgentName,
    },
}

#[derive(Subcommand)]
enum DeviceCommand {
    /// Create a token for a device.
    Pair { name: String },
    /// List paired devices.
    List,
    /// Remove a device's token (takes effect at the next broker restart).
    Rm { name: String },
}

fn print(report: leo_broker::Result<String>) -> anyhow::Result<()> {
    let report = report?;
    let mut out = std::io::stdout().lock();
    out.write_all(report.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(log_colour())
        .init();
    // `--home` and `LEO_HOME` mean the same; an empty value is no value.
    let home = match cli.home.filter(|p| !p.as_os_str().is_empty()) {
        Some(root) => Home::new(root),
        None => Home::from_env(),
    };
    let result = match cli.command {
        Command::Broker { port, bind } => broker(home, port, bind),
        Command::Status(args) => return cli::exit(cli::status::run(&home, &args)),
        Command::Requests(args) => return cli::exit(cli::requests::run(&home, &args)),
        Command::Audit(args) => return cli::exit(cli::audit::run(&home, &args)),
        Command::Cancel(args) => return cli::exit(cli::cancel::run(&home, &args)),
        Command::Call(args) => return cli::call::run(&home, &args),
        Command::Tools { command } => return cli::exit(cli::tools::run(&home, &command)),
        Command::Webhook { command } => return cli::exit(cli::webhook::run(&home, &command)),
        Command::ServeTool(args) => serve_tool::run(&home, args),
        Command::Service { command } => return cli::service::run(&home, &command),
        Command::Doctor(args) => return cli::doctor::run(&home, &args),
        Command::Completions(args) => cli::completions::print(Cli::command(), &args),
        Command::Man { out } => cli::completions::man(Cli::command(), &out),
        Command::Client { command } => print(match command {
            ClientCommand::Add { name, can_message } => {
                leo_broker::admin::client_add(&home, &name, &can_message)
            }
            ClientCommand::List => leo_broker::admin::client_list(&home),
            ClientCommand::Rm { name } => leo_broker::admin::client_rm(&home, &name),
        }),
        Command::Agent { command } => print(match command {
            AgentCommand::Add { name } => leo_broker::agent_tokens::add(&home, &name),
            AgentCommand::List => leo_broker::agent_tokens::list(&home),
            AgentCommand::Rm { name } => leo_broker::agent_tokens::rm(&home, &name),
        }),
        Command::Device { command } => print(match command {
            DeviceCommand::Pair { name } => leo_broker::admin::device_pair(&home, &name),
            DeviceCommand::List => leo_broker::admin::device_list(&home),
            DeviceCommand::Rm { name } => leo_broker::admin::device_rm(&home, &name),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed stdout (`leo status | head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("leo: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Colour in logs only on a terminal, and never with `NO_COLOR` set (no-color.org): a log file
/// or a pipe gets plain text that `grep` reads.
fn log_colour() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

fn broker(home: Home, port: Option<u16>, bind: Option<IpAddr>) -> anyhow::Result<()> {
    // One thread. A call crosses the broker as a handful of short steps (an IPC frame, an SSE
    // event, a claim, a result); on a work-stealing pool each step woke another worker, and those
    // hand-offs (5 futex calls and 6 extra context switches per call) cost more than the work.
    // Measured by `leo-bench` on 2 cores: the broker's leg of a call (IPC → broker → app →
    // result) fell from about 300 to 190 µs p50. Throughput is bounded by one core instead,
    // which still carries over 16,000 calls/s (bench/results.md).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let mut prepared = server::prepare(home)?;
        if port.is_some() || bind.is_some() {
            let mut config = (*prepared.config).clone();
            if let Some(port) = port {
                config.web.port = port;
            }
            if let Some(bind) = bind {
                config.web.bind = bind;
            }
            prepared.config = std::sync::Arc::new(config);
        }
        let stop = server::signals();
        let listeners = server::bind(&prepared).await?;
        let tcp = match &listeners.tcp {
            Some(l) => Some(l.local_addr().context("cannot read the TCP address")?),
            None => None,
        };
        banner::print(&prepared.home, tcp)?;
        server::run(prepared, listeners, stop).await?;
        anyhow::Ok(())
    })
}
