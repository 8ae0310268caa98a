//! `GET /metrics`: the broker's counters in the Prometheus text format (OpenMetrics), through
//! the maintained `prometheus-client` crate.
//!
//! Counters that grow with traffic live here, process-wide: calls by tool and outcome and the
//! park-to-settle latency (counted by the history writer, off the core lock), and refusals by
//! code (counted where a refusal is written, on HTTP and on the sidecar socket). What is a
//! state rather than a count (live calls, connected apps and agents, SSE backlog) is read when
//! the page is asked for, so it can never drift.

use leo_protocol::outcome::CallOutcome;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::core::Broker;

type Labels = Vec<(String, String)>;

/// The process-wide counters.
pub struct Metrics {
    calls: Family<Labels, Counter>,
    latency: Histogram,
    rejected: Family<Labels, Counter>,
    /// Each open stream's queued bytes, dropped with the stream.
    backlogs: Mutex<Vec<Weak<AtomicUsize>>>,
}

/// The counters.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(|| Metrics {
        calls: Family::default(),
        // 1 ms to about 9 minutes.
        latency: Histogram::new(exponential_buckets(0.001, 2.0, 20)),
        rejected: Family::default(),
        backlogs: Mutex::new(Vec::new()),
    })
}

impl Metrics {
    /// A call ended: its tool, outcome and time from parked to ended.
    pub fn call_ended(&self, tool: &str, outcome: CallOutcome, duration_ms: u64) {
        let labels = vec![
            ("tool".to_owned(), tool.to_owned()),
            ("outcome".to_owned(), outcome.as_str().to_owned()),
        ];
        self.calls.get_or_create(&labels).inc();
        self.latency.observe(duration_ms as f64 / 1000.0);
    }

    /// A request was refused with `code`, on `door` (`http` or `ipc`).
    pub fn rejected(&self, door: &str, code: &str) {
        let labels = vec![
            ("door".to_owned(), door.to_owned()),
            ("code".to_owned(), code.to_owned()),
        ];
        self.rejected.get_or_create(&labels).inc();
    }

    /// `rejected`, passing `id` through (for one-line hooks).
    pub fn rejected_then<T>(&self, door: &str, code: leo_protocol::ErrorCode, id: T) -> T {
        self.rejected(door, code.as_str());
        id
    }

    /// Counts an open stream's backlog until the stream is gone.
    pub fn watch_backlog(&self, backlog: &Arc<AtomicUsize>) {
        if let Ok(mut all) = self.backlogs.lock() {
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(backlog));
        }
    }

    fn backlog_bytes(&self) -> i64 {
        let Ok(mut all) = self.backlogs.lock() else {
            return 0;
        };
        all.retain(|w| w.strong_count() > 0);
        let sum: usize = all
            .iter()
            .filter_map(Weak::upgrade)
            .map(|b| b.load(Ordering::Relaxed))
            .sum();
        i64::try_from(sum).unwrap_or(i64::MAX)
    }

    /// The page: the counters, and the broker's state as of now.
    pub fn render(&self, broker: &Broker) -> String {
        let mut registry = Registry::with_prefix("leo");
        registry.register(
            "calls",
            "Calls that ended, by tool and outcome",
            self.calls.clone(),
        );
        registry.register(
            "call_duration_seconds",
            "Time from a call parked to its outcome",
            self.latency.clone(),
        );
        registry.register(
            "rejected_requests",
            "Requests refused, by door (http, ipc) and error code",
            self.rejected.clone(),
        );
        let status = broker.status();
        let gauge = |registry: &mut Registry, name: &str, help: &str, value: i64| {
            let g: Gauge = Gauge::default();
            g.set(value);
            registry.register(name, help, g);
        };
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let providers = status.apps.iter().filter(|a| a.provider).count();
        gauge(
            &mut registry,
            "live_calls",
            "Calls parked or claimed",
            count(status.pending),
        );
        gauge(
            &mut registry,
            "connected_apps",
            "Provider streams open",
            count(providers),
        );
        gauge(
            &mut registry,
            "connected_agents",
            "Sidecar sessions open",
            count(status.agents.len()),
        );
        gauge(
            &mut registry,
            "sse_backlog_bytes",
            "Bytes of events queued for slow event streams",
            self.backlog_bytes(),
        );
        let dropped = i64::try_from(broker.history().dropped()).unwrap_or(i64::MAX);
        gauge(
            &mut registry,
            "history_dropped_records",
            "History and audit records dropped because the writer was behind",
            dropped,
        );
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}
