//! The fault suite: under each fault every call ends exactly once with its documented outcome,
//! and the broker keeps serving. Loops are bounded in count and time; no assertion is on time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leo_testkit::rng::Rng;
use leo_testkit::{Broker, Ipc, Sse};
use serde_json::{Value, json};

use crate::support::{App, agent, tool};

/// Collects result frames until `n` distinct call ids have one; fails on a second one.
async fn collect_results(ipc: &mut Ipc, n: usize) -> HashMap<u64, Value> {
    let mut seen: HashMap<u64, Value> = HashMap::new();
    while seen.len() < n {
        let f = ipc.recv_of("result").await;
        let id = f["id"].as_u64().unwrap();
        assert!(
            seen.insert(id, f["outcome"].clone()).is_none(),
            "call {id} answered twice"
        );
    }
    // Nothing more arrives for these calls.
    if let Some(extra) = ipc.within(Duration::from_millis(200)).await {
        assert_ne!(extra["type"], "result", "an extra result: {extra}");
    }
    seen
}

/// Serves every request `app` sees with 16 workers on keep-alive connections: each claims and
/// answers; successful and refused claims are counted.
fn serve_forever(
    mut app: App,
    claims: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, rx) = tokio::sync::mpsc::channel::<String>(1024);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (rx, claims, refused) = (rx.clone(), claims.clone(), refused.clone());
            let client = app.id.clone();
            let mut conn = app.http.connect().await;
            workers.spawn(async move {
                loop {
                    let Some(id) = rx.lock().await.recv().await else { return };
                    let r = conn
                        .post(&format!("/api/v1/client-tools/requests/{id}/claim"), &json!({"client_id": client}))
                        .await;
                    if r.status == 200 {
                        claims.fetch_add(1, Ordering::SeqCst);
                        let body = json!({"client_id": client, "ok": true, "content": [{"type": "text", "text": client}]});
                        let a = conn.post(&format!("/api/v1/client-tools/requests/{id}/result"), &body).await;
                        assert!(a.status == 200 || a.code(409) == "already_settled", "{a:?}");
                    } else {
                        let code = r.body["code"].as_str().unwrap_or_default().to_owned();
                        // A request the agent cancelled long ago may be forgotten by then.
                        assert!(
                            ["owned_by_other", "already_claimed", "already_settled", "unknown_request"]
                                .contains(&code.as_str()),
                            "claim refused with {code}"
                        );
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        while let Some(e) = app.sse.next_or_end().await {
            if e.event == "client_tool.request"
                && tx
                    .send(e.data["id"].as_str().unwrap().to_owned())
                    .await
                    .is_err()
            {
                break;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apps_racing_to_claim_a_thousand_requests_settle_each_once() {
    let broker = Broker::start().await;
    let a = App::connect(&broker.http()).await;
    let b = App::connect(&broker.http()).await;
    a.register("g", json!([tool("echo")])).await.data();
    b.register("g", json!([tool("echo")])).await.data();
    let claims = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let ta = serve_forever(a, claims.clone(), refused.clone());
    let tb = serve_forever(b, claims.clone(), refused.clone());
    // 20 agents × 50 calls: ownership is per agent, so both apps win some.
    let mut agents = Vec::new();
    for i in 0..20 {
        agents.push(agent(&broker, &format!("agent-{i}")).await);
    }
    for ipc in agents.iter_mut() {
        for c in 0..50 {
            ipc.call(c, "echo", json!({})).await;
        }
    }
    let mut winners = HashSet::new();
    for ipc in agents.iter_mut() {
        let results = collect_results(ipc, 50).await;
        let by: HashSet<String> = results
            .values()
            .map(|o| o["content"][0]["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(by.len(), 1, "one owner per agent's group: {by:?}");
        winners.extend(by);
    }
    assert_eq!(
        claims.load(Ordering::SeqCst),
        1000,
        "each request claimed once"
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        1000,
        "the loser of each race was refused"
    );
    assert!(!winners.is_empty());
    ta.abort();
    tb.abort();
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data(), &json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_calls_with_random_cancellations_each_end_once() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    let claims = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let server = serve_forever(app, claims.clone(), refused.clone());
    let mut ipc = agent(&broker, "rocket").await;
    let mut rng = Rng::new(0x5eed_1eaf_cafe_f00d);
    let mut cancelled = HashSet::new();
    const N: u64 = 10_000;
    // An agent keeps a bounded number of calls in flight, as harnesses do.
    const WINDOW: u64 = 64;
    let mut results: HashMap<u64, Value> = HashMap::new();
    let mut next = 0;
    while (results.len() as u64) < N {
        while next < N && next - results.len() as u64 <= WINDOW {
            ipc.call(next, "echo", json!({"text": next.to_string()}))
                .await;
            if rng.next_u64().is_multiple_of(3) {
                ipc.send(&json!({"type": "cancel", "id": next})).await;
                cancelled.insert(next);
            }
            next += 1;
        }
        let f = ipc.recv_of("result").await;
        let id = f["id"].as_u64().unwrap();
        assert!(
            results.insert(id, f["outcome"].clone()).is_none(),
            "call {id} answered twice"
        );
    }
    if let Some(extra) = ipc.within(Duration::from_millis(200)).await {
        assert_ne!(extra["type"], "result", "an extra result: {extra}");
    }
    let mut answered = 0;
    for (id, o) in &results {
        match o["error"]["code"].as_str() {
            None => answered += 1,
            Some("cancelled") => assert!(
                cancelled.contains(id),
                "call {id} cancelled but never asked"
            ),
            Some(other) => panic!("call {id} ended with {other}"),
        }
    }
    assert!(
        answered >= (N as usize - cancelled.len()),
        "every uncancelled call was answered"
    );
    server.abort();
    let pending = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    assert_eq!(pending.data(), &json!([]), "nothing is left parked");
}

#[tokio::test]
async fn a_slow_stream_is_closed_by_the_documented_rule_and_memory_stays_bounded() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo")])).await.data();
    // A provider stream that never reads, while 64 MiB of requests are published.
    let mut slow = Sse::open(&broker.http(), "/api/v1/events?client_tools=1", None).await;
    let mut ipc = agent(&broker, "rocket").await;
    let before = broker.rss_kib();
    let big = "x".repeat(64 * 1024);
    const CALLS: u64 = 1000;
    for c in 0..CALLS {
        ipc.call(c, "echo", json!({"text": big})).await;
        ipc.send(&json!({"type": "cancel", "id": c})).await;
    }
    let results = collect_results(&mut ipc, CALLS as usize).await;
    assert!(results.values().all(|o| o["error"]["code"] == "cancelled"));
    let after = broker.rss_kib();
    assert!(
        after < before + 96 * 1024,
        "broker grew from {before} KiB to {after} KiB"
    );
    // The broker kept serving meanwhile, and still does.
    assert_eq!(broker.http().get("/api/v1/client-tools").await.status, 200);
    // The slow stream delivers a contiguous prefix, then ends.
    assert_eq!(slow.next().await.event, "hello");
    let mut last: Option<u64> = None;
    let ended = loop {
        match slow.within(Duration::from_secs(10)).await {
            Some(e) => {
                let id = e.id.unwrap();
                if let Some(prev) = last {
                    assert_eq!(id, prev + 1, "ids stay contiguous");
                }
                last = Some(id);
            }
            None => break true,
        }
    };
    let last = last.unwrap_or_default();
    assert!(
        ended && last < 2 * CALLS,
        "the stream was closed after {last} events"
    );
    // Reconnecting with Last-Event-ID gets what the ring holds, and says what it lost.
    let mut back = Sse::open(&broker.http(), "/api/v1/events?client_tools=1", Some(last)).await;
    assert_eq!(back.next().await.data["replay_gap"], true);
}

#[tokio::test]
async fn floods_of_huge_and_bad_requests_keep_memory_bounded() {
    let broker = Broker::start().await;
    let app = App::connect(&broker.http()).await;
    let before = broker.rss_kib();
    let huge = bytes_of(10 * 1024 * 1024);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let http = broker.http();
        let body = huge.clone();
        tasks.spawn(async move { http.try_post_raw("/api/v1/client-tools", body).await });
    }
    let mut refused = 0;
    while let Some(status) = tasks.join_next().await {
        // The broker answers 413 and closes without reading the rest, so the client may see
        // the 413 or a broken pipe while still writing; never anything else.
        match status.unwrap() {
            Ok(413) => refused += 1,
            Ok(other) => panic!("a 10 MiB body got {other}"),
            Err(e) => eprintln!("flood connection closed by the broker: {e}"),
        }
    }
    eprintln!("{refused} of 40 floods read their 413 before the broker closed");
    let bad = [
        "{",
        "[]",
        "{\"client_id\": 1}",
        "null",
        "\"x\"",
        "{\"tools\": {}}",
    ];
    let mut codes: HashMap<u16, usize> = HashMap::new();
    for i in 0..10_000 {
        let r = broker
            .http()
            .post_raw("/api/v1/client-tools", bad[i % bad.len()])
            .await;
        *codes.entry(r.status).or_default() += 1;
    }
    assert_eq!(codes, HashMap::from([(400, 10_000)]));
    let after = broker.rss_kib();
    assert!(
        after < before + 100 * 1024,
        "broker grew from {before} KiB to {after} KiB"
    );
    app.register("g", json!([tool("still_serving")]))
        .await
        .data();
}

fn bytes_of(n: usize) -> hyper::body::Bytes {
    hyper::body::Bytes::from(vec![b'x'; n])
}

#[tokio::test]
async fn sigkill_and_restart_loses_no_state_and_hangs_no_session() {
    let broker = Broker::start().await;
    let mut app = App::connect(&broker.http()).await;
    app.register("g", json!([tool("echo"), tool("other")]))
        .await
        .data();
    let mut ipc = agent(&broker, "rocket").await;
    ipc.call(1, "echo", json!({})).await;
    let _ = app.next_request().await;
    let home = broker.kill_keep_home().await;
    // The session sees the broker go; it is not left waiting.
    assert!(
        tokio::time::timeout(Duration::from_secs(10), async {
            while ipc.recv_or_end().await.is_some() {}
        })
        .await
        .is_ok()
    );
    let saved = std::fs::read_to_string(home.path().join("state/client-tools.json")).unwrap();
    assert!(saved.contains("echo") && saved.contains("other"), "{saved}");
    let broker = Broker::start_in(home).await;
    let (mut ipc, welcome) = Ipc::hello(
        &broker.home().join("run/sidecar.sock"),
        &broker.agent_token(),
        "rocket",
    )
    .await;
    assert_eq!(
        welcome["ever_registered"], true,
        "remembered across the crash"
    );
    assert_eq!(welcome["tools"], json!([]), "no app is connected yet");
    ipc.call(1, "echo", json!({})).await;
    assert_eq!(
        crate::support::result_of(&mut ipc, 1).await["error"]["code"],
        "no_client"
    );
}
