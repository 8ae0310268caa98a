//! Reconnecting and recovery: a broker restart, a request parked before the app subscribed,
//! and requests that waited while the app was cut off, some older than the replay ring.

use std::sync::Arc;
use std::time::Duration;

use leo_app::{Call, Reply, Status, Tool};
use leo_testkit::agent::{Agent, AgentOpts, text_of, wait_for_tools};
use leo_testkit::{Broker, WAIT};
use serde_json::json;
use tokio::sync::Notify;

use crate::support::{Other, Pipe, Running, builder, pending, tool_json};

fn echo() -> Tool {
    Tool::new("echo", "The echo tool", |call: Call| async move {
        Reply::text(format!(
            "app: {}",
            call.arguments()["text"].as_str().unwrap_or("")
        ))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_reconnects_and_registers_again_after_a_broker_restart() {
    let broker = Broker::start().await;
    let mut app = Running::start(builder(&broker).group("g", [echo()]).build().unwrap()).await;
    let first = match app.status.borrow().clone() {
        Status::Serving { client_id } => client_id,
        other => panic!("{other:?}"),
    };
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    assert_eq!(
        text_of(&agent.call("echo", json!({"text": "a"})).await),
        "app: a"
    );

    let home = broker.kill_keep_home().await;
    app.not_serving().await;
    let broker = Broker::start_in(home).await;
    let second = app.serving().await;
    assert_eq!(
        first, second,
        "the stream resumes with its key: the same client_id, its claims kept"
    );
    // leo-mcp reconnects by itself and sees the tool the app registered again.
    wait_for_tools(&agent, |names| names == ["echo"]).await;
    assert_eq!(
        text_of(&agent.call("echo", json!({"text": "b"})).await),
        "app: b"
    );
    drop(broker);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_parked_before_the_app_subscribed_is_served() {
    let broker = Broker::start().await;
    // Another client keeps the tool alive but never answers.
    let mut other = Other::connect(&broker.http()).await;
    other.register_ok("g", json!([tool_json("echo")])).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let call = agent.spawn_call("echo", json!({"text": "early"}));
    other.next_request_id().await;

    // No Last-Event-ID on a first start: only the pending list can tell the app.
    let app = Running::start(builder(&broker).group("g", [echo()]).build().unwrap()).await;
    assert_eq!(text_of(&call.await.unwrap()), "app: early");
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_waited_while_the_app_was_away_are_served_when_it_returns() {
    // The ring keeps one event, so of two requests made while the app is away, only the last
    // is replayed on Last-Event-ID: the first reaches it through the pending list alone.
    let broker = Broker::start_with("client_tools:\n  replay_events: 1\n").await;
    let mut other = Other::connect(&broker.http()).await;
    other.register_ok("g", json!([tool_json("echo")])).await;
    let pipe = Pipe::start(broker.home());
    let app = builder(&broker)
        .socket(&pipe.path)
        .group("g", [echo()])
        .build()
        .unwrap();
    let mut app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    assert_eq!(
        text_of(&agent.call("echo", json!({"text": "a"})).await),
        "app: a"
    );
    other.next_request_id().await;

    pipe.cut();
    app.not_serving().await;
    let first = agent.spawn_call("echo", json!({"text": "b"}));
    let second = agent.spawn_call("echo", json!({"text": "c"}));
    other.next_request_id().await;
    other.next_request_id().await;
    assert_eq!(pending(&broker).await.len(), 2);

    pipe.mend();
    app.serving().await;
    assert_eq!(text_of(&first.await.unwrap()), "app: b");
    assert_eq!(text_of(&second.await.unwrap()), "app: c");
    app.stop().await.unwrap();
}

/// A tool whose call `{"hold": true}` waits until the test releases it; it says when it starts.
fn held(started: Arc<Notify>, release: Arc<Notify>) -> Tool {
    Tool::new("work", "The work tool", move |call: Call| {
        let (started, release) = (started.clone(), release.clone());
        async move {
            if call.arguments()["hold"] == true {
                started.notify_one();
                release.notified().await;
            }
            Reply::text(format!("done {}", call.arguments()["n"]))
        }
    })
    .timeout_s(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_running_through_a_broker_kill_posts_its_reply_once_the_broker_is_back() {
    let broker = Broker::start().await;
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let app = builder(&broker)
        .group("g", [held(started.clone(), release.clone())])
        .build()
        .unwrap();
    let mut app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names == ["work"]).await;
    let call = agent.spawn_call("work", json!({"n": 1, "hold": true}));
    started.notified().await;

    // The handler ends while the broker is down: its first post fails, and it is not dropped.
    let home = broker.kill_keep_home().await;
    app.not_serving().await;
    release.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let broker = Broker::start_in(home).await;
    app.serving().await;
    assert_eq!(text_of(&call.await.unwrap()), "done 1");
    drop(broker);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_claimed_without_hearing_so_is_run_after_a_broker_kill() {
    let broker = Broker::start().await;
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let app = builder(&broker)
        .group("g", [held(started.clone(), release.clone())])
        .max_concurrent(1)
        .build()
        .unwrap();
    let mut app = Running::start(app).await;
    let client_id = app.serving().await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names == ["work"]).await;
    let first = agent.spawn_call("work", json!({"n": 1, "hold": true}));
    started.notified().await;
    // The second call waits in the app for the only slot. Its claim is taken as the app's own
    // whose answer the kill lost: the broker holds it for this client, the app never heard.
    let second = agent.spawn_call("work", json!({"n": 2}));
    let id = loop {
        let listed = pending(&broker).await;
        if let Some(p) = listed.iter().find(|p| p["arguments"]["n"] == 2) {
            break p["id"].as_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let claimed = broker
        .http()
        .post(
            &format!("/api/v1/client-tools/requests/{id}/claim"),
            &json!({"client_id": client_id}),
        )
        .await;
    claimed.data();

    let home = broker.kill_keep_home().await;
    app.not_serving().await;
    let broker = Broker::start_in(home).await;
    app.serving().await;
    release.notify_one();
    assert_eq!(text_of(&first.await.unwrap()), "done 1");
    assert_eq!(text_of(&second.await.unwrap()), "done 2");
    drop(broker);
    app.stop().await.unwrap();
}

/// A key the broker no longer holds (`ErrorCode::RESUME_REFUSED` answering an open that
/// carried it) is dropped: the app opens its stream again as a new client. The old client's
/// handler is cancelled with its claim, and the call, parked again by the broker, is run again
/// and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_connects_a_new_client_that_runs_the_parked_call_again() {
    let broker = Broker::start_with("client_tools:\n  resume_grace_s: 1\n").await;
    // Keeps the tool alive while the app is away.
    let other = Other::connect(&broker.http()).await;
    other.register_ok("g", json!([tool_json("work")])).await;
    let pipe = Pipe::start(broker.home());
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let app = builder(&broker)
        .socket(&pipe.path)
        .cancel_grace(Duration::from_millis(100))
        .group("g", [held(started.clone(), release.clone())])
        .build()
        .unwrap();
    let mut app = Running::start(app).await;
    let first = app.serving().await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    wait_for_tools(&agent, |names| names == ["work"]).await;
    let call = agent.spawn_call("work", json!({"n": 1, "hold": true}));
    started.notified().await;

    pipe.cut();
    // Past the grace the claim is given up: the call is parked and offered again.
    tokio::time::timeout(WAIT, async {
        while pending(&broker).await.first().map(|p| p["state"].clone()) != Some(json!("parked")) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the claim given up");
    pipe.mend();
    tokio::time::timeout(
        WAIT,
        app.status
            .wait_for(|s| matches!(s, Status::Serving { client_id } if *client_id != first)),
    )
    .await
    .expect("a new client")
    .expect("the app stopped");
    // The call runs again for the new client.
    tokio::time::timeout(WAIT, started.notified())
        .await
        .expect("the call run again");
    release.notify_one();
    assert_eq!(text_of(&call.await.unwrap()), "done 1");
    drop(broker);
    app.stop().await.unwrap();
}
