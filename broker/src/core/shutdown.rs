//! Shutdown: every live call ends `cancelled`, new ones are refused.

use leo_protocol::events::CancelReason;
use tracing::warn;

use super::Broker;
use crate::requests::Failure;

impl Broker {
    /// Ends every live call with `cancelled` (reason `shutdown`) and refuses new ones.
    pub fn begin_shutdown(&self) {
        let mut core = self.lock();
        core.shutting_down = true;
        let ended = core.requests.end_where(|_, _| {
            Some(Failure::new(
                CancelReason::Shutdown,
                "the broker is shutting down",
            ))
        });
        self.publish_ended(&ended);
        // No call waits for a lost session's sidecar any more: its timer need not hold the
        // tracker's wait.
        for (_, timer) in core.returns.drain() {
            timer.abort();
        }
        if let Err(e) = core.ever.flush() {
            warn!(error = %e, "cannot flush client-tools.json at shutdown");
        }
        drop(core);
        self.touched();
        self.shutdown.cancel();
    }
}
