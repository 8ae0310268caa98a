//! The SDK's integration tests: one binary; every test runs an app built with `leo_app` against
//! the real `leo broker` on a temporary `LEO_HOME`, with agents played by an rmcp client driving
//! the real `leo-mcp` (`leo_testkit::agent`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod support;

mod approvals;
mod calls;
mod cancel;
mod cluster_kills;
mod concurrency;
mod conformance;
mod features;
mod hosts;
mod kills;
mod offers;
mod outage;
mod reconnect;
mod refusals;
mod scope;
mod stops;
mod takeover;
mod typed;
