//! Progress notifications for a call that waits on an app.
//!
//! A call can be parked for minutes (a handoff waits for a person). Clients such as the
//! TypeScript SDK time a request out after 60 s unless progress arrives, so while a call waits
//! and the client sent a `progressToken`, the sidecar reports progress every 15 s
//! (`LEO_MCP_PROGRESS_MS` overrides it). The numbers only count up; there is no total.

use std::future::pending;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// Ticks every interval while a call waits; never ticks without a progress token.
#[derive(Debug)]
pub struct Ticker {
    token: Option<ProgressToken>,
    interval: Interval,
    sent: u64,
}

impl Ticker {
    pub fn new(token: Option<ProgressToken>, every: Duration) -> Ticker {
        let mut interval = tokio::time::interval_at(Instant::now() + every, every);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ticker {
            token,
            interval,
            sent: 0,
        }
    }

    /// The next notification to send; pends forever when the client gave no token.
    pub async fn tick(&mut self) -> ProgressNotificationParam {
        let Some(token) = self.token.clone() else {
            return pending().await;
        };
        self.interval.tick().await;
        self.sent += 1;
        ProgressNotificationParam::new(token, self.sent as f64)
            .with_message("waiting for the app to answer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    #[tokio::test(start_paused = true)]
    async fn ticks_count_up_each_interval() {
        let token = ProgressToken(NumberOrString::Number(7));
        let mut t = Ticker::new(Some(token), Duration::from_secs(15));
        let start = Instant::now();
        assert_eq!(t.tick().await.progress, 1.0);
        assert_eq!(start.elapsed(), Duration::from_secs(15));
        assert_eq!(t.tick().await.progress, 2.0);
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn no_token_never_ticks() {
        let mut t = Ticker::new(None, Duration::from_millis(1));
        let r = tokio::time::timeout(Duration::from_secs(3600), t.tick()).await;
        assert!(r.is_err());
    }
}
