//! Command-line flags and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::rmcp_client::ClientMode;
use crate::run::{Kind, RunOptions};

#[derive(Debug, Parser)]
#[command(
    name = "harness-probe",
    version,
    about = "Measures which MCP clients re-list tools on notifications/tools/list_changed"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run as the stdio MCP server a harness launches, recording what the client does.
    Serve {
        /// The record file (JSON lines, appended). Default: $HARNESS_PROBE_OUT.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Milliseconds between answering the first tools/list and changing the list.
        /// Default: $HARNESS_PROBE_NOTIFY_DELAY_MS, else 1000.
        #[arg(long)]
        notify_delay_ms: Option<u64>,
    },
    /// Start a client that launches the probe, wait, and print one verdict line per session.
    Run {
        /// Seconds to let the client run before stopping it.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// Seconds a client must stay connected after the notification, without listing again,
        /// for a `no`.
        #[arg(long, default_value_t = 5)]
        grace: u64,
        /// Run directory (records, generated configs). Default: a new one under $TMPDIR.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Where to write the verdict JSON. Default: DIR/verdict.json.
        #[arg(long)]
        verdict: Option<PathBuf>,
        /// Send the client's stdout and stderr (and no stdin) to this file.
        #[arg(long)]
        log: Option<PathBuf>,
        /// Human name of the harness, e.g. "Claude Code". Default: the client's name.
        #[arg(long)]
        harness: Option<String>,
        /// The clientInfo.name pattern for the table. Default: the client's name.
        #[arg(long)]
        pattern: Option<String>,
        /// How the client was driven, in words, for the table.
        #[arg(long)]
        how: Option<String>,
        /// Milliseconds the probe waits after the first tools/list before it changes the list
        /// and notifies (passed to every probe the client starts).
        #[arg(long, default_value_t = 1000)]
        notify_delay_ms: u64,
        /// `harness` (goes into the table) or `sdk` (a reference client).
        #[arg(long, value_enum, default_value_t = Kind::Harness)]
        kind: Kind,
        /// The client command; {bin} {out} {dir} {mcp_config} {opencode_config} {codex_home}
        /// are replaced.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Merge verdict files and published claims into the capability table.
    Table {
        /// Verdict files and published-claims files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write the table here instead of to stdout.
        #[arg(long)]
        write: Option<PathBuf>,
    },
    /// rmcp's client as a reference client: launches $HARNESS_PROBE_BIN serve.
    RmcpClient {
        #[arg(long, value_enum, default_value_t = ClientMode::Relist)]
        mode: ClientMode,
    },
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("harness_probe=info,warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("harness-probe: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let is_serve = matches!(cli.command, Command::Serve { .. });
    let result = runtime.block_on(dispatch(cli.command));
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness-probe: {e:#}");
            ExitCode::from(1)
        }
    };
    if is_serve {
        // A pending read on stdin cannot be cancelled; do not wait for it at shutdown.
        runtime.shutdown_timeout(Duration::from_millis(200));
    }
    code
}

async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve {
            out,
            notify_delay_ms,
        } => {
            let out = out
                .or_else(|| std::env::var_os("HARNESS_PROBE_OUT").map(PathBuf::from))
                .ok_or_else(|| {
                    anyhow::anyhow!("no record file: pass --out FILE or set HARNESS_PROBE_OUT")
                })?;
            let notify_delay_ms = notify_delay_ms
                .or_else(|| {
                    std::env::var("HARNESS_PROBE_NOTIFY_DELAY_MS")
                        .ok()
                        .and_then(|v| v.parse().ok())
                })
                .unwrap_or(1000);
            crate::serve::serve(crate::serve::ServeOptions {
                out,
                notify_delay: Duration::from_millis(notify_delay_ms),
            })
            .await
        }
        Command::Run {
            timeout,
            grace,
            dir,
            verdict,
            log,
            harness,
            pattern,
            how,
            notify_delay_ms,
            kind,
            command,
        } => {
            let (file, path) = crate::run::run(RunOptions {
                timeout: Duration::from_secs(timeout),
                grace: Duration::from_secs(grace),
                dir,
                verdict,
                log,
                harness,
                pattern,
                how,
                notify_delay_ms,
                kind,
                command,
            })
            .await?;
            print_lines(&crate::run::verdict_lines(&file));
            eprintln!("harness-probe: verdict written to {}", path.display());
            Ok(())
        }
        Command::Table { files, write } => {
            let text = crate::table::table_text(&files)?;
            match write {
                Some(path) => std::fs::write(&path, text)?,
                None => print_lines(&[text.trim_end().to_owned()]),
            }
            Ok(())
        }
        Command::RmcpClient { mode } => crate::rmcp_client::run(mode).await,
    }
}

/// stdout is the user's output here (`run`'s verdict lines, `table` without `--write`).
#[allow(clippy::print_stdout)]
fn print_lines(lines: &[String]) {
    for line in lines {
        println!("{line}");
    }
}
