//! The reconnect delay of every Leo client: capped exponential backoff, optionally jittered.
//!
//! A sidecar and an app both reconnect to the broker: soon enough to notice a restart within a
//! fraction of a second, slowly enough not to hammer a broker that stays down. The step starts
//! at `first` and doubles up to `cap`; a connection that worked starts the sequence over
//! (`reset`). With jitter each delay is drawn from the upper half of the step (`step/2 ..=
//! step`), so many apps reconnecting after one broker restart spread out; the sidecar, one per
//! agent session, waits the step itself. The sequence is pure, so it is tested without sleeping.

use std::time::Duration;

/// The documented default: the first delay after a failed attempt.
pub const FIRST: Duration = Duration::from_millis(100);
/// The documented default: the longest delay between attempts.
pub const CAP: Duration = Duration::from_secs(5);

/// Capped exponential backoff.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    step: Duration,
    jitter: bool,
}

impl Default for Backoff {
    /// `FIRST` doubling to `CAP`, without jitter.
    fn default() -> Self {
        Backoff::new(FIRST, CAP)
    }
}

impl Backoff {
    /// `first` doubling to `cap`, without jitter.
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        let first = first.max(Duration::from_millis(1));
        Backoff {
            first,
            cap: cap.max(first),
            step: first,
            jitter: false,
        }
    }

    /// Each delay drawn from the upper half of its step.
    pub fn jittered(mut self) -> Backoff {
        self.jitter = true;
        self
    }

    /// The delay to wait now; the step after it doubles, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        // Without randomness the delay is the step itself, which is still a valid backoff.
        let draw = if self.jitter {
            getrandom::u64().unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
        self.delay_with(draw)
    }

    /// The delay to wait now, given a random `draw` (ignored without jitter).
    fn delay_with(&mut self, draw: u64) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.cap);
        if !self.jitter {
            return step;
        }
        let half = step / 2;
        let spread = (step - half).as_micros().max(1) as u64;
        half + Duration::from_micros(draw % (spread + 1))
    }

    /// Starts over (after a connection that worked).
    pub fn reset(&mut self) {
        self.step = self.first;
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

    #[test]
    fn jitter_stays_within_the_upper_half_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(5000)).jittered();
        let steps = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
        for (i, step) in steps.into_iter().enumerate() {
            let low = b.clone().delay_with(0);
            let high = b.clone().delay_with((step - step / 2) * 1000);
            let d = b.next_delay();
            assert_eq!(low, ms(step / 2), "attempt {i}");
            assert_eq!(high, ms(step), "attempt {i}");
            assert!(d >= low && d <= ms(step), "attempt {i}: {d:?}");
        }
        b.reset();
        assert!(b.next_delay() <= ms(100));
    }
}
