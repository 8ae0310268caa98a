//! Stopping the app: a deliberate stop withdraws its groups, so the calls still waiting for
//! them end at once instead of after the broker's resume grace. And stopping the app and the
//! broker at the same moment, as `kill APP BROKER` does (a service manager at shutdown): the
//! app's shutdown lands while the broker closes its stream. A stop request is never lost,
//! however the two interleave; twenty tries (the Python and TypeScript suites do the same with
//! their example apps).

use std::sync::Arc;
use std::time::{Duration, Instant};

use leo_app::{Call, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, error_text, text_of, wait_for_tools};
use serde_json::json;
use tokio::sync::Notify;

use crate::support::{Running, builder, pending};

/// Bound on one stop: a lost stop request would leave the app retrying for ever.
const STOPS_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_app_and_the_broker_at_once_stops_the_app_every_time() {
    for attempt in 1..=20 {
        let broker = Broker::start().await;
        let tool = Tool::new("reverse_text", "Reverse a text", |call: Call| async move {
            let text = call.arguments()["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            Reply::text(text.chars().rev().collect::<String>())
        });
        let app = builder(&broker).group("text", [tool]).build().unwrap();
        let app = Running::start(app).await;
        let mut kill = std::process::Command::new("kill")
            .args(["-TERM", &broker.pid().to_string()])
            .spawn()
            .unwrap();
        let stopped = tokio::time::timeout(STOPS_WITHIN, app.stop())
            .await
            .unwrap_or_else(|_| panic!("try {attempt}: the app did not stop"));
        assert!(stopped.is_ok(), "try {attempt}: {stopped:?}");
        kill.wait().unwrap();
        drop(broker);
    }
}

/// Well under the broker's resume grace (60 s), which a dropped stream would get.
const ENDS_WITHIN: Duration = Duration::from_secs(10);

/// A call parked for the app (its only slot busy) when the app is stopped ends `cancelled`
/// (`tool_withdrawn`) at once: the app withdraws its group before closing its stream, which
/// alone would keep the call parked for the grace. The running call's reply is still posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_app_withdraws_its_groups_and_its_parked_calls_end_at_once() {
    let broker = Broker::start().await;
    let started = Arc::new(Notify::new());
    let s = started.clone();
    let work = Tool::new("work", "Runs until cancelled", move |call: Call| {
        let started = s.clone();
        async move {
            started.notify_one();
            call.cancelled().await;
            Reply::text("stopped")
        }
    });
    let app = builder(&broker)
        .group("jobs", [work])
        .max_concurrent(1)
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names == ["work"]).await;
    let running = agent.spawn_call("work", json!({"n": 1}));
    started.notified().await;
    let parked = agent.spawn_call("work", json!({"n": 2}));
    let listed = async {
        loop {
            let states: Vec<_> = pending(&broker)
                .await
                .iter()
                .map(|p| p["state"].as_str().unwrap_or_default().to_owned())
                .collect();
            if states.len() == 2 && states.contains(&"parked".to_owned()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(ENDS_WITHIN, listed)
        .await
        .expect("the second call never waited parked");

    let since = Instant::now();
    app.stop().await.unwrap();
    assert_eq!(text_of(&running.await.unwrap()), "stopped");
    let parked = tokio::time::timeout(ENDS_WITHIN, parked)
        .await
        .expect("the parked call waited for the resume grace")
        .unwrap();
    assert_eq!(
        error_text(&parked),
        "cancelled: tool \"work\" was withdrawn"
    );
    assert!(since.elapsed() < ENDS_WITHIN, "{:?}", since.elapsed());
}
