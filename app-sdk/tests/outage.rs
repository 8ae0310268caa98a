//! The app and a PostgreSQL store that goes away for a while: the broker answers the app's
//! results `503 store_unavailable` meanwhile, and the SDK posts them again until the store takes
//! them, so the agent gets the app's answer once the store is back; and `leo call --wait` makes a
//! call refused meanwhile again until the store takes it. (A claim without a definite
//! answer sends the app back to the pending list, `session::waiting_for`; the cluster's
//! random-kill test, whose database restarts under load, is where claims meet the outage.)

use std::sync::Arc;
use std::time::Duration;

use leo_app::{Call, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
use leo_testkit::postgres::Throwaway;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::{Running, builder};

/// Bound on the calls once the store is back (the SDK's backoff is at most 200 ms here).
const BACK_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_refused_while_the_store_is_away_are_posted_again() {
    let Some(postgres) = Throwaway::start().await else {
        return;
    };
    let db = postgres.database().await;
    let broker = Broker::start_with(&db.config()).await;
    // Two calls, both claimed and running, held until `go`.
    let started = Arc::new(Semaphore::new(0));
    let go = Arc::new(Semaphore::new(0));
    let (s, g) = (started.clone(), go.clone());
    let work = Tool::new("work", "Echoes n once let go", move |call: Call| {
        let (started, go) = (s.clone(), g.clone());
        async move {
            started.add_permits(1);
            go.acquire().await.unwrap().forget();
            Reply::text(format!("done {}", call.arguments()["n"]))
        }
    });
    let app = builder(&broker)
        .group("jobs", [work])
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names == ["work"]).await;
    let calls: Vec<_> = (1..=2)
        .map(|n| agent.spawn_call("work", json!({"n": n})))
        .collect();
    started.acquire_many(2).await.unwrap().forget();

    // The store goes away; once the broker refuses work, the handlers answer: their results
    // meet `503 store_unavailable`, and are posted again until the store is back.
    postgres.stop();
    refusing(&broker).await;
    go.add_permits(3);
    // A call made now is refused (`store_unavailable`, or its session closed): `leo call
    // --wait` makes it again until the store is back.
    let waiting = tokio::process::Command::new(leo_testkit::bin("leo"))
        .args(["call", "work", r#"{"n": 3}"#, "--wait", "30"])
        .env("LEO_HOME", broker.home())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let waiting = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_secs(1)).await;
    postgres.start_again().await;

    for (n, call) in (1..=2).zip(calls) {
        let result = tokio::time::timeout(BACK_WITHIN, call)
            .await
            .unwrap_or_else(|_| panic!("call {n} never got its answer"))
            .unwrap();
        assert_eq!(text_of(&result), format!("done {n}"));
    }
    let waited = tokio::time::timeout(BACK_WITHIN, waiting)
        .await
        .expect("leo call --wait never ended")
        .unwrap()
        .unwrap();
    let said = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    assert_eq!(
        (waited.status.code(), said(&waited.stdout)),
        (Some(0), "done 3".to_owned()),
        "{}",
        said(&waited.stderr)
    );
    app.stop().await.unwrap();
}

/// An app started while the store is away keeps trying and serves once the store is back. The
/// broker, which pins definitions here, answers everything `503 store_unavailable` meanwhile:
/// its stream as soon as the instance has let its lease go, a registration before that (the
/// shared table's `REGISTER_AGAIN`, unit-tested in `session`), and neither stops the app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_started_while_the_store_is_away_serves_once_it_is_back() {
    let Some(postgres) = Throwaway::start().await else {
        return;
    };
    let db = postgres.database().await;
    let config = format!("{}client_tools:\n  pin_definitions: true\n", db.config());
    let broker = Broker::start_with(&config).await;
    postgres.stop();
    refusing(&broker).await;

    let echo = Tool::new("echo", "Echoes n", |call: Call| async move {
        Reply::text(format!("echo {}", call.arguments()["n"]))
    });
    let app = builder(&broker)
        .group("jobs", [echo])
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .build()
        .unwrap();
    let mut app = Running::spawn(app);
    // Long enough for several refused attempts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        matches!(
            *app.status.borrow(),
            leo_app::Status::Waiting { .. } | leo_app::Status::Connecting
        ),
        "{:?}",
        *app.status.borrow()
    );
    postgres.start_again().await;
    app.serving().await;

    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names == ["echo"]).await;
    let result = tokio::time::timeout(BACK_WITHIN, agent.call("echo", json!({"n": 7})))
        .await
        .expect("the call never got its answer");
    assert_eq!(text_of(&result), "echo 7");
    app.stop().await.unwrap();
}

/// Waits until `broker` refuses work for want of its store (`503`).
async fn refusing(broker: &Broker) {
    let ops = broker.http();
    let refused = async {
        loop {
            let reply = ops
                .post(
                    "/web/agent/rocket/message",
                    &json!({"text": "t", "from": "ops"}),
                )
                .await;
            if reply.status == 503 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(BACK_WITHIN, refused)
        .await
        .expect("the broker never noticed the store was away");
}
