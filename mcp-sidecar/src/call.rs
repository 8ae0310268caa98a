//! One forwarded call, from `tools/call` to its result.
//!
//! The call goes to the broker and the handler waits for exactly one of: the broker's result
//! (content, app error, timeout, withdrawal…), the connection dropping (`no_client`), or the
//! harness cancelling, in which case the broker is told with a `cancel` frame (the app then
//! sees `client_tool.cancelled`, reason `cancelled_by_agent`). Progress is reported meanwhile.
//! The sidecar adds no timeout of its own: `timeout_s: 0` tools are handoffs that may wait for
//! days, and the broker ends everything else.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use serde_json::Value;
use tracing::debug;

use crate::link::BrokerLink;
use crate::outcome;
use crate::progress::Ticker;

/// Forwards `tool(arguments)` and waits for its end.
pub async fn forward(
    link: &BrokerLink,
    tool: &str,
    arguments: Value,
    ctx: &RequestContext<RoleServer>,
    progress_every: Duration,
) -> CallToolResult {
    let (id, mut rx) = match link.start_call(tool, arguments) {
        Ok(started) => started,
        Err(reason) => return outcome::failure("no_client", &reason),
    };
    let mut ticker = Ticker::new(ctx.meta.get_progress_token(), progress_every);
    loop {
        tokio::select! {
            biased;
            ended = &mut rx => {
                return match ended {
                    Ok(o) => outcome::to_result(o),
                    // The sender is only dropped by `fail_all`, which sends first; be safe anyway.
                    Err(_) => outcome::failure("no_client", crate::link::CONNECTION_LOST),
                };
            }
            () = ctx.ct.cancelled() => {
                link.cancel(id);
                // rmcp does not answer a cancelled request; this result is never sent.
                return outcome::failure("cancelled", "the harness cancelled the call");
            }
            progress = ticker.tick() => {
                debug!(call = id, progress = progress.progress, "progress");
                if ctx.peer.notify_progress(progress).await.is_err() {
                    debug!(call = id, "cannot send progress; the client may be gone");
                }
            }
        }
    }
}
