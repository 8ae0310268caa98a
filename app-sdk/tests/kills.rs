//! The random-kill fault test: a stream of 1,000 `tools/call`s from two harnesses (rmcp clients
//! on two real `leo-mcp`s) to a tool this SDK serves, while the broker is SIGKILLed at
//! seeded-random points and started again on the same home each time.
//!
//! What must hold, whatever the kill points: every call the harnesses made gets exactly one
//! answer (none hangs); an answer that is the app's is the app's answer to that very call; every
//! result the broker accepted reaches its harness; a result posted again after a restart is
//! `409 already_settled`; the history lists each call once. The seed is printed;
//! `LEO_FAULT_SEED=N` replays a run's kill points (the timing around them still varies).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leo_app::{Call, Reply, Tool};
use leo_testkit::agent::{Agent, AgentOpts, wait_for_tools};
use leo_testkit::rng::Rng;
use leo_testkit::{Broker, Http, WAIT};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support::{Running, builder};

pub(crate) const CALLS: usize = 1000;
/// Calls in flight at once, over both harnesses.
const IN_FLIGHT: usize = 32;
const KILLS: usize = 6;
/// A bound on the whole run: a call that never ends fails the test instead of hanging it.
const WHOLE_RUN: Duration = Duration::from_secs(200);
/// A bound on one call, well above the longest outage.
const ONE_CALL: Duration = Duration::from_secs(45);

pub(crate) fn seed() -> u64 {
    let seed = std::env::var("LEO_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            now.as_nanos() as u64 | 1
        });
    eprintln!("LEO_FAULT_SEED={seed}");
    seed
}

/// How one harness call ended, as the harness saw it.
#[derive(Debug, Clone)]
pub(crate) enum Ended {
    /// The app's answer (the text of its one block).
    Answer(String),
    /// A tool error (`isError: true`) with its text.
    Error(String),
    /// No MCP response within `ONE_CALL`, or a JSON-RPC error.
    Failed(String),
}

/// The calls whose harness got the app's answer so far.
pub(crate) type Answered = Arc<Mutex<std::collections::HashSet<u64>>>;

/// When each call (by number) was made and when its harness got its end.
pub(crate) type Spans = Arc<Mutex<HashMap<usize, (Instant, Instant)>>>;

/// What the app's handler saw: call number → the request ids it ran for.
pub(crate) type Runs = Arc<Mutex<HashMap<u64, Vec<String>>>>;

/// The served tool: answers `answer N` for `{"n": N}` after a short pause, so kills land before,
/// during and after handlers.
pub(crate) fn work(runs: Runs) -> Tool {
    Tool::new("work", "The work tool", move |call: Call| {
        let runs = runs.clone();
        async move {
            let n = call.arguments()["n"].as_u64().unwrap_or(u64::MAX);
            runs.lock()
                .unwrap()
                .entry(n)
                .or_default()
                .push(call.id.to_string());
            tokio::time::sleep(Duration::from_millis(n * 7 % 13)).await;
            Reply::text(format!("answer {n}"))
        }
    })
    .timeout_s(0)
}

pub(crate) fn classify(
    result: Result<Result<CallToolResult, rmcp::ServiceError>, tokio::time::error::Elapsed>,
) -> Ended {
    let result = match result {
        Err(_) => return Ended::Failed("no response".into()),
        Ok(Err(e)) => return Ended::Failed(e.to_string()),
        Ok(Ok(r)) => r,
    };
    let content = serde_json::to_value(&result.content).unwrap_or_default();
    let text = match content.as_array().map(Vec::as_slice) {
        Some([one]) => one["text"].as_str().unwrap_or_default().to_owned(),
        _ => return Ended::Failed(format!("content {content}")),
    };
    if result.is_error == Some(true) {
        Ended::Error(text)
    } else {
        Ended::Answer(text)
    }
}

