//! `leo`: the broker daemon and the operator CLI. Thin: parse flags, call the library, map
//! errors to exit codes. Logs go to stderr (`RUST_LOG`); stdout is for what the user asked for.

#![allow(clippy::print_stdout)]

use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use leo_broker::home::Home;
use leo_broker::server;

mod cli;
mod serve_tool;

#[derive(Parser)]
#[command(
    name = "leo",
    version,
    about = "Leo client tools: let apps offer tools to AI agents"
)]
struct Cli {
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
    /// Paired devices: tokens for apps on other devices.
    Device {
        #[command(subcommand)]
        command: DeviceCommand,
    },
    /// What runs now: apps, agents, tools by group, pending calls.
    #[command(after_help = cli::EXIT_CODES)]
    Status(cli::status::StatusArgs),
    /// The pending calls, one line each: who asked for what, and for how long.
    #[command(after_help = cli::EXIT_CODES)]
    Requests(cli::requests::RequestsArgs),
    /// Call a client tool as an agent would, and print its result.
    #[command(after_help = cli::CALL_HELP)]
    Call(cli::call::CallArgs),
    /// Make any program a client tool: each call runs COMMAND with the arguments on stdin.
    ServeTool(serve_tool::Args),
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
        .init();
    let result = match cli.command {
        Command::Broker { port, bind } => broker(port, bind),
        Command::Status(args) => return cli::exit(cli::status::run(&Home::from_env(), &args)),
        Command::Requests(args) => {
            return cli::exit(cli::requests::run(&Home::from_env(), &args));
        }
        Command::Call(args) => return cli::call::run(&Home::from_env(), &args),
        Command::ServeTool(args) => serve_tool::run(args),
        Command::Client { command } => {
            let home = Home::from_env();
            print(match command {
                ClientCommand::Add { name, can_message } => {
                    leo_broker::admin::client_add(&home, &name, &can_message)
                }
                ClientCommand::List => leo_broker::admin::client_list(&home),
                ClientCommand::Rm { name } => leo_broker::admin::client_rm(&home, &name),
            })
        }
        Command::Device { command } => {
            let home = Home::from_env();
            print(match command {
                DeviceCommand::Pair { name } => leo_broker::admin::device_pair(&home, &name),
                DeviceCommand::List => leo_broker::admin::device_list(&home),
                DeviceCommand::Rm { name } => leo_broker::admin::device_rm(&home, &name),
            })
        }
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

fn broker(port: Option<u16>, bind: Option<IpAddr>) -> anyhow::Result<()> {
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
        let mut prepared = server::prepare(Home::from_env())?;
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
        print_banner(&prepared.home, tcp)?;
        server::run(prepared, listeners, stop).await?;
        anyhow::Ok(())
    })
}

/// What a person needs to connect an app and an agent, on stdout.
fn print_banner(home: &Home, tcp: Option<std::net::SocketAddr>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match tcp {
        Some(addr) => writeln!(out, "leo broker listening on http://{addr}")?,
        None => writeln!(
            out,
            "leo broker listening (TCP disabled by web.enabled: false)"
        )?,
    }
    writeln!(out, "  unix socket:   {}", home.api_socket().display())?;
    writeln!(out, "  sidecar IPC:   {}", home.sidecar_socket().display())?;
    writeln!(
        out,
        "  app token:     {} (operator)",
        home.operator_token().display()
    )?;
    let base = tcp
        .map(|a| format!("http://{a}"))
        .unwrap_or_else(|| "http://localhost".into());
    if tcp.is_some() {
        writeln!(
            out,
            "  web console:   {base}/ (log in with the operator token)"
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Connect an app: any program as a tool, or the SDK (leo-app), or the HTTP API:"
    )?;
    writeln!(
        out,
        "  leo serve-tool --name NAME --description TEXT -- COMMAND ARGS…   (try it: leo call NAME '{{…}}')"
    )?;
    writeln!(
        out,
        "  curl -N -H \"Authorization: Bearer $(cat {})\" '{base}/api/v1/events?client_tools=1'",
        home.operator_token().display()
    )?;
    writeln!(out)?;
    let leo_home = home.root.display();
    writeln!(out, "Connect an agent (leo-mcp is the stdio MCP server):")?;
    writeln!(
        out,
        "  Claude Code: claude mcp add --transport stdio --scope user -e LEO_HOME={leo_home} leo -- leo-mcp --agent claude"
    )?;
    writeln!(
        out,
        "  opencode (opencode.json): \"mcp\": {{\"leo\": {{\"type\": \"local\", \"command\": [\"leo-mcp\", \"--agent\", \"opencode\"], \"environment\": {{\"LEO_HOME\": \"{leo_home}\"}}}}}}"
    )?;
    writeln!(
        out,
        "  codex: codex mcp add leo --env LEO_HOME={leo_home} -- leo-mcp --agent codex   (or [mcp_servers.leo] in ~/.codex/config.toml)"
    )?;
    out.flush()
}
