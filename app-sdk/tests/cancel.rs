//! Cancellation reaches the handler: the agent cancelling, the call timing out, and a handler
//! that ignores its token being dropped after the grace, freeing its slot.

use std::time::Duration;

use leo_app::{Call, Reply, Tool};
use leo_testkit::agent::{Agent, AgentOpts, error_text, text_of};
use leo_testkit::{Broker, WAIT};
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::{Running, builder};

/// What a handler reports to the test.
#[derive(Debug, PartialEq)]
enum Seen {
    Started(String),
    Cancelled(String),
    Dropped(String),
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("the handler said nothing")
        .expect("channel closed")
}

/// Sends `Dropped(id)` when the handler's future is dropped before it finished.
struct DropGuard(Option<(String, mpsc::UnboundedSender<Seen>)>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if let Some((id, tx)) = self.0.take() {
            let _ = tx.send(Seen::Dropped(id));
        }
    }
}

fn waiting_tool(name: &str, timeout_s: u64, tx: mpsc::UnboundedSender<Seen>) -> Tool {
    Tool::new(name, "Waits until cancelled", move |call: Call| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Seen::Started(call.id.to_string()));
            call.cancelled().await;
            let _ = tx.send(Seen::Cancelled(call.id.to_string()));
            Reply::text("too late")
        }
    })
    .timeout_s(timeout_s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_cancelling_and_the_timeout_reach_the_handler() {
    let broker = Broker::start().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let app = builder(&broker)
        .group(
            "slow",
            [
                waiting_tool("handoff", 0, tx.clone()),
                waiting_tool("brief", 1, tx),
            ],
        )
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let call = agent.spawn_call("handoff", json!({}));
    let Seen::Started(id) = next(&mut rx).await else {
        panic!("expected a start")
    };
    // Dropping rmcp's call future sends notifications/cancelled.
    call.abort();
    assert_eq!(next(&mut rx).await, Seen::Cancelled(id));

    let result = agent.call("brief", json!({})).await;
    assert!(error_text(&result).starts_with("timeout:"), "{result:?}");
    let Seen::Started(id) = next(&mut rx).await else {
        panic!("expected a start")
    };
    assert_eq!(next(&mut rx).await, Seen::Cancelled(id));
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_ignores_cancellation_is_dropped_after_the_grace() {
    let broker = Broker::start().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stubborn = Tool::new("stubborn", "Never looks at its token", move |call: Call| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Seen::Started(call.id.to_string()));
            let _guard = DropGuard(Some((call.id.to_string(), tx)));
            if call.arguments()["forever"] == true {
                std::future::pending::<()>().await;
            }
            std::mem::forget(_guard);
            Reply::text("done")
        }
    })
    .timeout_s(0);
    let app = builder(&broker)
        .group("slow", [stubborn])
        .max_concurrent(1)
        .cancel_grace(Duration::from_millis(100))
        .build()
        .unwrap();
    let app = Running::start(app).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;

    let call = agent.spawn_call("stubborn", json!({"forever": true}));
    let Seen::Started(id) = next(&mut rx).await else {
        panic!("expected a start")
    };
    call.abort();
    assert_eq!(next(&mut rx).await, Seen::Dropped(id));
    // Its slot is free again: the only slot serves the next call.
    let result = agent.call("stubborn", json!({})).await;
    assert_eq!(text_of(&result), "done");
    app.stop().await.unwrap();
}
