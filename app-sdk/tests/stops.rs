//! Stopping the app and the broker at the same moment, as `kill APP BROKER` does (a service
//! manager at shutdown): the app's shutdown lands while the broker closes its stream. A stop
//! request is never lost, however the two interleave; twenty tries (the Python and TypeScript
//! suites do the same with their example apps).

use std::time::Duration;

use leo_app::{Call, Reply, Tool};
use leo_testkit::Broker;

use crate::support::{Running, builder};

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
