//! Shutdown: a broker on its own ends every live call `cancelled` and refuses new ones; a
//! cluster's leader hands its calls over to the next leader instead.

use leo_protocol::ErrorCode;
use leo_protocol::events::CancelReason;
use tracing::warn;

use super::{Broker, Core};
use crate::refusal::Refusal;
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
        self.stop_core(core);
    }

    /// A cluster's leader stopping cleanly (an upgrade, a host's maintenance): no call ends.
    /// Every live call, claim and undelivered outcome stays in the shared database, which the
    /// store writes out before it gives the lease up, and the next leader restores them as
    /// after a kill: apps resume their claims with their keys, and sidecars (on this host's
    /// socket once it is back, on the other instances' at once) re-attach their calls. New
    /// work meanwhile is refused `store_unavailable` (nothing changed, try again), and the
    /// sessions close without ending their calls (`is_handing_over`).
    pub fn begin_handover(&self) {
        let mut core = self.lock();
        core.shutting_down = true;
        core.handing_over = true;
        self.stop_core(core);
    }

    /// True once this leader hands its calls over rather than ending them.
    pub fn is_handing_over(&self) -> bool {
        self.lock().handing_over
    }

    /// What both stops share, once the calls are dealt with: timers, the state file, the
    /// shutdown token.
    fn stop_core(&self, mut core: super::CoreGuard<'_>) {
        // No call waits for a lost session's sidecar any more (or the next leader's timer
        // does): its timer need not hold the tracker's wait.
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

    /// Why new work is refused once the broker stops: a leader that hands over says try
    /// again (the next leader takes it), a broker on its own that it shuts down.
    pub(super) fn stopping(core: &Core) -> Refusal {
        if core.handing_over {
            Refusal::new(
                ErrorCode::StoreUnavailable,
                "this instance is handing the database over to another; try again shortly",
            )
        } else {
            Refusal::new(ErrorCode::Cancelled, "the broker is shutting down")
        }
    }
}
