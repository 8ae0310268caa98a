//! `max_concurrent`: the app claims only what it has a slot for; the rest waits unclaimed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use leo_app::{Call, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_until};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::{Running, builder, pending};

#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
    started: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_concurrent_calls_are_claimed_and_run() {
    let broker = Broker::start().await;
    let gauge = Arc::new(Gauge::default());
    let gate = Arc::new(Semaphore::new(0));
    let (g, s) = (gauge.clone(), gate.clone());
    let work = Tool::new("work", "Waits for the test", move |call: Call| {
        let (gauge, gate) = (g.clone(), s.clone());
        async move {
            let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
            gauge.most.fetch_max(now, Ordering::SeqCst);
            gauge.started.fetch_add(1, Ordering::SeqCst);
            let _permit = gate.acquire().await;
            gauge.now.fetch_sub(1, Ordering::SeqCst);
            Reply::text(format!("done {}", call.arguments()["n"]))
        }
    });
    let app = builder(&broker)
        .group("jobs", [work])
        .max_concurrent(2)
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let calls: Vec<_> = (0..4)
        .map(|n| agent.spawn_call("work", json!({"n": n})))
        .collect();
    wait_until("two handlers running", || {
        gauge.started.load(Ordering::SeqCst) == 2
    })
    .await;
    // The broker holds all four: two claimed by the app, two parked for anyone to take.
    let mut states = Vec::new();
    for _ in 0..200 {
        states = pending(&broker)
            .await
            .iter()
            .map(|r| r["state"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>();
        if states.len() == 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    states.sort();
    assert_eq!(states, ["claimed", "claimed", "parked", "parked"]);
    assert_eq!(gauge.started.load(Ordering::SeqCst), 2);

    gate.add_permits(4);
    let mut answers = Vec::new();
    for call in calls {
        answers.push(text_of(&call.await.unwrap()));
    }
    answers.sort();
    assert_eq!(answers, ["done 0", "done 1", "done 2", "done 3"]);
    assert_eq!(gauge.started.load(Ordering::SeqCst), 4);
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        2,
        "never more than two at once"
    );
    app.stop().await.unwrap();
}
