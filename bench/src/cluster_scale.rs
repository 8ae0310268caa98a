//! Cluster scale: three `leo broker` instances on one PostgreSQL database (one leads, two
//! follow), many idle agent sessions spread over the three instances' `run/sidecar.sock`, and
//! many app event streams spread over their TCP listeners. It measures what a follower's
//! sessions cost the leader, which holds every session of the cluster: each instance's memory
//! and descriptors before and at full load, the leader's TCP connections, how long one
//! registration change takes to reach every session, and call latency at that load.
//!
//! Why it exists: a follower carries its sessions to the leader, and how it does so (one TCP
//! connection per session, or a few links per follower) decides whether followers add
//! capacity. The bench plays the sessions with raw IPC clients in this process (as `scale.rs`
//! does), not 10,000 `leo-mcp` processes, and counts what the leader holds from `/proc`. A
//! session or stream the cluster refuses is reported with its count and the broker's answer,
//! and the run goes on with those that opened.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use leo_protocol::sse::{Frame, Parser};
use leo_testkit::{Broker, Ipc, bin, cluster};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::report::{Report, pct};

/// Tools the serving app registers (group `bench`); every session's welcome lists them.
const TOOLS: usize = 16;
/// Sessions or streams opened at once while the load is built.
const BATCH: usize = 100;
/// Sessions per instance that make the measured calls, each one call in flight.
const CALLERS: usize = 8;
/// How long a session may wait for the changed tool set before it counts as missed.
const FANOUT_WAIT: Duration = Duration::from_secs(120);
/// Names of the instances in the table, in start order.
const NAMES: [&str; 3] = ["leader", "follower 1", "follower 2"];

/// What `--only cluster-scale` was asked for.
pub struct Opts {
    pub sessions: usize,
    pub app_streams: usize,
    /// Calls made from the sessions of each instance.
    pub calls: usize,
    /// A URL of the PostgreSQL server (any database on it); the bench makes its own database.
    pub server: String,
}

/// One idle agent session and the instance whose socket it is on.
struct Session {
    on: usize,
    ipc: Ipc,
}

/// An instance's resources at one moment.
#[derive(Clone, Copy, Default)]
struct Snap {
    rss_kib: u64,
    fds: usize,
    tcp: Tcp,
}

/// ESTABLISHED TCP sockets a process holds, by where they go.
#[derive(Clone, Copy, Default)]
struct Tcp {
    total: usize,
    /// Accepted on its own listener.
    inbound: usize,
    /// Opened to the leader's listener (a follower's pipes and forwarded requests).
    to_leader: usize,
    /// Opened to PostgreSQL.
    to_db: usize,
}

pub async fn run(report: &mut Report, opts: &Opts) -> anyhow::Result<()> {
    let title = format!(
        "Cluster scale: 3 instances on PostgreSQL, {} sessions, {} app streams",
        opts.sessions, opts.app_streams
    );
    report.section(&title);
    let (soft, hard) = leo_testkit::raise_nofile();
    let server = leo_testkit::postgres::Server::at(&opts.server)
        .await
        .ok_or_else(|| anyhow::anyhow!("no PostgreSQL answers at {}", opts.server))?;
    let db = server.database().await;
    let (config, asked) = config(&db, opts);
    let nodes = start(&config).await?;
    settings_row(report, opts, asked, (soft, hard), &db.name);
    let result = measure(report, opts, &nodes).await;
    drop(nodes);
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(db);
    result
}

/// The instances' `config.yaml`: the database, plain http on loopback between instances, and
/// limits above the load (the broker holds each under half its open-file limit itself).
fn config(db: &leo_testkit::postgres::Database, opts: &Opts) -> (String, (usize, usize)) {
    let max_sessions = opts.sessions + 256;
    let max_connections = opts.sessions + opts.app_streams + 256;
    let yaml = format!(
        "{}web:\n  max_sessions: {max_sessions}\n  max_connections: {max_connections}\n",
        db.config()
    );
    (yaml, (max_sessions, max_connections))
}

