//! Shared pieces: an app running in the background until the test stops it, another provider
//! played by hand over HTTP/SSE, and a unix-socket pipe the test can cut to take an app away.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leo_app::CancellationToken;
use leo_app::{App, Builder, Status};
use leo_testkit::{Broker, WAIT};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A builder on `broker`'s home (its socket and operator token), reconnecting quickly.
pub fn builder(broker: &Broker) -> Builder {
    App::builder()
        .home(broker.home())
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
}

/// An app running in a task.
pub struct Running {
    pub status: watch::Receiver<Status>,
    stop: CancellationToken,
    task: JoinHandle<leo_app::Result<()>>,
}

impl Running {
    /// Starts `app` and waits until it serves.
    pub async fn start(app: App) -> Running {
        let mut running = Running::spawn(app);
        running.serving().await;
        running
    }

    /// Starts `app` without waiting.
    pub fn spawn(app: App) -> Running {
        let status = app.status();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
        Running { status, stop, task }
    }

    /// Waits until the app serves; returns its client_id.
    pub async fn serving(&mut self) -> String {
        let status = tokio::time::timeout(
            WAIT,
            self.status
                .wait_for(|s| matches!(s, Status::Serving { .. })),
        )
        .await
        .expect("the app never served")
        .expect("the app stopped")
        .clone();
        match status {
            Status::Serving { client_id } => client_id,
            other => panic!("{other:?}"),
        }
    }

    /// Waits until the app is not serving any more.
    pub async fn not_serving(&mut self) {
        tokio::time::timeout(
            WAIT,
            self.status
                .wait_for(|s| !matches!(s, Status::Serving { .. })),
        )
        .await
        .expect("the app kept serving")
        .expect("the app stopped");
    }

    /// Stops the app and returns what `run_until` returned.
    pub async fn stop(self) -> leo_app::Result<()> {
        self.stop.cancel();
        self.finished().await
    }

    /// Waits for `run_until` to return by itself.
    pub async fn finished(self) -> leo_app::Result<()> {
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the app did not stop")
            .expect("the app panicked")
    }
}

/// A provider played by hand (the test kit's app): it registers, and claims nothing unless
/// told.
pub use leo_testkit::app::App as Other;

/// The broker's pending requests.
pub async fn pending(broker: &Broker) -> Vec<Value> {
    let reply = broker
        .http()
        .get("/api/v1/client-tools/requests?pending=1")
        .await;
    reply.data().as_array().cloned().unwrap_or_default()
}

/// A tool definition as JSON, for `Other::register`.
pub fn tool_json(name: &str) -> Value {
    json!({"name": name, "description": format!("The {name} tool"), "input_schema": {"type": "object"}})
}

/// A pipe from a unix socket of its own to the broker's `run/leo.sock`, which the test can cut
/// (every connection closed, new ones refused) and mend, to take an app away from the broker
/// without touching either.
pub struct Pipe {
    pub path: PathBuf,
    open: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl Pipe {
    pub fn start(broker_home: &Path) -> Pipe {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipe.sock");
        let target = broker_home.join("run/leo.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let (open, _) = watch::channel(true);
        let gate = open.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut gate = gate.subscribe();
                if !*gate.borrow() {
                    continue;
                }
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::UnixStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = gate.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Pipe {
            path,
            open,
            _dir: dir,
        }
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Lets connections through again.
    pub fn mend(&self) {
        self.open.send_replace(true);
    }
}

/// Pairs device `name` in `home` (`leo device pair NAME`), as an operator does before the
/// broker starts.
pub fn pair_device(home: &Path, name: &str) {
    let paired = std::process::Command::new(leo_testkit::bin("leo"))
        .args(["device", "pair", name])
        .env("LEO_HOME", home)
        .output()
        .unwrap();
    assert!(paired.status.success(), "{paired:?}");
}
