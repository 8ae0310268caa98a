//! The broker's integration tests: one binary, every test against the real `leo broker` on a
//! temporary `LEO_HOME` and an ephemeral port, over real HTTP, SSE and the sidecar IPC.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

mod support;

mod approvals;
mod architecture;
mod attacks;
mod bad_input;
mod cli;
mod client_ids;
mod cluster;
mod cluster_history;
mod cluster_outage;
mod cluster_tokens;
mod cluster_upgrade;
mod completions;
mod console;
mod console_browser;
mod docs;
mod doctor;
mod faults;
mod fixtures;
mod history;
mod lifecycle;
mod logs;
mod mcp;
mod mcp_fixtures;
mod oauth;
mod offers;
mod ownership;
mod postgres;
mod quickstart;
mod registration;
mod remote_ipc;
mod requests;
mod scope;
mod security;
mod serve_tool;
mod service;
mod setup_lines;
mod state_db;
mod streams;
mod tls;
mod untrusted;
mod webhooks;