fn settings_row(
    report: &mut Report,
    opts: &Opts,
    (sessions, connections): (usize, usize),
    (soft, hard): (u64, u64),
    database: &str,
) {
    let cap = usize::try_from(hard / 2).unwrap_or(usize::MAX);
    report.row(
        "settings",
        format!(
            "web.max_sessions {sessions} (in force {}), web.max_connections {connections} \
             (in force {})",
            sessions.min(cap),
            connections.min(cap)
        ),
        &format!(
            "open-file limit {hard} per process (a broker holds each cap under half of it); \
             bench process soft limit {soft}; {TOOLS} tools; {} calls per instance; \
             `{}`; database {database} on {}, dropped after",
            opts.calls,
            bin("leo").display(),
            opts.server
        ),
    );
}

/// The leader alone first (so it takes the lease), then two followers once it leads, each
/// with a home of its own holding the leader's config and tokens.
async fn start(config: &str) -> anyhow::Result<Vec<Broker>> {
    let leo = bin("leo");
    let leader = Broker::start_quiet_bin(&leo, config).await;
    let id = cluster::instance_id(leader.home());
    wait_leader(&leader, &id).await?;
    let mut nodes = vec![leader];
    for _ in 1..NAMES.len() {
        let home = tempfile::tempdir()?;
        cluster::copy_home(nodes[0].home(), home.path());
        let follower = Broker::start_quiet_in(home, &leo).await;
        wait_leader(&follower, &id).await?;
        nodes.push(follower);
    }
    Ok(nodes)
}

/// Waits until `node` says instance `id` leads.
async fn wait_leader(node: &Broker, id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster::leader(&node.http()).await.as_deref() != Some(id) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no instance led within 60 s:\n{}",
            node.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The load, then the measures at it; the rows as they come.
async fn measure(report: &mut Report, opts: &Opts, nodes: &[Broker]) -> anyhow::Result<()> {
    let leader_port = nodes[0].addr.port();
    let before: Vec<Snap> = nodes.iter().map(|n| snap(n, leader_port)).collect();
    let app = crate::app::serve(nodes[0].home(), "bench", bench_tools("v1"), true).await?;
    let events = Arc::new(AtomicUsize::new(0));
    let wanted = opts.app_streams.saturating_sub(1);
    let (streams, open) = open_streams(report, nodes, wanted, &events).await;
    let sessions = open_sessions(report, nodes, opts.sessions).await;
    let at_load: Vec<Snap> = nodes.iter().map(|n| snap(n, leader_port)).collect();
    usage_rows(report, &before, &at_load);
    gauges_row(report, &nodes[0]).await;
    report.row(
        "bench process open descriptors at full load",
        fds(std::process::id()).to_string(),
        "the sessions' sockets and the app streams' connections",
    );
    let sessions = fanout(report, sessions, nodes, &app.client_id).await?;
    calls(report, sessions, opts.calls, nodes, &events).await;
    report.row(
        "app streams still open at the end",
        format!("{} of {}", open.load(Ordering::SeqCst), streams.len() + 1),
        "the serving app's included",
    );
    drop(streams);
    drop(app);
    Ok(())
}

/// What the leader says it holds at full load: `leo_connected_agents` and
/// `leo_connected_apps` on its `/metrics` (it counts every session and stream of the cluster).
async fn gauges_row(report: &mut Report, leader: &Broker) {
    let page = leader.http().get("/metrics").await;
    let text = page.body.as_str().unwrap_or_default();
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map_or_else(|| "?".to_owned(), str::to_owned)
    };
    report.row(
        "sessions / app streams the leader counts",
        format!(
            "{} / {}",
            gauge("leo_connected_agents"),
            gauge("leo_connected_apps")
        ),
        "at full load: `leo_connected_agents` / `leo_connected_apps` on its `/metrics`",
    );
}

/// The serving app's tools, with descriptions tagged `tag` (a change is a new tag).
fn bench_tools(tag: &str) -> Vec<crate::app::BenchTool> {
    (0..TOOLS)
        .map(|i| crate::app::BenchTool {
            name: format!("tool_{i:02}"),
            description: format!("Bench tool {i} ({tag})"),
            schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            content: json!([{"type": "text", "text": "ok"}]),
        })
        .collect()
}

/// The same tools as the registration body's `tools`.
fn tools_json(tag: &str) -> Value {
    bench_tools(tag)
        .into_iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}))
        .collect()
}

