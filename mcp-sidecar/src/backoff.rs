//! The reconnect delay: 100 ms doubling to a 5 s cap, reset after a session that worked.
//!
//! A sidecar usually starts before or together with the broker, and a broker restart should be
//! noticed within a fraction of a second; a broker that stays down must not be hammered. The
//! sequence is pure so it is tested without sleeping.

use std::time::Duration;

/// First delay after a failed attempt.
pub const FIRST: Duration = Duration::from_millis(100);
/// Longest delay between attempts.
pub const CAP: Duration = Duration::from_secs(5);

/// Capped exponential backoff.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST }
    }
}

impl Backoff {
    /// The delay to wait now; the one after it doubles, up to `CAP`.
    pub fn next_delay(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(CAP);
        now
    }

    /// Starts over from `FIRST` (after a connection that reached `welcome`).
    pub fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let ms: Vec<u128> = (0..9).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), FIRST);
    }
}
