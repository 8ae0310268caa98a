//! The reconnect delay: capped exponential backoff with jitter.
//!
//! After a broker restart every app reconnects at once; jitter spreads them out. Each delay is
//! drawn from the upper half of the current step (`step/2 ..= step`), the step doubles from
//! `first` to `cap`, and a session that reached the broker starts the sequence over.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    step: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        let first = first.max(Duration::from_millis(1));
        Backoff {
            first,
            cap: cap.max(first),
            step: first,
        }
    }

    /// The delay to wait now, given a random `draw`.
    fn delay_with(&mut self, draw: u64) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.cap);
        let half = step / 2;
        let spread = (step - half).as_micros().max(1) as u64;
        half + Duration::from_micros(draw % (spread + 1))
    }

    /// The delay to wait now.
    pub fn next_delay(&mut self) -> Duration {
        // Without randomness the delay is the step itself, which is still a valid backoff.
        let draw = getrandom::u64().unwrap_or(u64::MAX);
        self.delay_with(draw)
    }

    /// Starts over (after a session that reached the broker).
    pub fn reset(&mut self) {
        self.step = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_within_the_upper_half_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(5000));
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