/// `node`'s memory, descriptors and TCP connections now.
fn snap(node: &Broker, leader_port: u16) -> Snap {
    let pid = node.pid();
    Snap {
        rss_kib: leo_testkit::rss_kib(pid),
        fds: fds(pid),
        tcp: established(pid, node.addr.port(), leader_port),
    }
}

/// Open descriptors of `pid` (`/proc/PID/fd`).
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// The inodes of `pid`'s sockets (`/proc/PID/fd/N -> socket:[INODE]`).
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// `pid`'s ESTABLISHED TCP sockets: the lines of `/proc/PID/net/tcp{,6}` in state `01` whose
/// inode is one of its descriptors, sorted by port (its listener's, the leader's, 5432).
fn established(pid: u32, own_port: u16, leader_port: u16) -> Tcp {
    let inodes = socket_inodes(pid);
    let mut tcp = Tcp::default();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let inode = f.get(9).and_then(|i| i.parse::<u64>().ok());
            if f.get(3) != Some(&"01") || !inode.is_some_and(|i| inodes.contains(&i)) {
                continue;
            }
            let port = |addr: &str| {
                let hex = addr.rsplit(':').next().unwrap_or_default();
                u16::from_str_radix(hex, 16).unwrap_or_default()
            };
            let (local, remote) = (port(f[1]), port(f[2]));
            tcp.total += 1;
            tcp.inbound += usize::from(local == own_port);
            tcp.to_leader += usize::from(remote == leader_port && local != own_port);
            tcp.to_db += usize::from(remote == 5432);
        }
    }
    tcp
}

/// `n` app event streams (`?client_tools=1`, each read to its `hello`) over the instances' TCP
/// listeners in turn, `BATCH` at a time, each then read by a task of its own until it ends;
/// stops at the first refused. Returns the readers and how many of the streams are still
/// open (the serving app's counted); the readers count the events they read in `events`.
async fn open_streams(
    report: &mut Report,
    nodes: &[Broker],
    n: usize,
    events: &Arc<AtomicUsize>,
) -> (JoinSet<()>, Arc<AtomicUsize>) {
    let open = Arc::new(AtomicUsize::new(1));
    let mut readers = JoinSet::new();
    let started = Instant::now();
    let mut refused = Vec::new();
    for batch in (0..n).collect::<Vec<_>>().chunks(BATCH) {
        let mut opening = JoinSet::new();
        for &j in batch {
            let http = nodes[j % nodes.len()].http();
            opening.spawn(async move { (j, open_stream(http).await) });
        }
        while let Some(done) = opening.join_next().await {
            match done
                .map_err(panic_text)
                .and_then(|(j, r)| r.map_err(|e| (j, e)))
            {
                Ok(stream) => {
                    open.fetch_add(1, Ordering::SeqCst);
                    readers.spawn(drain(stream, open.clone(), events.clone()));
                }
                Err(e) => refused.push(e),
            }
        }
        if !refused.is_empty() {
            break;
        }
    }
    refused.sort_by_key(|(k, _)| *k);
    let opened = open.load(Ordering::SeqCst);
    let note = match refused.first() {
        Some((j, e)) => format!(
            "REFUSED: {} of the last {BATCH} opened at once, the first stream {j} (on the {}): {e}",
            refused.len(),
            NAMES[j % nodes.len()]
        ),
        None => format!(
            "over the three TCP listeners in turn, opened in {:.1} s; plus the serving app on \
             the leader's `run/leo.sock`",
            started.elapsed().as_secs_f64()
        ),
    };
    report.row("app streams open", format!("{opened} of {}", n + 1), &note);
    (readers, open)
}

/// An app's provider stream as the bench reads it: split into frames by the protocol's SSE
/// parser, their data left unparsed. Every provider stream is sent each call's request, and one
/// JSON parse per stream and call would make the bench, not the cluster, what calls wait on.
struct AppStream {
    body: Incoming,
    parser: Parser,
}

impl AppStream {
    /// The next frame; `None` once the stream ends (or sends a frame over the parser's limit).
    async fn next(&mut self) -> Option<Frame> {
        loop {
            match self.parser.next_frame() {
                Ok(Some(frame)) => return Some(frame),
                Ok(None) => {}
                Err(_) => return None,
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.parser.push(&data);
            }
        }
    }
}

