//! The accept step both doors share (`http::serve` for TCP, `ipc` for the sidecar socket): a
//! failed accept (out of descriptors, a peer that gave up) must not end the listener, so it is
//! logged, waited out for a moment, and retried.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How long a failed accept is waited out before the next one.
const RETRY: Duration = Duration::from_millis(50);

/// The next connection `accept` yields, or `None` once `shutdown` fires. `door` names the
/// listener in the log line of a failed accept.
pub async fn next<S, A, Fut>(
    shutdown: &CancellationToken,
    door: &str,
    mut accept: impl FnMut() -> Fut,
) -> Option<S>
where
    Fut: Future<Output = std::io::Result<(S, A)>>,
{
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            accepted = accept() => match accepted {
                Ok((stream, _)) => return Some(stream),
                Err(e) => {
                    warn!(error = %e, "cannot accept a {door} connection");
                    tokio::time::sleep(RETRY).await;
                }
            },
        }
    }
}
