//! `GET /metrics`: the broker's counters in the Prometheus text format (OpenMetrics), through
//! the maintained `prometheus-client` crate.
//!
//! Counters that grow with traffic live here, process-wide: calls by tool and outcome and the
//! park-to-settle latency (counted by the history writer, off the core lock), and refusals by
//! code (counted where a refusal is written, on HTTP and on the sidecar socket). What is a
//! state rather than a count (live calls, connected apps and agents, SSE backlog) is read when
//! the page is asked for, so it can never drift.
//!
//! Every label set is bounded, so the page cannot grow for the broker's life: each label is a
//! type (`EncodeLabelSet`), outcomes, doors and error codes are closed sets, and tool names,
//! which apps choose, keep a series of their own for at most `MAX_TOOL_SERIES` names at once:
//! a new name past that takes the place of the name whose last call ended longest ago, whose
//! series leave the page (a scraper sees them end, as for a tool that is gone).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use leo_protocol::ErrorCode;
use leo_protocol::history::CallOutcome;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Tool names with series of their own at once, at most: twice as many as can be registered at
/// once, so live tools keep theirs while names that went away age out.
pub const MAX_TOOL_SERIES: usize = 2 * leo_protocol::limits::MAX_TOOLS_PER_BROKER;

/// The labels of `leo_calls_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    outcome: Outcome,
}

/// The labels of `leo_rejected_requests_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectedLabels {
    door: Door,
    code: Code,
}

/// The labels of `leo_instance_info`: which instance of a cluster wrote the page, and its role.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    instance: String,
    role: &'static str,
}

/// How a call ended, as its wire name.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
struct Outcome(CallOutcome);

/// A refusal's error code, as its wire name.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
struct Code(ErrorCode);

/// Where a refusal was written.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Door {
    Http,
    Ipc,
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.0.as_str())
    }
}

impl EncodeLabelValue for Code {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.0.as_str())
    }
}

impl EncodeLabelValue for Door {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(match self {
            Door::Http => "http",
            Door::Ipc => "ipc",
        })
    }
}

/// The tool names that have series, each with the tick of its last ended call.
#[derive(Default)]
struct ToolNames {
    last: HashMap<String, u64>,
    tick: u64,
}

/// The process-wide counters.
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    tools: Mutex<ToolNames>,
    latency: Histogram,
    rejected: Family<RejectedLabels, Counter>,
    /// Each open stream's queued bytes, dropped with the stream.
    backlogs: Mutex<Vec<Weak<AtomicUsize>>>,
    /// This instance's id when it leads a cluster (PostgreSQL), for `leo_instance_info`, and
    /// when it took and last renewed the lease.
    instance: Mutex<Option<Leading>>,
}

/// What the leader's page says of its lease: `leo_cluster_last_takeover_timestamp_seconds`
/// (when this instance took it: the last takeover, as far as the cluster is concerned) and
/// `leo_cluster_lease_age_seconds` (since its last renewal: past the lease, followers may
/// take it).
struct Leading {
    id: String,
    taken: std::time::SystemTime,
    renewed: std::time::Instant,
}

/// The counters.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(Metrics::new)
}

impl Metrics {
    fn new() -> Metrics {
        Metrics {
            calls: Family::default(),
            tools: Mutex::new(ToolNames::default()),
            // 1 ms to about 9 minutes.
            latency: Histogram::new(exponential_buckets(0.001, 2.0, 20)),
            rejected: Family::default(),
            backlogs: Mutex::new(Vec::new()),
            instance: Mutex::new(None),
        }
    }

    /// A call ended: its tool, outcome and time from parked to ended.
    pub fn call_ended(&self, tool: &str, outcome: CallOutcome, duration_ms: u64) {
        let labels = CallLabels {
            tool: tool.to_owned(),
            outcome: Outcome(outcome),
        };
        if let Ok(mut names) = self.tools.lock() {
            names.tick += 1;
            let tick = names.tick;
            if names.last.insert(tool.to_owned(), tick).is_none()
                && names.last.len() > MAX_TOOL_SERIES
            {
                self.forget_oldest(&mut names);
            }
            // Under the lock, so a name is never counted while its series are being removed.
            self.calls.get_or_create(&labels).inc();
        }
        self.latency.observe(duration_ms as f64 / 1000.0);
    }

    /// Drops the series of the tool whose last call ended longest ago.
    fn forget_oldest(&self, names: &mut ToolNames) {
        let Some(oldest) = names
            .last
            .iter()
            .min_by_key(|(_, tick)| **tick)
            .map(|(name, _)| name.clone())
        else {
            return;
        };
        names.last.remove(&oldest);
        for outcome in CallOutcome::ALL {
            self.calls.remove(&CallLabels {
                tool: oldest.clone(),
                outcome: Outcome(outcome),
            });
        }
    }

    /// A request was refused with `code`, on `door`.
    pub fn rejected(&self, door: Door, code: ErrorCode) {
        let labels = RejectedLabels {
            door,
            code: Code(code),
        };
        self.rejected.get_or_create(&labels).inc();
    }

