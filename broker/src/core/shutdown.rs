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
        if let Err(e) = core.ever.flush() {
            warn!(error = %e, "cannot flush client-tools.json at shutdown");
        }
        drop(core);
        self.touched();
        self.shutdown.cancel();
    }
}
