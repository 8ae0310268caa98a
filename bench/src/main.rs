//! `leo-bench`: measures the relay and the broker, prints a table, writes `bench/results.md`.
//!
//! Run it on release binaries (`cargo run --release -p leo-bench`): it starts the real `leo`
//! (and `leo-mcp`) built next to it. Every number is measured in the same run as its baseline,
//! and results are printed as ratios; nothing here is asserted.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod report;
mod scale;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Benchmarks of the Leo relay and broker")]
struct Args {
    /// Fewer iterations, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "bench/results.md")]
    out: std::path::PathBuf,
    /// Sessions for the broker-scale run.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut report = report::Report::new();
    let sessions = if args.quick {
        args.sessions.min(100)
    } else {
        args.sessions
    };
    scale::run(&mut report, sessions, args.quick).await?;
    let text = report.markdown();
    println!("{text}");
    std::fs::write(&args.out, &text)?;
    eprintln!("written to {}", args.out.display());
    Ok(())
}