/// Makes `CALLS` calls, at most `IN_FLIGHT` at once, alternating between the harnesses; a
/// harness whose call was refused at once (the broker down) waits `refused` before its next.
pub(crate) async fn stream(
    agents: Arc<Vec<Agent>>,
    done: Arc<AtomicUsize>,
    answered: Answered,
    refused: Duration,
    spans: Spans,
) -> Vec<Ended> {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::with_capacity(CALLS);
    for n in 0..CALLS {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (agents, done, answered) = (agents.clone(), done.clone(), answered.clone());
        let spans = spans.clone();
        tasks.push(tokio::spawn(async move {
            let peer = agents[n % agents.len()].client.peer().clone();
            let mut params = CallToolRequestParams::new("work");
            if let Value::Object(map) = json!({"n": n}) {
                params = params.with_arguments(map);
            }
            let made = Instant::now();
            let ended = classify(tokio::time::timeout(ONE_CALL, peer.call_tool(params)).await);
            spans.lock().unwrap().insert(n, (made, Instant::now()));
            if matches!(ended, Ended::Answer(_)) {
                answered.lock().unwrap().insert(n as u64);
            }
            done.fetch_add(1, Ordering::SeqCst);
            if matches!(ended, Ended::Error(_)) {
                // A harness answered at once (the broker is down) does not retry in a busy loop.
                tokio::time::sleep(refused).await;
            }
            drop(permit);
            ended
        }));
    }
    let mut ended = Vec::with_capacity(CALLS);
    for task in tasks {
        ended.push(task.await.unwrap());
    }
    ended
}

/// Kills the broker `KILLS` times at seeded points of the stream; after each restart, posts
/// again a result the broker accepted before the kill and expects `already_settled`.
async fn killer(
    mut broker: Broker,
    mut rng: Rng,
    done: Arc<AtomicUsize>,
    answered: Answered,
    client_id: String,
) -> (Broker, usize) {
    let mut points: Vec<usize> = (0..KILLS)
        .map(|_| CALLS / 20 + rng.below((CALLS * 17 / 20) as u64) as usize)
        .collect();
    points.sort_unstable();
    let mut reposted = 0;
    for point in points {
        while done.load(Ordering::SeqCst) < point {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(30))).await;
        let settled = settled_ids(&broker.http(), &answered).await;
        let home = broker.kill_keep_home().await;
        tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
        broker = Broker::start_in(home).await;
        for id in settled.iter().take(3) {
            post_again(&broker.http(), id, &client_id).await;
            reposted += 1;
        }
    }
    (broker, reposted)
}

