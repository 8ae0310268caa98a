//! The app written for the bench, on the app SDK (`leo-app`): it serves one group and answers
//! every call at once with the payload of the tool called, serialized once ahead of time
//! (`Reply::raw_content`). It connects as the SDK does by default: `$LEO_HOME/run/leo.sock` with
//! the operator token.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use leo_app::RawContent;
use leo_app::{App, Reply, Status, Tool};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One tool of the bench app: its definition and the content it answers with.
pub struct BenchTool {
    pub name: String,
    pub description: String,
    pub schema: Value,
    pub content: Value,
}

/// A running bench app; stops when dropped.
pub struct Running {
    pub client_id: String,
    pub served: Arc<AtomicUsize>,
    stop: CancellationToken,
    _thread: std::thread::JoinHandle<()>,
    _done: tokio::sync::oneshot::Receiver<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Starts the app on the broker of `home`, serving `tools` as group `group`, and waits until it
/// has registered them. With `at_once`, each reply is posted with its claim in one request
/// (`Tool::answers_at_once`); otherwise the app claims first, then posts the result.
pub async fn serve(
    home: &std::path::Path,
    group: &str,
    tools: Vec<BenchTool>,
    at_once: bool,
) -> anyhow::Result<Running> {
    let served = Arc::new(AtomicUsize::new(0));
    let mut defs = Vec::with_capacity(tools.len());
    for t in tools {
        let content = RawContent::from(serde_json::to_vec(&t.content)?);
        let served = served.clone();
        let tool = Tool::new(t.name, t.description, move |_call| {
            served.fetch_add(1, Ordering::Relaxed);
            let content = content.clone();
            async move { Reply::raw_content(content) }
        })
        .schema(t.schema);
        defs.push(if at_once {
            tool.answers_at_once()
        } else {
            tool
        });
    }
    let app = App::builder()
        .home(home)
        .group(group, defs)
        .max_concurrent(256)
        .build()?;
    let mut status = app.status();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    // The app runs on a thread and a one-thread runtime of its own, as it would in its own
    // process, instead of sharing the bench client's workers.
    let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("bench-app".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return eprintln!("bench app: no runtime: {e}"),
            };
            if let Err(e) = runtime.block_on(app.run_until(stopped.cancelled_owned())) {
                eprintln!("bench app: {e}");
            }
            let _ = done_tx.send(());
        })?;
    let serving = async {
        loop {
            match &*status.borrow_and_update() {
                Status::Serving { client_id } => return Ok(client_id.clone()),
                Status::Stopped => anyhow::bail!("the bench app stopped before serving"),
                _ => {}
            }
            status.changed().await?;
        }
    };
    let client_id = tokio::time::timeout(std::time::Duration::from_secs(30), serving)
        .await
        .map_err(|_| anyhow::anyhow!("the bench app did not register within 30 s"))??;
    Ok(Running {
        client_id,
        served,
        stop,
        _thread: thread,
        _done: done,
    })
}