    /// `rejected`, passing `id` through (for one-line hooks).
    pub fn rejected_then<T>(&self, door: Door, code: ErrorCode, id: T) -> T {
        self.rejected(door, code);
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

    /// Says that this process leads a cluster as instance `id`: its pages carry
    /// `leo_instance_info{instance=id,role="leader"}`.
    pub fn set_instance(&self, id: &str) {
        if let Ok(mut instance) = self.instance.lock() {
            *instance = Some(Leading {
                id: id.to_owned(),
                taken: std::time::SystemTime::now(),
                renewed: std::time::Instant::now(),
            });
        }
    }

    /// The lease this instance leads with was renewed just now.
    pub fn lease_renewed(&self) {
        if let Ok(mut instance) = self.instance.lock()
            && let Some(leading) = instance.as_mut()
        {
            leading.renewed = std::time::Instant::now();
        }
    }

    /// Registers the lease's two gauges for the leader's page.
    fn register_lease(registry: &mut Registry, leading: &Leading) {
        let seconds = |name: &str, help: &str, value: f64| {
            let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
            g.set(value);
            (name.to_owned(), help.to_owned(), g)
        };
        let taken = leading
            .taken
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for (name, help, gauge) in [
            seconds(
                "cluster_last_takeover_timestamp_seconds",
                "When this instance took the lease (Unix time)",
                taken,
            ),
            seconds(
                "cluster_lease_age_seconds",
                "Seconds since this leader last renewed its lease",
                leading.renewed.elapsed().as_secs_f64(),
            ),
        ] {
            registry.register(name, help, gauge);
        }
    }

    /// Registers `leo_instance_info` for instance `id` in `role`.
    fn register_instance(registry: &mut Registry, id: &str, role: &'static str) {
        let info: Family<InstanceLabels, Gauge> = Family::default();
        info.get_or_create(&InstanceLabels {
            instance: id.to_owned(),
            role,
        })
        .set(1);
        registry.register(
            "instance_info",
            "This instance of the cluster, and its role",
            info,
        );
    }

    /// A follower's page (see `http::front`): its own counters, `leo_instance_info`, and its
    /// links to the leader (open, and the sessions on them); the state of calls and sessions
    /// is the leader's page.
    pub fn render_follower(&self, id: &str, (links, carried): (usize, usize)) -> String {
        let mut registry = Registry::with_prefix("leo");
        self.register_counters(&mut registry);
        Self::register_instance(&mut registry, id, "follower");
        gauge(
            &mut registry,
            "cluster_links",
            "Links open from this follower to the leader (cluster::link)",
            count(links),
        );
        gauge(
            &mut registry,
            "cluster_link_sessions",
            "Sidecar sessions this follower carries to the leader on its links",
            count(carried),
        );
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }

    /// Registers the counters that grow with traffic.
    fn register_counters(&self, registry: &mut Registry) {
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
        registry.register(
            "store_commits",
            "Transactions the live store committed (one round trip each to PostgreSQL)",
            ConstCounter::new(crate::store::commits()),
        );
    }

    /// The page: the counters, and the broker's state as of now (`status`, and how many
    /// history records were dropped). Given by the caller, so that the metrics, which the
    /// core and the history count into, import neither.
    pub fn render(&self, status: &leo_protocol::status::Status, history_dropped: u64) -> String {
        let mut registry = Registry::with_prefix("leo");
        self.register_counters(&mut registry);
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
        if let Ok(instance) = self.instance.lock()
            && let Some(leading) = instance.as_ref()
        {
            Self::register_instance(&mut registry, &leading.id, "leader");
            Self::register_lease(&mut registry, leading);
        }
        let dropped = i64::try_from(history_dropped).unwrap_or(i64::MAX);
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

/// Registers a gauge of the state as of now.
fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

/// A count as a gauge's value.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn page(m: &Metrics) -> String {
        let mut registry = Registry::with_prefix("leo");
        m.register_counters(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn tool_names_keep_series_for_the_most_recent_names_only() {
        let m = Metrics::new();
        m.call_ended("kept", CallOutcome::Result, 1);
        for n in 0..1000 {
            m.call_ended(&format!("t{n}"), CallOutcome::Timeout, 1);
            // A live tool called all along keeps its series.
            m.call_ended("kept", CallOutcome::Result, 1);
        }
        let page = page(&m);
        let series = page
            .lines()
            .filter(|l| l.starts_with("leo_calls_total{"))
            .count();
        assert_eq!(series, MAX_TOOL_SERIES, "{page}");
        assert!(page.contains("leo_calls_total{tool=\"kept\",outcome=\"result\"} 1001"));
        assert!(page.contains("leo_calls_total{tool=\"t999\",outcome=\"timeout\"} 1"));
        assert!(!page.contains("tool=\"t0\""), "{page}");
        m.rejected(Door::Ipc, ErrorCode::NoClient);
        assert!(page_has(
            &m,
            "leo_rejected_requests_total{door=\"ipc\",code=\"no_client\"} 1"
        ));
    }

    fn page_has(m: &Metrics, line: &str) -> bool {
        page(m).lines().any(|l| l == line)
    }
}