/// Opens one provider stream and reads its `hello`.
async fn open_stream(http: leo_testkit::Http) -> Result<AppStream, String> {
    let headers = [("accept", "text/event-stream")];
    let path = "/api/v1/events?client_tools=1";
    let response = http.open("GET", path, Default::default(), &headers).await;
    if response.status() != 200 {
        return Err(format!("status {}", response.status()));
    }
    let mut stream = AppStream {
        body: response.into_body(),
        parser: Parser::default(),
    };
    match tokio::time::timeout(leo_testkit::WAIT, stream.next()).await {
        Ok(Some(f)) if f.event == "hello" => Ok(stream),
        Ok(Some(f)) => Err(format!("first event {}", f.event)),
        Ok(None) => Err("the stream ended before its hello".into()),
        Err(_) => Err("no hello within the wait".into()),
    }
}

/// Reads `stream` until it ends, counting its events, then counts it closed.
async fn drain(mut stream: AppStream, open: Arc<AtomicUsize>, events: Arc<AtomicUsize>) {
    while stream.next().await.is_some() {
        events.fetch_add(1, Ordering::Relaxed);
    }
    open.fetch_sub(1, Ordering::SeqCst);
}

/// A task's panic as `(index unknown, text)`.
fn panic_text(e: tokio::task::JoinError) -> (usize, String) {
    let text = match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panicked".into()),
        Err(e) => e.to_string(),
    };
    (usize::MAX, text)
}

/// `n` sessions, session `i` on instance `i % 3`'s `run/sidecar.sock`, `BATCH` at a time, each
/// said `hello` with the agent token (agent `agent-i`) and welcomed with the `TOOLS` tools;
/// stops at the first refused and reports it with the count welcomed until then.
async fn open_sessions(report: &mut Report, nodes: &[Broker], n: usize) -> Vec<Session> {
    let socks: Vec<PathBuf> = nodes
        .iter()
        .map(|b| b.home().join("run/sidecar.sock"))
        .collect();
    let token = nodes[0].agent_token();
    let started = Instant::now();
    let mut sessions = Vec::with_capacity(n);
    let mut refused = Vec::new();
    for batch in (0..n).collect::<Vec<_>>().chunks(BATCH) {
        let mut opening = JoinSet::new();
        for &i in batch {
            let (sock, token) = (socks[i % socks.len()].clone(), token.clone());
            opening.spawn(async move { (i, hello(&sock, &token, i).await) });
        }
        while let Some(done) = opening.join_next().await {
            match done
                .map_err(panic_text)
                .and_then(|(i, r)| r.map_err(|e| (i, e)))
            {
                Ok(s) => sessions.push(s),
                Err(e) => refused.push(e),
            }
        }
        if !refused.is_empty() {
            break;
        }
    }
    refused.sort_by_key(|(k, _)| *k);
    let per: Vec<String> = (0..nodes.len())
        .map(|k| sessions.iter().filter(|s| s.on == k).count().to_string())
        .collect();
    let note = match refused.first() {
        Some((i, e)) => format!(
            "REFUSED: {} of the last {BATCH} opened at once, the first session {i} (on the \
             {}'s socket), with {} welcomed ({} on the leader / follower 1 / follower 2): {e}",
            refused.len(),
            NAMES[i % nodes.len()],
            sessions.len(),
            per.join(" / ")
        ),
        None => format!(
            "{} on the leader / follower 1 / follower 2; opened in {:.1} s",
            per.join(" / "),
            started.elapsed().as_secs_f64()
        ),
    };
    report.row(
        "sessions welcomed",
        format!("{} of {n}", sessions.len()),
        &note,
    );
    sessions
}

/// Session `i`: hello, welcome, and the welcome's tool list checked.
async fn hello(sock: &std::path::Path, token: &str, i: usize) -> Result<Session, String> {
    let (ipc, welcome) = Ipc::try_hello(sock, token, &format!("agent-{i}")).await?;
    let listed = welcome["tools"].as_array().map_or(0, Vec::len);
    if listed != TOOLS {
        return Err(format!("welcomed with {listed} tools, not {TOOLS}"));
    }
    Ok(Session {
        on: i % NAMES.len(),
        ipc,
    })
}

