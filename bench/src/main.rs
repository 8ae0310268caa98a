//! `leo-bench`: measures the relay and the broker, prints a table, writes `bench/results.md`.
//!
//! Run it on release binaries (`bench/run.sh`, or build `leo-cli`, `leo-mcp` and
//! `leo-bench` with `--release` and run `target/release/leo-bench`): it starts the real `leo`,
//! `leo-mcp` and `leo-bench-floor` built next to it. Every number is measured in the same run
//! as its baselines, and results are printed as ratios; nothing here is asserted.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

mod app;
mod cluster_scale;
mod conn;
mod mcp_http;
mod relay;
mod report;
mod scale;
mod store;
mod usage;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    /// Relay round trip and its baselines.
    Relay,
    /// Broker scale.
    Scale,
    /// A cluster of three instances on PostgreSQL at scale; only when asked for by name.
    #[value(name = "cluster-scale", alias = "cluster_scale")]
    ClusterScale,
}

#[derive(Parser)]
#[command(about = "Benchmarks of the Leo relay and broker")]
struct Args {
    /// Fewer iterations, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "bench/results.md")]
    out: std::path::PathBuf,
    /// Sessions for the broker-scale run (default 1,000) and the cluster-scale run (default
    /// 10,000).
    #[arg(long)]
    sessions: Option<usize>,
    /// App event streams for the cluster-scale run (default 1,000), the serving app's included.
    #[arg(long, default_value_t = 1000)]
    app_streams: usize,
    /// Calls made from each instance's sessions in the cluster-scale run.
    #[arg(long, default_value_t = 300)]
    cluster_calls: usize,
    /// The PostgreSQL server of the cluster-scale run (a URL of any database on it): a new
    /// database is made on it for the run and dropped after.
    #[arg(long, default_value = "postgresql://root@127.0.0.1:5432/postgres")]
    scale_postgres: String,
    /// Sequential calls per payload and system for the latency rows (default 10,000; quick 500).
    #[arg(long)]
    calls: Option<usize>,
    /// Calls per throughput row, shared by the agents (default 4,000; quick 640).
    #[arg(long)]
    throughput_calls: Option<usize>,
    /// Relay systems to run: floor, leo, leo-claim, py-http, py-stdio, py-sdk, ts-sdk, ts-stdio
    /// (default: all).
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Tools the latency rows call: echo_small, echo_64k, image_256k (default: all).
    #[arg(long, value_delimiter = ',')]
    payloads: Vec<String>,
    /// Throughput rows: concurrent agents (default 1,8,64).
    #[arg(long, value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Another build to measure beside this one, as NAME=DIR (DIR holds its `leo` and
    /// `leo-mcp`); adds rows `leo@NAME` and `leo, claim then result@NAME`. Repeatable.
    #[arg(long, value_name = "NAME=DIR")]
    baseline: Vec<String>,
    /// Also measure this build with `store.synchronous: full` (rows `leo@sync-full`).
    #[arg(long)]
    sync_full: bool,
    /// Also measure this build with `leo-mcp --url`, the IPC over the TCP listener (rows
    /// `leo@url`).
    #[arg(long)]
    url: bool,
    /// Also measure this build's `/mcp` (MCP over Streamable HTTP to the broker, no
    /// `leo-mcp`), over HTTP and over HTTPS (rows `leo@mcp`, `leo@mcp-https`).
    #[arg(long)]
    mcp: bool,
    /// Also measure this build on the PostgreSQL database at this URL (rows `leo@postgres`;
    /// `createdb leo_bench` first). One relay system per run (`--systems leo`): brokers running
    /// at once on one database wait for its lease.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Also measure this build as three instances of a cluster on the PostgreSQL database at
    /// this URL (rows `leo@cluster`: the app on the leader, the agents on the followers). A
    /// database of its own (`createdb leo_bench_cluster`): a broker of `--postgres` still holds
    /// its database's lease when the run ends.
    #[arg(long, value_name = "URL")]
    cluster: Option<String>,
    /// Run only these parts (default: relay and scale; cluster-scale only when named).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Part>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let command = std::iter::once("leo-bench".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let mut report = report::Report::new(command);
    let wants =
        |p: Part| args.only.contains(&p) || (args.only.is_empty() && p != Part::ClusterScale);
    if wants(Part::Relay) {
        let mut variants = args
            .baseline
            .iter()
            .map(|b| relay::Variant::parse_baseline(b))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if args.sync_full {
            variants.push(relay::Variant::sync_full());
        }
        if args.url {
            variants.push(relay::Variant::url());
        }
        if args.mcp {
            variants.push(relay::Variant::mcp(false));
            variants.push(relay::Variant::mcp(true));
        }
        if let Some(url) = &args.postgres {
            variants.push(relay::Variant::postgres(url));
        }
        if let Some(url) = &args.cluster {
            variants.push(relay::Variant::cluster(url));
        }
        let opts = relay::Opts {
            variants,
            systems: args.systems.clone(),
            calls: args.calls.unwrap_or(if args.quick { 500 } else { 10_000 }),
            warmup: if args.quick { 50 } else { 500 },
            throughput_calls: args
                .throughput_calls
                .unwrap_or(if args.quick { 640 } else { 4_000 }),
            payloads: args.payloads.clone(),
            concurrency: if args.concurrency.is_empty() {
                vec![1, 8, 64]
            } else {
                args.concurrency.clone()
            },
        };
        relay::run(&mut report, &opts).await?;
    }
    if wants(Part::Scale) {
        let sessions = args.sessions.unwrap_or(1000);
        let sessions = if args.quick {
            sessions.min(100)
        } else {
            sessions
        };
        scale::run(&mut report, sessions, args.quick).await?;
    }
    if wants(Part::ClusterScale) {
        let quick = |n: usize, small: usize| if args.quick { n.min(small) } else { n };
        let opts = cluster_scale::Opts {
            sessions: quick(args.sessions.unwrap_or(10_000), 300),
            app_streams: quick(args.app_streams, 50),
            calls: quick(args.cluster_calls, 100),
            server: args.scale_postgres.clone(),
        };
        cluster_scale::run(&mut report, &opts).await?;
    }
    let text = report.markdown();
    println!("{text}");
    std::fs::write(&args.out, &text)?;
    eprintln!("written to {}", args.out.display());
    Ok(())
}
