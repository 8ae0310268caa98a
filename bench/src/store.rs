//! The state store alone (`leo_store`, `state/leo.db`): what durability costs per call
//! with the relay taken away.
//!
//! The relay rows cannot say it: the store's writer is a thread of its own, the app's answer
//! waits for one commit while the agent's result does not, and on two loaded cores its CPU
//! shows up as contention more than as a step of the round trip. So this drives the broker's
//! own store, the code the broker runs, with what one call records, in the order the broker
//! records it, each step committed before the next as when a call is alone:
//! 1. the call parked (`Op::Park`, queued when the agent's call arrives; not waited for);
//! 2. its claim and its result (`Op::Claim` + `Op::End` with the outcome, one request with
//!    `claim: true`); the app's HTTP answer waits for this commit;
//! 3. the outcome dropped once the sidecar has it (`Op::Delivered`; not waited for).
//!
//! Measured: the wall time of the three commits and of step 2 alone, and the CPU time of the
//! writer thread per call (`/proc/self/task/TID/schedstat`, nanoseconds), for
//! `store.synchronous: normal` (the default) and `full`, taking turns block by block.

use std::path::Path;
use std::time::Instant;

use leo_bench::payload::{self, PAYLOADS, Payload};
use leo_protocol::ipc::RawOutcome;
use leo_protocol::requests::Request;
use leo_store::{Op, Store, StoredCall, Synchronous};
use serde_json::value::RawValue;

use crate::relay::{Opts, us};
use crate::report::{Report, pct};

/// Endings the store keeps (the broker's default `requests.remember_settled`).
const REMEMBER: usize = 4096;

/// One store on a fresh database, and what it measured for the current payload.
struct Bench {
    sync: Synchronous,
    store: Store,
    /// The writer thread, for its CPU time.
    writer: Option<u32>,
    n: u64,
    all: Vec<u64>,
    waited: Vec<u64>,
    cpu_ns: u64,
}

