//! The one clap tree of `leo`: every command and its arguments, each command's own arguments
//! declared next to its code (`commands/`, `admin`, `agent`, `serve_tool`).

use std::net::IpAddr;

use clap::{Parser, Subcommand};

use crate::{admin, agent, commands, remote, serve_tool, tls};

#[derive(Parser)]
#[command(
    name = "leo",
    version,
    about = "Leo client tools: let apps offer tools to AI agents"
)]
pub struct Cli {
    /// The broker's home, as LEO_HOME sets it [default: ~/.leo].
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "LEO_HOME",
        hide_env_values = true
    )]
    pub home: Option<std::path::PathBuf>,
    /// A broker on another host, `https://HOST:PORT` (or `http://`) of its TCP listener, for
    /// status, requests, audit, cancel, tools and webhook. Its token comes from LEO_TOKEN or
    /// --token-file; an https:// broker's CA file from LEO_CA_FILE. Given before the command
    /// (`leo --url URL status`), as docker's `-H`: after it, `--url` is the command's own
    /// (`leo webhook add --url` is where the webhook's calls go).
    #[arg(long, value_name = "URL", env = "LEO_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// With --url: the file holding the token to present (instead of LEO_TOKEN).
    #[arg(
        long,
        value_name = "PATH",
        env = "LEO_TOKEN_FILE",
        hide_env_values = true,
        requires = "url"
    )]
    pub token_file: Option<std::path::PathBuf>,
    /// A broker saved with `leo remote add NAME`, for this command only (instead of LEO_URL,
    /// or of the one `leo remote use` chose). Given before the command, as --url.
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

impl Command {
    /// True for the commands that speak the broker's HTTP API, and so take `--url`.
    pub fn takes_url(&self) -> bool {
        matches!(
            self,
            Command::Status(_)
                | Command::Requests(_)
                | Command::Audit(commands::audit::AuditArgs { command: None, .. })
                | Command::Cancel(_)
                | Command::Approvals(_)
                | Command::Approve(_)
                | Command::Deny(_)
                | Command::Tools { .. }
                | Command::Webhook { .. }
        )
    }
}

#[derive(Subcommand)]
pub enum Command {
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
        command: admin::ClientCommand,
    },
    /// The cluster of a PostgreSQL store: the key its instances forward with.
    Cluster {
        #[command(subcommand)]
        command: crate::cluster::ClusterCommand,
    },
    /// Per-agent tokens: a token that alone opens sessions under one agent name.
    Agent {
        #[command(subcommand)]
        command: agent::AgentCommand,
    },
    /// Paired devices: tokens for apps on other devices.
    Device {
        #[command(subcommand)]
        command: admin::DeviceCommand,
    },
    /// Brokers on other hosts saved by name: their URL, token and CA (`leo remote add`).
    Remote {
        #[command(subcommand)]
        command: remote::RemoteCommand,
    },
    /// HTTPS for the TCP listener: a local CA and a server certificate (`leo tls init`).
    Tls {
        #[command(subcommand)]
        command: tls::TlsCommand,
    },
    /// What runs now: apps, agents, tools by group, pending calls.
    #[command(after_help = commands::EXIT_CODES)]
    Status(commands::status::StatusArgs),
    /// The audit trail: every authenticated change, who made it and with which token.
    #[command(after_help = commands::EXIT_CODES, args_conflicts_with_subcommands = true)]
    Audit(commands::audit::AuditArgs),
    /// The pending calls, one line each: who asked for what, and for how long.
    #[command(after_help = commands::EXIT_CODES)]
    Requests(commands::requests::RequestsArgs),
    /// Cancel a pending call (its agent gets `cancelled`), as the console's Cancel button does.
    #[command(after_help = commands::CANCEL_HELP)]
    Cancel(commands::cancel::CancelArgs),
    /// The calls that wait for a person's approval before any app sees them.
    #[command(after_help = commands::APPROVALS_HELP)]
    Approvals(commands::approvals::ApprovalsArgs),
    /// Approve a call that awaits approval: it goes on to its app (with --edit, with other
    /// arguments).
    #[command(after_help = commands::APPROVALS_HELP)]
    Approve(commands::approvals::ApproveArgs),
    /// Deny a call that awaits approval: its agent gets `denied: <reason>`.
    #[command(after_help = commands::APPROVALS_HELP)]
    Deny(commands::approvals::DenyArgs),
    /// Client tools: approve a changed definition.
    Tools {
        #[command(subcommand)]
        command: commands::tools::ToolsCommand,
    },
    /// Webhook providers: apps the broker calls over HTTP instead of an event stream.
    Webhook {
        #[command(subcommand)]
        command: commands::webhook::WebhookCommand,
    },
    /// Call a client tool as an agent would, and print its result.
    #[command(after_help = commands::CALL_HELP)]
    Call(commands::call::CallArgs),
    /// Make any program a client tool: each call runs COMMAND with the arguments on stdin.
    ServeTool(serve_tool::Args),
    /// Run the broker at login and restart it after a crash (systemd user unit, LaunchAgent).
    #[command(after_help = commands::service::HELP)]
    Service {
        #[command(subcommand)]
        command: commands::service::ServiceCommand,
    },
    /// Check the broker, its files and every harness's MCP configuration; say how to fix each
    /// problem.
    #[command(after_help = commands::doctor::HELP)]
    Doctor(commands::doctor::DoctorArgs),
    /// Print a shell completion script: `leo completions bash > ~/.local/share/bash-completion/completions/leo`.
    Completions(commands::completions::CompletionsArgs),
    /// Write the man pages of `leo` and its commands into DIR (`cargo xtask man`).
    #[command(hide = true)]
    Man {
        /// The directory to write `leo.1`, `leo-broker.1`, … into.
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
}
