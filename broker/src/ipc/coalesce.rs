//! The list_changed coalescer of one session: the first tool-set change after a quiet
//! interval is sent at once, later ones fold into at most one frame an interval, the last
//! state is always sent, and a change that leaves what this agent is offered as it was sends
//! nothing.
//!
//! Pure: it holds no channel and reads no clock of its own; the session tells it what happened
//! and asks it when to look again, so its promise is unit-tested with paused time.

use std::time::Duration;

use tokio::time::Instant;

/// When to send a session's next `tools` frame.
#[derive(Debug)]
pub struct Coalescer {
    every: Duration,
    /// A change was seen and not yet looked at.
    pending: bool,
    /// No frame goes out before this.
    next_at: Instant,
    /// The fingerprint of what the agent was last told (`Broker::offer_fingerprint`).
    offered: u64,
}

impl Coalescer {
    /// A coalescer for an agent told `offered` (the welcome's fingerprint), at most one frame
    /// per `every`.
    pub fn new(every: Duration, offered: u64, now: Instant) -> Coalescer {
        Coalescer {
            every,
            pending: false,
            next_at: now,
            offered,
        }
    }

    /// The tool set changed.
    pub fn changed(&mut self) {
        self.pending = true;
    }

    /// True while a change waits: the session need not watch for more until then.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// When the waiting change is due; `None` when none waits.
    pub fn due(&self) -> Option<Instant> {
        self.pending.then_some(self.next_at)
    }

    /// The due time came and the agent is now offered `fingerprint`: true when a frame must
    /// go out (what it is offered differs from what it was told).
    pub fn fire(&mut self, now: Instant, fingerprint: u64) -> bool {
        self.pending = false;
        if fingerprint == self.offered {
            return false;
        }
        self.offered = fingerprint;
        self.next_at = now + self.every;
        true
    }

    /// Resolves when the waiting change is due; never while none waits.
    pub async fn wait(&self) {
        match self.due() {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// Waits for the coalescer and fires it with `fingerprint`; returns when (from `t0`) it
    /// fired and whether a frame went out.
    async fn next(c: &mut Coalescer, t0: Instant, fingerprint: u64) -> (Duration, bool) {
        c.wait().await;
        let now = Instant::now();
        (now - t0, c.fire(now, fingerprint))
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_change_goes_out_at_once() {
        let t0 = Instant::now();
        let mut c = Coalescer::new(SECOND, 0, t0);
        assert_eq!(c.due(), None);
        c.changed();
        assert_eq!(next(&mut c, t0, 1).await, (Duration::ZERO, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_folds_into_one_frame_a_second_and_the_last_state_is_sent() {
        let t0 = Instant::now();
        let mut c = Coalescer::new(SECOND, 0, t0);
        c.changed();
        assert_eq!(next(&mut c, t0, 1).await, (Duration::ZERO, true));
        // Ten changes within the next second: one frame, at the second, with the last state.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_millis(50)).await;
            c.changed();
        }
        assert_eq!(next(&mut c, t0, 11).await, (SECOND, true));
        // And the next change waits for the second after that.
        tokio::time::advance(Duration::from_millis(100)).await;
        c.changed();
        assert_eq!(next(&mut c, t0, 12).await, (2 * SECOND, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_leaves_the_offer_as_it_was_sends_nothing_and_delays_nothing() {
        let t0 = Instant::now();
        let mut c = Coalescer::new(SECOND, 5, t0);
        c.changed();
        assert_eq!(next(&mut c, t0, 5).await, (Duration::ZERO, false));
        assert!(!c.is_pending());
        // Nothing was sent, so a real change right after goes out at once.
        tokio::time::advance(Duration::from_millis(10)).await;
        c.changed();
        assert_eq!(next(&mut c, t0, 6).await, (Duration::from_millis(10), true));
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_quiet_second_a_change_goes_out_at_once_again() {
        let t0 = Instant::now();
        let mut c = Coalescer::new(SECOND, 0, t0);
        c.changed();
        assert!(next(&mut c, t0, 1).await.1);
        tokio::time::advance(3 * SECOND).await;
        c.changed();
        assert_eq!(next(&mut c, t0, 2).await, (3 * SECOND, true));
    }
}