/// Posts a second result for `id`, which ended with one before the kill: once the app is back
/// (its `client_id` known again) and, in a cluster, an instance leads, the broker says
/// `already_settled`.
pub(crate) async fn post_again(http: &Http, id: &str, client_id: &str) {
    let body =
        json!({"client_id": client_id, "ok": true, "content": [{"type": "text", "text": "twice"}]});
    let path = format!("/api/v1/client-tools/requests/{id}/result");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let again = http.post(&path, &body).await;
        let waiting = (again.status == 404 && again.body["code"] == "unknown_client")
            || (again.status == 503 && again.body["code"] == "store_unavailable");
        if waiting {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the app never came back: {again:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(again.code(409), "already_settled", "{id}");
        return;
    }
}

/// The ids of the newest calls the broker lists as ended with a result that their harness got
/// (so the broker has committed it: it writes a result to `leo-mcp` only then). With a
/// PostgreSQL store the history is refused `503 store_unavailable` while the database is away
/// (a restart of it): asked again until it answers.
pub(crate) async fn settled_ids(http: &Http, answered: &Answered) -> Vec<String> {
    let answered = answered.lock().unwrap().clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let reply = loop {
        let reply = http
            .get("/api/v1/client-tools/requests?state=ended&outcome=result&limit=50")
            .await;
        if reply.status != 503 || tokio::time::Instant::now() > deadline {
            break reply;
        }
        assert_eq!(reply.code(503), "store_unavailable", "{reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    reply.data()["calls"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|r| {
                    r["arguments"]["n"]
                        .as_u64()
                        .is_some_and(|n| answered.contains(&n))
                })
                .filter_map(|r| r["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every ended call in the history, paged.
pub(crate) async fn history(http: &Http) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut before = String::new();
    loop {
        let reply = http
            .get(&format!(
                "/api/v1/client-tools/requests?state=ended&limit=500{before}"
            ))
            .await;
        let data = reply.data();
        rows.extend(data["calls"].as_array().cloned().unwrap_or_default());
        match data["next_before"].as_u64() {
            Some(seq) => before = format!("&before={seq}"),
            None => return rows,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_calls_through_random_broker_kills_each_end_once() {
    let rng = Rng::new(seed());
    let started = std::time::Instant::now();
    let broker = Broker::start_with("history:\n  store_content: true\n").await;
    let runs = Runs::default();
    let mut app = Running::start(
        builder(&broker)
            .group("g", [work(runs.clone())])
            .build()
            .unwrap(),
    )
    .await;
    let client_id = app.serving().await;
    let mut agents = Vec::new();
    for name in ["claude", "opencode"] {
        let agent = Agent::start(broker.home(), AgentOpts::native(name)).await;
        wait_for_tools(&agent, |names| names == ["work"]).await;
        agents.push(agent);
    }
    let agents = Arc::new(agents);
    let done = Arc::new(AtomicUsize::new(0));
    let run = async {
        let answered = Answered::default();
        let killing = tokio::spawn(killer(
            broker,
            rng,
            done.clone(),
            answered.clone(),
            client_id.clone(),
        ));
        let pause = Duration::from_millis(50);
        let spans = Spans::default();
        let ended = stream(agents.clone(), done.clone(), answered, pause, spans).await;
        (ended, killing.await.unwrap())
    };
    let (ended, (broker, reposted)) = tokio::time::timeout(WHOLE_RUN, run)
        .await
        .expect("the stream did not end: a call hangs");
    let rows = history(&broker.http()).await;
    check(&ended, &rows, &runs.lock().unwrap(), &["no_client"]);
    assert_eq!(
        app.serving().await,
        client_id,
        "the app resumed as the same client every time"
    );
    app.stop().await.unwrap();
    eprintln!(
        "{CALLS} calls, {KILLS} kills, {reposted} results posted again: {:.1?}",
        started.elapsed()
    );
}

/// The checks on what the harnesses got and what the history lists; a tool error must be one
/// of `refusals` (codes, such as `no_client`).
pub(crate) fn check(
    ended: &[Ended],
    rows: &[Value],
    runs: &HashMap<u64, Vec<String>>,
    refusals: &[&str],
) {
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for (n, e) in ended.iter().enumerate() {
        match e {
            Ended::Answer(text) => assert_eq!(text, &format!("answer {n}"), "call {n}"),
            Ended::Error(text) => {
                // Only calls the app never answered end without it: made while the broker was
                // down or before the app was back, or sent as the broker died.
                let code = text.split(": ").next().unwrap_or_default();
                assert!(refusals.contains(&code), "call {n}: {text}");
                *outcomes.entry(text.clone()).or_default() += 1;
            }
            Ended::Failed(why) => panic!("call {n}: {why}"),
        }
    }
    let answered = ended
        .iter()
        .filter(|e| matches!(e, Ended::Answer(_)))
        .count();
    eprintln!("answered {answered}; other outcomes: {outcomes:#?}");
    let mut by_id: HashMap<&str, &Value> = HashMap::new();
    for row in rows {
        let id = row["id"].as_str().unwrap();
        assert!(
            by_id.insert(id, row).is_none(),
            "{id} is in the history twice"
        );
    }
    // Every result the broker accepted reached its harness, and it is that result.
    for row in rows.iter().filter(|r| r["outcome"] == "result") {
        let n = row["arguments"]["n"].as_u64().unwrap() as usize;
        let posted = row["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(posted, format!("answer {n}"), "{row}");
        assert!(
            matches!(&ended[n], Ended::Answer(_)),
            "call {n} settled with a result but the harness got {:?}",
            ended[n]
        );
    }
    // Every answer a harness got is in the history as a result (a row lost at a kill aside).
    let mut missing = 0;
    for (n, e) in ended.iter().enumerate() {
        if let Ended::Answer(_) = e {
            let ids = runs.get(&(n as u64)).cloned().unwrap_or_default();
            match ids.iter().find_map(|id| by_id.get(id.as_str())) {
                Some(row) => assert_eq!(row["outcome"], "result", "{row}"),
                None => missing += 1,
            }
        }
    }
    eprintln!(
        "history rows {}; answers without a row {missing}",
        rows.len()
    );
}