/// Memory, descriptors and TCP connections of each instance, before and at full load.
fn usage_rows(report: &mut Report, before: &[Snap], at_load: &[Snap]) {
    let mib = |k: u64| k as f64 / 1024.0;
    for (k, (b, l)) in before.iter().zip(at_load).enumerate() {
        let name = NAMES[k];
        report.row(
            &format!("{name} RSS"),
            format!("{:.1} → {:.1} MiB", mib(b.rss_kib), mib(l.rss_kib)),
            "before the load → at full load",
        );
        report.row(
            &format!("{name} open descriptors"),
            format!("{} → {}", b.fds, l.fds),
            "`/proc/PID/fd`, before → at full load",
        );
        let t = l.tcp;
        let note = if k == 0 {
            format!(
                "{} accepted on its listener (followers' pipes and forwarded streams, apps), {} to \
                 PostgreSQL; before the load {}",
                t.inbound, t.to_db, b.tcp.total
            )
        } else {
            format!(
                "{} to the leader, {} accepted on its listener, {} to PostgreSQL; before the load {}",
                t.to_leader, t.inbound, t.to_db, b.tcp.total
            )
        };
        report.row(
            &format!("{name} ESTABLISHED TCP"),
            t.total.to_string(),
            &note,
        );
    }
}

/// One registration change (the serving app's group with new descriptions, posted to the
/// leader) after a quiet second, so that no session's coalescing holds it back; the time from
/// the POST to each session reading its `tools` frame of the new revision.
async fn fanout(
    report: &mut Report,
    sessions: Vec<Session>,
    nodes: &[Broker],
    client_id: &str,
) -> anyhow::Result<Vec<Session>> {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let n = sessions.len();
    let (target_tx, target) = tokio::sync::watch::channel(u64::MAX);
    let started = Instant::now();
    let mut waits = JoinSet::new();
    for s in sessions {
        waits.spawn(wait_tools(s, target.clone(), started));
    }
    let body = json!({"client_id": client_id, "group": "bench", "tools": tools_json("v2")});
    let reply = nodes[0].http().post("/api/v1/client-tools", &body).await;
    let posted = started.elapsed();
    anyhow::ensure!(reply.status == 200, "the change was refused: {reply:?}");
    let revision = reply.body["data"]["revision"].as_u64().unwrap_or_default();
    target_tx.send(revision)?;
    let mut kept = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    while let Some(done) = waits.join_next().await {
        let (s, at) = done?;
        times.extend(at.map(|d| d.as_micros() as u64));
        kept.push(s);
    }
    times.sort_unstable();
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1e3);
    let missed = n - times.len();
    let note = format!(
        "{n} sessions over the three instances; from the POST to the leader (answered in {:.1} \
         ms) to the session reading its `tools` frame; a session sends the first change after a \
         quiet second at once, then at most one a second, so the bench waits 1.1 s first; \
         {missed} sessions had none within {} s",
        posted.as_secs_f64() * 1e3,
        FANOUT_WAIT.as_secs()
    );
    let max = times.last().copied().unwrap_or_default();
    report.row("registration change → every session, max", ms(max), &note);
    report.row(
        "registration change → session, p50",
        ms(pct(&times, 0.5)),
        "",
    );
    report.row(
        "registration change → session, p99",
        ms(pct(&times, 0.99)),
        "",
    );
    Ok(kept)
}

/// Reads `s` until its `tools` frame of the revision `target` comes to name; the time since
/// `started` it was read at, `None` after `FANOUT_WAIT`.
async fn wait_tools(
    mut s: Session,
    mut target: tokio::sync::watch::Receiver<u64>,
    started: Instant,
) -> (Session, Option<Duration>) {
    let deadline = tokio::time::Instant::from_std(started + FANOUT_WAIT);
    loop {
        let Ok(Some(frame)) = tokio::time::timeout_at(deadline, s.ipc.recv_or_end()).await else {
            return (s, None);
        };
        let at = started.elapsed();
        if frame["type"] != "tools" {
            continue;
        }
        let revision = frame["revision"].as_u64().unwrap_or_default();
        let wanted = tokio::time::timeout_at(deadline, target.wait_for(|t| *t != u64::MAX)).await;
        match wanted {
            Ok(Ok(t)) if revision >= *t => return (s, Some(at)),
            Ok(Ok(_)) => {}
            _ => return (s, None),
        }
    }
}

