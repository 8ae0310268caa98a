//! Broker scale: many sidecar sessions (IPC clients speaking its frames), 64 tools, one
//! registration change; how long until every session has the new tool set, the broker's
//! memory, and calls per second through the broker. The app is `crate::app` (on the SDK; it
//! answers every tool with one text block `ok`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leo_testkit::{Broker, Ipc};
use serde_json::{Value, json};

use crate::report::Report;

fn bench_tools(n: usize) -> Vec<crate::app::BenchTool> {
    (0..n)
        .map(|i| crate::app::BenchTool {
            name: format!("tool_{i:02}"),
            description: format!("Bench tool {i} (v1)"),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            content: json!([{"type": "text", "text": "ok"}]),
        })
        .collect()
}

fn tools(n: usize, tag: &str) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                json!({
                    "name": format!("tool_{i:02}"),
                    "description": format!("Bench tool {i} ({tag})"),
                    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}
                })
            })
            .collect(),
    )
}

#[allow(
    clippy::too_many_lines,
    reason = "a measurement or probe script read top to bottom; not split yet"
)]
pub async fn run(report: &mut Report, sessions: usize, quick: bool) -> anyhow::Result<()> {
    report.section(&format!("Broker scale: {sessions} sessions, 64 tools"));
    let broker = Broker::start_quiet("").await;
    let idle = broker.rss_kib();
    let http = broker.http();
    // The app registers v1 of the group through the SDK; the change below is v2 of the same
    // group, posted with the app's client_id (same names, new descriptions).
    let app = crate::app::serve(broker.home(), "bench", bench_tools(64), true).await?;
    let register = |tag: &'static str| {
        let http = http.clone();
        let client = app.client_id.clone();
        async move {
            http.post(
                "/api/v1/client-tools",
                &json!({"client_id": client, "group": "bench", "tools": tools(64, tag)}),
            )
            .await
        }
    };
    let sock = broker.home().join("run/sidecar.sock");
    let token = broker.agent_token();
    let mut ipcs = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let (ipc, _) = Ipc::hello(&sock, &token, &format!("agent-{i}")).await;
        ipcs.push(ipc);
    }
    let with_sessions = broker.rss_kib();
    // One change; every session must get one `tools` frame with the new revision.
    let started = Instant::now();
    let reg = register("v2").await;
    let revision = reg.data()["revision"].as_u64().unwrap_or_default();
    let mut waits = tokio::task::JoinSet::new();
    for mut ipc in ipcs {
        waits.spawn(async move {
            loop {
                let f = ipc.recv_of("tools").await;
                if f["revision"].as_u64() == Some(revision) {
                    return (ipc, Instant::now());
                }
            }
        });
    }
    let mut last = started;
    let mut ipcs = Vec::with_capacity(sessions);
    while let Some(done) = waits.join_next().await {
        let (ipc, at) = done?;
        last = last.max(at);
        ipcs.push(ipc);
    }
    let fanout = last - started;
    report.row(
        "registration change → every session has the new list",
        format!("{:.1} ms", fanout.as_secs_f64() * 1e3),
        &format!("{sessions} sessions, POST to last `tools` frame"),
    );
    report.row(
        "broker RSS, idle",
        format!("{:.1} MiB", idle as f64 / 1024.0),
        "",
    );
    report.row(
        &format!("broker RSS, {sessions} sessions + 64 tools"),
        format!("{:.1} MiB", with_sessions as f64 / 1024.0),
        "target: under 100 MiB",
    );

    // Calls per second: 64 sessions each keep one call in flight; the app answers at once.
    let calls = if quick { 2_000 } else { 20_000 };
    let callers: Vec<Ipc> = ipcs.into_iter().take(64).collect();
    let per = calls / callers.len();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut ipc in callers {
        tasks.spawn(async move {
            for c in 0..per as u64 {
                ipc.call(c, "tool_00", json!({"text": "x"})).await;
                let f = ipc.recv_of("result").await;
                assert!(f["outcome"]["content"].is_array(), "{f}");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r?;
    }
    let elapsed = started.elapsed();
    let total = per * 64;
    report.row(
        "calls through the broker",
        format!("{:.0} calls/s", total as f64 / elapsed.as_secs_f64()),
        &format!(
            "{total} calls, 64 sessions with one in flight each, the SDK app on the unix socket"
        ),
    );
    report.row(
        "broker RSS after the calls",
        format!("{:.1} MiB", broker.rss_kib() as f64 / 1024.0),
        "",
    );
    let served = app.served.load(Ordering::SeqCst);
    anyhow::ensure!(served >= total, "the app served {served} of {total} calls");
    drop(app);
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
