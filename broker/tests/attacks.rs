//! The attacks an outside suite ran against the broker, each replayed against the real binary:
//! a scope bypass through percent-encoding, Host header tricks, bodies that are half sent to
//! grow memory, and floods of idle or trickling TCP connections.

use std::time::Duration;

use leo_testkit::agent::{Agent, AgentOpts, text_of};
use leo_testkit::ipc::texts;
use leo_testkit::{Broker, WAIT};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::security::leo;
use crate::support::{App, agent, tool};

/// Sends `request` as is on a new TCP connection and returns the whole answer.
async fn raw(addr: std::net::SocketAddr, request: String) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("no answer")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw answer.
fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// An API client named `name` with `can_message` `scope`; returns its token.
async fn client(home: &std::path::Path, name: &str, scope: &str) -> String {
    let (ok, out, err) = leo(home, &["client", "add", name, "--can-message", scope]).await;
    assert!(ok, "{err}");
    out.lines().nth(2).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_scope_is_matched_against_the_decoded_target_it_delivers_to() {
    let home = tempfile::tempdir().unwrap();
    let qglob = client(home.path(), "qglob", "scout-???").await;
    let star = client(home.path(), "star", "scout-*").await;
    let broker = Broker::start_in(home).await;
    let mut scout = agent(&broker, "scout-1").await;
    let post = |token: String, target: &'static str, from: &'static str| {
        let http = broker.http().with_token(Some(&token));
        async move {
            let body = json!({"text": "hi", "from": from});
            http.post(&format!("/web/agent/{target}/message"), &body)
                .await
        }
    };
    // `scout-???` names three characters after the dash: `scout-1` is not in scope, however
    // it is spelled.
    for target in ["scout-1", "scout-%31", "%73cout-1"] {
        let r = post(qglob.clone(), target, "qglob").await;
        assert_eq!(r.code(403), "forbidden", "{target}");
        assert_eq!(
            r.error(),
            "client \"qglob\" is not permitted to message \"scout-1\"",
            "{target}"
        );
    }
    // What decodes to no agent name is refused before any scope or delivery, for every token.
    for target in [
        "scout-%2F1",
        "scout-%2f..",
        "scout-%001",
        "scout-%252",
        "scout-%2531",
        "scout-%1b%5b2J",
        "scout-%",
        "scout-%C3%A9",
        "",
    ] {
        let r = post(star.clone(), target, "star").await;
        assert_eq!(r.code(400), "invalid_parameter", "{target}");
        assert!(r.error().contains("is not an agent name"), "{}", r.error());
        let r = post(broker.operator_token(), target, "ops").await;
        assert_eq!(r.code(400), "invalid_parameter", "{target}");
    }
    // The operator's `scout-%31` is decoded once and reaches `scout-1`, the only message that
    // arrives.
    let r = post(broker.operator_token(), "scout-%31", "ops").await;
    assert_eq!(r.data()["unread"], 1, "{:?}", r.body);
    let messages = scout.fetch_messages(1).await;
    let texts = texts(&messages);
    assert_eq!(texts.len(), 1, "{messages}");
    assert!(texts[0].ends_with("hi"), "{messages}");
}

#[tokio::test]
async fn every_authority_a_request_states_must_be_ours() {
    let broker = Broker::start().await;
    let port = broker.addr.port();
    let token = broker.operator_token();
    let ask = |target: String, hosts: &[&str]| {
        let mut req = format!("GET {target} HTTP/1.1\r\n");
        for h in hosts {
            req.push_str(&format!("Host: {h}\r\n"));
        }
        req.push_str(&format!(
            "Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ));
        raw(broker.addr, req)
    };
    let good = &*format!("127.0.0.1:{port}");
    let evil = &*format!("evil.example:{port}");
    let path = "/api/v1/status".to_owned();

    let a = ask(path.clone(), &[good]).await;
    assert_eq!(status(&a), 200, "{a}");
    for hosts in [[good, evil], [evil, good]] {
        let a = ask(path.clone(), &hosts).await;
        assert_eq!(status(&a), 400, "{hosts:?}: {a}");
        assert!(a.ends_with("more than one Host header"), "{a}");
    }
    let a = ask(path.clone(), &[good, good]).await;
    assert_eq!(status(&a), 400, "{a}");
    // An absolute-form target: its authority counts, and so does the Host header.
    let a = ask(format!("http://{evil}{path}"), &[good]).await;
    assert_eq!(status(&a), 403, "{a}");
    assert!(a.ends_with("forbidden host"), "{a}");
    let a = ask(format!("http://{good}{path}"), &[evil]).await;
    assert_eq!(status(&a), 403, "{a}");
    let a = ask(format!("http://user@{good}{path}"), &[good]).await;
    assert_eq!(status(&a), 403, "{a}");
    let a = ask(format!("http://{good}{path}"), &[good]).await;
    assert_eq!(status(&a), 200, "{a}");
}

/// Opens `n` connections that each send `head` and half of a 2 MiB body, and keeps them open
/// while the broker's memory is measured; returns the broker's growth in KiB.
async fn half_sent_bodies(broker: &Broker, n: usize, head: String, chunked: bool) -> u64 {
    let before = broker.rss_kib();
    let half = vec![b'a'; 1024 * 1024];
    let mut tasks = Vec::new();
    for _ in 0..n {
        let head = head.clone();
        let half = half.clone();
        let addr = broker.addr;
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(head.as_bytes()).await;
            let body = if chunked {
                let mut b = format!("{:x}\r\n", half.len()).into_bytes();
                b.extend_from_slice(&half);
                b
            } else {
                half
            };
            // The broker may refuse and close before it all went out; that is the point.
            let _ = tokio::time::timeout(Duration::from_secs(10), s.write_all(&body)).await;
            s
        }));
    }
    let mut open = Vec::new();
    for t in tasks {
        open.push(t.await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = broker.rss_kib();
    drop(open);
    after.saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_bodies_do_not_grow_the_broker() {
    let home = tempfile::tempdir().unwrap();
    let scout = client(home.path(), "scout", "rocket").await;
    let broker = Broker::start_in(home).await;
    let host = format!("Host: 127.0.0.1:{}\r\n", broker.addr.port());
    // Warm up, so the first measurement is not the allocator's first pages.
    assert_eq!(broker.http().get("/api/v1/status").await.status, 200);
    let cases = [
        (
            "login, no token, Content-Length",
            format!(
                "POST /login HTTP/1.1\r\n{host}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2097152\r\n\r\n"
            ),
            false,
        ),
        (
            "login, no token, chunked",
            format!(
                "POST /login HTTP/1.1\r\n{host}Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            true,
        ),
        (
            "message, API client, chunked",
            format!(
                "POST /web/agent/rocket/message HTTP/1.1\r\n{host}Authorization: Bearer {scout}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            true,
        ),
        (
            "status, no token, chunked",
            format!(
                "POST /api/v1/client-tools HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n"
            ),
            true,
        ),
    ];
    for (what, head, chunked) in cases {
        let grew = half_sent_bodies(&broker, 100, head, chunked).await;
        eprintln!("{what}: 100 half-sent 2 MiB bodies grew the broker by {grew} KiB");
        assert!(grew < 32 * 1024, "{what}: grew {grew} KiB");
    }
    // Real requests still fit their routes.
    let r = broker
        .http()
        .with_token(Some(&scout))
        .post(
            "/web/agent/rocket/message",
            &json!({"text": "\u{1}".repeat(16 * 1024), "from": "scout"}),
        )
        .await;
    assert_eq!(r.code(404), "unknown_agent", "a 16 KiB text fits, escaped");
    let r = broker
        .http()
        .with_token(Some(&scout))
        .post(
            "/web/agent/rocket/message",
            &json!({"text": "x".repeat(200 * 1024), "from": "scout"}),
        )
        .await;
    assert_eq!(r.code(413), "body_too_large");
}

/// Raises this process's soft limit on open files to the hard limit; returns it.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
    hard
}

/// The idle connections of the flood test.
const FLOOD: usize = 20_000;
/// The most connections one helper process opens (a process cannot hold 20,000 under a hard
/// limit of 20,000), and the most helpers.
const PER_HELPER: usize = 10_000;
const HELPERS: usize = 8;

/// Not a test: the helper process of `a_tcp_flood_leaves_agents_and_apps_their_sockets`, which
/// starts it with `LEO_FLOOD_ADDR` and `LEO_FLOOD_COUNT` set. It opens that many idle TCP
/// connections, says how many it got, and holds them until its stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of the flood test"]
#[allow(clippy::print_stdout)] // Its stdout is how it reports to the test.
async fn flood_helper() {
    let addr: std::net::SocketAddr = std::env::var("LEO_FLOOD_ADDR").unwrap().parse().unwrap();
    let count: usize = std::env::var("LEO_FLOOD_COUNT").unwrap().parse().unwrap();
    raise_nofile();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(512));
    let mut tasks = Vec::new();
    for _ in 0..count {
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.unwrap();
            tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
                .await
                .ok()
                .and_then(Result::ok)
        }));
    }
    let mut open = Vec::new();
    for t in tasks {
        if let Some(s) = t.await.unwrap() {
            open.push(s);
        }
    }
    println!("open {}", open.len());
    let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await;
    drop(open);
}