/// `calls` calls from the sessions of each instance to `tool_00`, which the serving app
/// answers at once: `CALLERS` sessions per instance, each with one call in flight, all three
/// instances at once, at full load. Rows: p50 and p99 per instance and over all, calls per
/// second, and the CPU time each process spent meanwhile with the events the app streams read
/// (every provider stream is sent each call's request).
async fn calls(
    report: &mut Report,
    sessions: Vec<Session>,
    calls: usize,
    nodes: &[Broker],
    events: &AtomicUsize,
) {
    let pids: Vec<u32> = nodes.iter().map(Broker::pid).collect();
    let pids: Vec<u32> = pids.into_iter().chain([std::process::id()]).collect();
    let cpu = |pid: &u32| crate::usage::of(*pid).map_or(0, |u| u.cpu_us);
    let cpu_before: Vec<u64> = pids.iter().map(cpu).collect();
    let events_before = events.load(Ordering::SeqCst);
    let started = Instant::now();
    let (mut by_node, taken, failed) = make_calls(sessions, calls).await;
    let wall = started.elapsed().as_secs_f64();
    let spent: Vec<String> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, b)| format!("{:.1}", cpu(p).saturating_sub(*b) as f64 / 1e6))
        .collect();
    let read = events.load(Ordering::SeqCst) - events_before;
    let mut all: Vec<u64> = by_node.concat();
    all.sort_unstable();
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1e3);
    for (k, us) in by_node.iter_mut().enumerate() {
        us.sort_unstable();
        let note = format!(
            "{} calls from {} sessions on its socket",
            us.len(),
            taken[k]
        );
        let value = format!("{} / {}", ms(pct(us, 0.5)), ms(pct(us, 0.99)));
        report.row(
            &format!("call p50 / p99, from the {}", NAMES[k]),
            value,
            &note,
        );
    }
    let note = match failed {
        Some(e) => format!("FAILED: {e}"),
        None => format!("{CALLERS} sessions per instance, one call in flight each"),
    };
    let value = format!("{} / {}", ms(pct(&all, 0.5)), ms(pct(&all, 0.99)));
    report.row("call p50 / p99, all", value, &note);
    let rate = format!("{:.0} calls/s", all.len() as f64 / wall);
    let note = format!("{} calls in {wall:.1} s", all.len());
    report.row("calls through the cluster at full load", rate, &note);
    let per_call = read as f64 / all.len().max(1) as f64;
    report.row(
        "CPU during the calls: leader / follower 1 / follower 2 / bench",
        format!("{} s", spent.join(" / ")),
        &format!(
            "of {wall:.1} s on {} cores; the app streams read {read} events meanwhile ({per_call:.0} \
             per call: every provider stream is sent each call's request)",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
    );
}

/// Starts `CALLERS` callers per instance; their times by instance, the callers per instance,
/// and the first caller's failure.
async fn make_calls(
    sessions: Vec<Session>,
    calls: usize,
) -> (Vec<Vec<u64>>, [usize; 3], Option<String>) {
    let per = calls.div_ceil(CALLERS);
    let mut tasks = JoinSet::new();
    let mut rest = Vec::new();
    let mut taken = [0usize; 3];
    for s in sessions {
        if taken[s.on] < CALLERS {
            taken[s.on] += 1;
            tasks.spawn(call_some(s, per));
        } else {
            rest.push(s);
        }
    }
    let mut by_node: Vec<Vec<u64>> = vec![Vec::new(); NAMES.len()];
    let mut failed = None;
    while let Some(done) = tasks.join_next().await {
        match done.map_err(panic_text) {
            Ok((on, mut us)) => by_node[on].append(&mut us),
            Err((_, e)) => failed = failed.or(Some(e)),
        }
    }
    drop(rest);
    (by_node, taken, failed)
}

/// `n` calls one after the other from `s`; the instance it is on and each call's time in µs.
async fn call_some(mut s: Session, n: usize) -> (usize, Vec<u64>) {
    let mut us = Vec::with_capacity(n);
    for c in 0..n as u64 {
        let t = Instant::now();
        s.ipc.call(c, "tool_00", json!({"text": "x"})).await;
        let f = s.ipc.recv_of("result").await;
        assert!(f["outcome"]["content"].is_array(), "call {c}: {f}");
        us.push(t.elapsed().as_micros() as u64);
    }
    (s.on, us)
}