/// The ids of this process's threads named `leo-store`.
fn writer_threads() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "leo-store")
        })
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// CPU time of thread `tid` so far, in nanoseconds.
fn thread_ns(tid: Option<u32>) -> u64 {
    tid.and_then(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/schedstat")).ok())
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Bench {
    fn open(dir: &Path, sync: Synchronous) -> anyhow::Result<Bench> {
        let before = writer_threads();
        let path = dir.join(format!("{sync:?}.db"));
        let (store, _) = Store::open(&path, sync, REMEMBER).map_err(anyhow::Error::msg)?;
        // The writer names itself once it runs: wait for a `leo-store` thread not seen before.
        let mut writer = None;
        for _ in 0..200 {
            writer = writer_threads().into_iter().find(|t| !before.contains(t));
            if writer.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(Bench {
            sync,
            store,
            writer,
            n: 0,
            all: Vec::new(),
            waited: Vec::new(),
            cpu_ns: 0,
        })
    }

    /// The ops of call `n` as the broker makes them.
    fn ops(&self, n: u64, outcome: &RawOutcome) -> anyhow::Result<[Vec<Op>; 3]> {
        let id = format!("req_bench{n:08}");
        let arguments = RawValue::from_string(serde_json::to_string(&payload::arguments())?)?;
        let park = Op::Park(StoredCall {
            request: Request {
                id: id.clone().into(),
                agent: "bench".into(),
                session: "s1".into(),
                group: "bench".into(),
                tool: "echo_small".into(),
                arguments,
                timeout_s: Some(600),
                created_at: "2026-12-03T00:00:00Z".into(),
                owner: None,
                traceparent: None,
            },
            local_id: n,
            deadline_ms: Some(leo_store::now_ms() + 600_000),
            claimed_by: None,
            approval: None,
        });
        let settle = vec![
            Op::Claim {
                id: id.clone(),
                by: "cl_bench".into(),
            },
            Op::End {
                id: id.clone().into(),
                how: leo_protocol::outcome::CallOutcome::Result,
                agent: "bench".into(),
                session: "s1".into(),
                local_id: n,
                outcome: Some(outcome.clone()),
            },
        ];
        Ok([vec![park], settle, vec![Op::Delivered { id }]])
    }

    async fn commit(&self, ops: Vec<Op>) -> anyhow::Result<()> {
        self.store.send(ops);
        self.store.committed().await.map_err(anyhow::Error::msg)
    }

    /// `calls` calls, each step committed before the next.
    async fn block(&mut self, outcome: &RawOutcome, calls: usize) -> anyhow::Result<()> {
        let cpu = thread_ns(self.writer);
        for _ in 0..calls {
            self.n += 1;
            let [park, settle, delivered] = self.ops(self.n, outcome)?;
            let t = Instant::now();
            self.commit(park).await?;
            let s = Instant::now();
            self.commit(settle).await?;
            self.waited.push(s.elapsed().as_micros() as u64);
            self.commit(delivered).await?;
            self.all.push(t.elapsed().as_micros() as u64);
        }
        self.cpu_ns += thread_ns(self.writer).saturating_sub(cpu);
        Ok(())
    }

    fn rows(&mut self, report: &mut Report, p: Payload) {
        let n = self.all.len().max(1) as f64;
        let (mut all, mut waited) = (
            std::mem::take(&mut self.all),
            std::mem::take(&mut self.waited),
        );
        all.sort_unstable();
        waited.sort_unstable();
        let cpu = std::mem::take(&mut self.cpu_ns) as f64 / n / 1e3;
        let sync = match self.sync {
            Synchronous::Normal => "normal",
            Synchronous::Full => "full",
        };
        let cpu = if self.writer.is_some() {
            format!("{cpu:.0} µs")
        } else {
            "n/a".into()
        };
        report.row(
            &format!("{}: store, `synchronous: {sync}`, per call", p.label),
            format!(
                "p50 {} · p99 {} (the claim + result commit alone: p50 {} · p99 {})",
                us(pct(&all, 0.50)),
                us(pct(&all, 0.99)),
                us(pct(&waited, 0.50)),
                us(pct(&waited, 0.99))
            ),
            &format!("writer thread CPU {cpu} per call; 3 commits per call"),
        );
    }
}

/// The store's rows: both settings, each payload, taking turns in blocks.
pub async fn run(report: &mut Report, opts: &Opts) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut benches = [
        Bench::open(dir.path(), Synchronous::Normal)?,
        Bench::open(dir.path(), Synchronous::Full)?,
    ];
    report.section(&format!(
        "The state store alone (`state/leo.db`), {} calls per payload, each step committed before the next",
        opts.calls
    ));
    report.row(
        "what a call records",
        "park · claim + result (with its content) · outcome delivered: 3 transactions".into(),
        "`leo_store` as the broker runs it, no relay; only the claim + result commit is waited for by the app's answer, and neither is by the agent",
    );
    let chosen = PAYLOADS
        .into_iter()
        .filter(|p| opts.payloads.is_empty() || opts.payloads.iter().any(|t| t == p.tool));
    for p in chosen {
        eprintln!("store: {}", p.label);
        // As the broker holds an app's result: its blocks as the JSON text the app posted.
        let blocks = p.content().as_array().cloned().unwrap_or_default();
        let outcome = RawOutcome::Content {
            content: blocks
                .iter()
                .map(|b| serde_json::value::RawValue::from_string(b.to_string()))
                .collect::<Result<_, _>>()?,
            structured_content: None,
        };
        for b in &mut benches {
            b.block(&outcome, opts.warmup).await?;
            b.all.clear();
            b.waited.clear();
            b.cpu_ns = 0;
        }
        let rounds = 20.min(opts.calls.max(1));
        for round in 0..rounds {
            let n = opts.calls / rounds + usize::from(round < opts.calls % rounds);
            for b in &mut benches {
                b.block(&outcome, n).await?;
            }
        }
        for b in &mut benches {
            b.rows(report, p);
        }
    }
    Ok(())
}