/// Starts a flood helper against `addr`; returns it once its connections are open.
async fn flood(addr: std::net::SocketAddr, count: usize) -> (tokio::process::Child, usize) {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "attacks::flood_helper",
            "--ignored",
            "--nocapture",
        ])
        .env("LEO_FLOOD_ADDR", addr.to_string())
        .env("LEO_FLOOD_COUNT", count.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let open = tokio::time::timeout(Duration::from_secs(40), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(n) = line.strip_prefix("open ") {
                return n.parse().unwrap();
            }
        }
        panic!("the flood helper ended early")
    })
    .await
    .expect("the flood helper took too long");
    // Keep reading, so the helper's test harness can still write its summary.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, open)
}

/// A slow head: one header line every second, until the broker hangs up; returns how many
/// lines it sent.
async fn slowloris(addr: std::net::SocketAddr) -> usize {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let host = format!(
        "GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n",
        addr.port()
    );
    if s.write_all(host.as_bytes()).await.is_err() {
        return 0;
    }
    let mut sent = 0;
    let mut buf = [0u8; 512];
    loop {
        tokio::select! {
            r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return sent },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if s.write_all(format!("X-Slow-{sent}: x\r\n").as_bytes()).await.is_err() {
                    return sent;
                }
                sent += 1;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_is_cut_off() {
    let broker = Broker::start_with("web:\n  header_timeout_s: 3\n").await;
    let sent = tokio::time::timeout(WAIT, slowloris(broker.addr))
        .await
        .expect("a head sent one line a second was never cut off");
    assert!(sent <= 5, "{sent} lines went out before the cut");
    // An idle keep-alive connection is closed too, after a request it was answered.
    let mut s = TcpStream::connect(broker.addr).await.unwrap();
    let req = format!(
        "GET /login HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        broker.addr.port()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("an idle keep-alive connection was never closed")
        .unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_flood_leaves_agents_and_apps_their_sockets() {
    let hard = raise_nofile();
    eprintln!("RLIMIT_NOFILE hard limit: {hard}");
    // The held connections stay held for the whole test; the slow head is cut in 30 s.
    let broker = Broker::start_with("web:\n  header_timeout_s: 30\n").await;
    let before = broker.rss_kib();
    let slow = tokio::spawn(slowloris(broker.addr));
    // Each helper stays well under the hard limit; only a very low one scales the flood down.
    let per = PER_HELPER.min(
        usize::try_from(hard)
            .unwrap_or(usize::MAX)
            .saturating_sub(200),
    );
    let helpers = FLOOD.div_ceil(per).min(HELPERS);
    let want = (per * helpers).min(FLOOD);
    if want < FLOOD {
        eprintln!("the hard limit {hard} scales the flood down to {want} connections");
    }
    let mut children = Vec::new();
    let mut open = 0;
    for i in 0..helpers {
        let (child, n) = flood(broker.addr, per.min(want - i * per)).await;
        children.push(child);
        open += n;
    }
    eprintln!("flood: {open} idle TCP connections open");
    assert!(open >= want * 95 / 100, "{open} of {want}");

    // Past the cap TCP says so at once, and closes.
    let answer = raw(
        broker.addr,
        format!(
            "GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            broker.addr.port()
        ),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.ends_with("too many connections\n"),
        "{answer:?}"
    );

    // An app on the socket and an agent through the real leo-mcp still get through.
    let mut app = App::connect(&broker.http_unix()).await;
    assert_eq!(app.register("kit", json!([tool("ping")])).await.status, 200);
    let agent = Agent::start(broker.home(), AgentOpts::native("rocket")).await;
    let call = agent.spawn_call("ping", json!({"text": "during a flood"}));
    let id = app.next_request_id().await;
    assert_eq!(app.claim(&id).await.status, 200);
    assert_eq!(
        app.answer(&id, json!([{"type": "text", "text": "pong"}]))
            .await
            .status,
        200
    );
    let result = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
    assert_eq!(text_of(&result), "pong");

    let after = broker.rss_kib();
    eprintln!(
        "broker RSS: {before} KiB before, {after} KiB under {open} connections and a slow head"
    );
    assert!(
        after.saturating_sub(before) < 64 * 1024,
        "{before} -> {after} KiB"
    );
    for helper in &mut children {
        drop(helper.stdin.take());
        let _ = tokio::time::timeout(WAIT, helper.wait()).await;
    }
    slow.abort();
}

/// The seed corpus and committed crash inputs of the `http_request` fuzz target.
/// The seeds and committed crash inputs of fuzz target `target`, by file name.
pub(crate) fn fuzz_inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                out.push((name, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

/// Sends every fuzz input to `addr`, aimed at its port and holding `agent_token` where it says
/// `AGENT_TOKEN` (so that `/mcp` inputs reach the MCP server), and checks each gets an HTTP
/// answer or none, never a hang.
/// Sends each `http_request` seed to `addr` on a connection of its own, its `AGENT_TOKEN` and
/// `OPERATOR_TOKEN` replaced by `broker`'s, and checks each gets an HTTP answer or none.
pub(crate) async fn replay_fuzz_inputs(addr: std::net::SocketAddr, broker: &Broker) {
    let (agent_token, operator_token) = (broker.agent_token(), broker.operator_token());
    let inputs = fuzz_inputs("http_request");
    assert!(inputs.len() >= 5, "the seed corpus is missing");
    let port = addr.port().to_string();
    for (name, data) in inputs {
        // The corpus names port 8370; aim it at this listener so it gets past the Host check.
        let data = String::from_utf8_lossy(&data)
            .replace("8370", &port)
            .replace("AGENT_TOKEN", &agent_token)
            .replace("OPERATOR_TOKEN", &operator_token);
        let mut s = TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(data.as_bytes()).await;
        let _ = s.shutdown().await;
        let mut out = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut out))
            .await
            .unwrap_or_else(|_| panic!("{name}: no answer"))
            .ok();
        let answer = String::from_utf8_lossy(&out);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 "),
            "{name}: {answer}"
        );
    }
}

#[tokio::test]
async fn the_request_path_fuzz_inputs_each_get_an_answer() {
    let (broker, metrics) = with_metrics_listener(None).await;
    replay_fuzz_inputs(broker.addr, &broker).await;
    replay_fuzz_inputs(metrics, &broker).await;
    assert_eq!(broker.http().get("/api/v1/status").await.status, 200);
    let open = leo_testkit::Http::tcp(metrics, None);
    assert_eq!(open.get("/metrics").await.status, 200);
}

/// The open-file limit the metrics flood test gives the broker: half of it is the TCP budget,
/// which is then the documented default `web.max_connections`.
const NOFILE: u64 = 2048;
/// `web.max_connections`, the documented default.
const MAX_CONNECTIONS: usize = 1024;
/// Idle connections the metrics flood opens: past the cap, and past every descriptor the
/// broker has.
const METRICS_FLOOD: usize = 2300;

/// How many descriptors process `pid` has open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Opens up to `n` idle connections to `addr` (stopping early when connects stall).
async fn idle_connections(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut open = Vec::new();
    let mut stalled = 0;
    while open.len() < n && stalled < 20 {
        match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await {
            Ok(Ok(s)) => open.push(s),
            _ => stalled += 1,
        }
    }
    open
}

/// A broker whose `metrics.bind` is on a free loopback port, with `nofile` open files at most;
/// returns it and the metrics listener's address.
async fn with_metrics_listener(nofile: Option<u64>) -> (Broker, std::net::SocketAddr) {
    let port = crate::history::free_port();
    let config = format!("metrics:\n  bind: 127.0.0.1:{port}\n");
    let broker = match nofile {
        Some(n) => Broker::start_with_nofile(&config, n).await,
        None => Broker::start_with(&config).await,
    };
    (broker, ([127, 0, 0, 1], port).into())
}

/// `GET /metrics` with `host`, on a connection closed after the answer.
fn get_metrics(host: &str) -> String {
    format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_the_metrics_listener_leaves_agents_and_apps_their_sockets() {
    raise_nofile();
    let (broker, metrics) = with_metrics_listener(Some(NOFILE)).await;
    let good = format!("127.0.0.1:{}", metrics.port());
    let pid = broker.pid();
    let (fds_before, rss_before) = (open_fds(pid), broker.rss_kib());
    let mut idle = idle_connections(metrics, METRICS_FLOOD).await;
    assert!(
        idle.len() > NOFILE as usize,
        "only {} connected",
        idle.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (fds, rss) = (open_fds(pid), broker.rss_kib());
    eprintln!(
        "broker under {} idle metrics connections: {fds_before} -> {fds} fds, {rss_before} -> {rss} KiB RSS",
        idle.len()
    );
    assert!(fds <= MAX_CONNECTIONS + 64 + 64, "{fds} descriptors open");

    // The socket API and a sidecar's hello still get through.
    let api = tokio::time::timeout(WAIT, broker.http_unix().get("/api/v1/status"))
        .await
        .expect("run/leo.sock does not answer during the flood");
    assert_eq!(api.status, 200);
    let sock = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    let (_ipc, welcome) = tokio::time::timeout(
        WAIT,
        leo_testkit::Ipc::hello(&sock, &broker.agent_token(), "rocket"),
    )
    .await
    .expect("no welcome during the flood");
    assert_eq!(welcome["type"], "welcome");
    // Past the cap, the metrics listener says so at once, and closes.
    let answer = raw(metrics, get_metrics(&good)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");

    // The header timeout (10 s) closes every idle connection.
    let closed = tokio::time::timeout(WAIT, async {
        for s in &mut idle {
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "idle connections were left open");
    drop(idle);
    let answer = raw(metrics, get_metrics(&good)).await;
    assert_eq!(status(&answer), 200, "{answer}");
}

#[tokio::test]
async fn the_metrics_listener_checks_the_host_like_the_main_listener() {
    let (broker, metrics) = with_metrics_listener(None).await;
    let port = metrics.port();
    let main = broker.addr.port();
    for (host, want) in [
        ("evil.example".to_owned(), 403),
        (format!("evil.example:{port}"), 403),
        (format!("127.0.0.1:{main}"), 403),
        (format!("localhost:{port}"), 200),
        (format!("127.0.0.1:{port}"), 200),
    ] {
        let answer = raw(metrics, get_metrics(&host)).await;
        assert_eq!(status(&answer), want, "Host: {host}: {answer}");
        if want == 403 {
            assert!(answer.ends_with("forbidden host"), "{answer}");
        }
    }
}

/// What the first suite sent on the sidecar socket: 64 MiB without a newline.
const UNTERMINATED: usize = 64 * 1024 * 1024;

/// Writes an unterminated line of up to `UNTERMINATED` bytes on `stream` (after `before`, if
/// any), while reading what the broker answers; returns the broker's frames, up to its close,
/// and how much went out before it hung up.
async fn unterminated_line(
    before: Option<&str>,
    stream: tokio::net::UnixStream,
) -> (Vec<serde_json::Value>, usize) {
    use futures_util::StreamExt;
    use leo_protocol::lines::{Line, LineCodec};
    let (r, mut w) = stream.into_split();
    let mut reader = tokio_util::codec::FramedRead::new(r, LineCodec::default());
    if let Some(line) = before {
        w.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        let Some(Ok(Line::Frame(welcome))) = reader.next().await else {
            panic!("no welcome")
        };
        assert!(String::from_utf8_lossy(&welcome).contains("welcome"));
    }
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0;
        while sent < UNTERMINATED {
            match tokio::time::timeout(WAIT, w.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        sent
    });
    let mut frames = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        while let Some(Ok(Line::Frame(f))) = reader.next().await {
            frames.push(serde_json::from_slice(&f).unwrap());
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the broker kept the connection open: {frames:?}"
    );
    (frames, writer.await.unwrap())
}

#[tokio::test]
async fn an_unterminated_line_on_the_sidecar_socket_is_cut_at_the_frame_limit() {
    let broker = Broker::start().await;
    let sock = leo_protocol::home::Home::new(broker.home()).sidecar_socket();
    let limit = leo_protocol::limits::MAX_FRAME_BYTES;
    let hello = json!({
        "type": "hello", "v": 1, "agent": "rocket", "session": "rocket-s1",
        "token": broker.agent_token(), "mode": "native",
    })
    .to_string();
    for before in [None, Some(hello.as_str())] {
        let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
        let (frames, sent) = unterminated_line(before, stream).await;
        let when = if before.is_some() {
            "after hello"
        } else {
            "before hello"
        };
        eprintln!("{when}: {sent} bytes went out before the broker hung up");
        assert_eq!(frames.len(), 1, "{when}: {frames:?}");
        assert_eq!(frames[0]["type"], "error", "{when}: {frames:?}");
        assert_eq!(frames[0]["code"], "invalid_frame", "{when}: {frames:?}");
        assert_eq!(
            frames[0]["message"],
            format!("frame longer than {limit} bytes"),
            "{when}"
        );
        assert!(sent < 2 * limit, "{when}: {sent} bytes read");
    }
    // The broker is fine, and a well-behaved sidecar is welcomed.
    leo_testkit::Ipc::hello(&sock, &broker.agent_token(), "rocket").await;
}

/// `leo_calls_total` series keep a tool's name for at most this many names at once
/// (docs/protocol.md, `GET /metrics`).
const MAX_TOOL_SERIES: usize = 128;

#[tokio::test]
async fn tool_names_cannot_grow_the_metrics_page_for_ever() {
    let (broker, metrics) = with_metrics_listener(None).await;
    let http = broker.http();
    let mut app = App::connect(&http).await;
    let mut ipc = crate::support::agent(&broker, "rocket").await;
    // An app renames its tools again and again: 64 names, 64 others, then 16 more.
    let mut n = 0;
    for (round, count) in [(0, 64), (1, 64), (2, 16)] {
        let names: Vec<String> = (0..count).map(|i| format!("r{round}_t{i}")).collect();
        let tools: Vec<_> = names.iter().map(|t| tool(t)).collect();
        app.register_ok("g", json!(tools)).await;
        for name in &names {
            n += 1;
            ipc.call(n, name, json!({})).await;
            let id = app.next_request_id().await;
            app.serve(&id, json!([{"type": "text", "text": "x"}])).await;
            crate::support::result_of(&mut ipc, n).await;
        }
    }
    let open = leo_testkit::Http::tcp(metrics, None);
    let counted = format!("leo_call_duration_seconds_count {n}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let page = loop {
        let page = open.get("/metrics").await.body.as_str().unwrap().to_owned();
        if page.lines().any(|l| l == counted) {
            break page;
        }
        assert!(tokio::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let series: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("leo_calls_total{"))
        .collect();
    assert_eq!(series.len(), MAX_TOOL_SERIES, "{page}");
    for line in [
        r#"leo_calls_total{tool="r2_t15",outcome="result"} 1"#,
        r#"leo_calls_total{tool="r1_t63",outcome="result"} 1"#,
    ] {
        assert!(series.contains(&line), "{line} not in\n{page}");
    }
    assert!(!page.contains(r#"tool="r0_t0""#), "{page}");
}
