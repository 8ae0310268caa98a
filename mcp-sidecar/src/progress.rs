//! Progress notifications for a call that waits on an app.
//!
//! A call can be parked for minutes (a handoff waits for a person). Clients such as the
//! TypeScript SDK time a request out after 60 s unless progress arrives, so while a call waits
//! and the client sent a `progressToken`, the sidecar reports progress every 15 s
//! (`LEO_MCP_PROGRESS_MS` overrides it). The numbers only count up; there is no total.
//!
//! An app may report its own progress (`POST …/requests/{id}/progress`): each report goes to
//! the client as it came, and pushes the next keep-alive a whole interval out, so an app that
//! keeps reporting replaces the keep-alive. If it goes quiet, the keep-alive repeats its last
//! numbers (never going back below them) and its last message (the broker's "waiting for
//! approval" while a person has yet to approve the call).

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
    /// The app's last reported progress and total, once it has reported.
    last: Option<(f64, Option<f64>)>,
    /// The last message reported, repeated by the keep-alive.
    message: Option<String>,
}

impl Ticker {
    pub fn new(token: Option<ProgressToken>, every: Duration) -> Ticker {
        let mut interval = tokio::time::interval_at(Instant::now() + every, every);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ticker {
            token,
            interval,
            sent: 0,
            last: None,
            message: None,
        }
    }

    /// The app reported progress: the notification to send now (none without a token), and
    /// the keep-alive waits a whole interval again.
    pub fn app_reported(
        &mut self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> Option<ProgressNotificationParam> {
        let token = self.token.clone()?;
        self.interval.reset();
        self.last = Some((progress, total));
        if message.is_some() {
            self.message.clone_from(&message);
        }
        let mut p = ProgressNotificationParam::new(token, progress);
        p.total = total;
        p.message = message;
        Some(p)
    }

    /// The next notification to send; pends forever when the client gave no token.
    pub async fn tick(&mut self) -> ProgressNotificationParam {
        let Some(token) = self.token.clone() else {
            return pending().await;
        };
        self.interval.tick().await;
        self.sent += 1;
        let mut p = match self.last {
            Some((progress, total)) => {
                let mut p = ProgressNotificationParam::new(token, progress);
                p.total = total;
                p
            }
            None => ProgressNotificationParam::new(token, self.sent as f64),
        };
        p.message = Some(
            self.message
                .clone()
                .unwrap_or_else(|| "waiting for the app to answer".into()),
        );
        p
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
    async fn app_reports_pass_through_and_push_the_keep_alive_out() {
        let token = ProgressToken(NumberOrString::Number(7));
        let mut t = Ticker::new(Some(token), Duration::from_secs(15));
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let p = t
            .app_reported(3.0, Some(10.0), Some("copying".into()))
            .unwrap();
        assert_eq!(
            (p.progress, p.total, p.message.as_deref()),
            (3.0, Some(10.0), Some("copying"))
        );
        // The keep-alive comes an interval after the report, with the app's numbers.
        let k = t.tick().await;
        assert_eq!(start.elapsed(), Duration::from_secs(25));
        assert_eq!((k.progress, k.total), (3.0, Some(10.0)));
        assert!(
            Ticker::new(None, Duration::from_secs(1))
                .app_reported(1.0, None, None)
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_token_never_ticks() {
        let mut t = Ticker::new(None, Duration::from_millis(1));
        let r = tokio::time::timeout(Duration::from_secs(3600), t.tick()).await;
        assert!(r.is_err());
    }
}
