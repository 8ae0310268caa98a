//! `harness-probe`: measures which MCP clients re-list tools on
//! `notifications/tools/list_changed`, and writes the capability table `leo-mcp` builds in.
//!
//! - [`serve`]: the MCP server a harness launches; it records what the client does.
//! - [`run`]: starts a client that launches the probe, then judges the records.
//! - [`verdict`]: records → yes/no/unknown per session.
//! - [`table`]: verdict files + published claims → `testdata/harnesscaps.json`.
//! - [`rmcp_client`]: rmcp's client as a reference client.
//!
//! **Invariant:** in `serve`, stdout is the MCP protocol; only `run` and `table` print to stdout.

pub mod cli;
pub mod record;
pub mod rmcp_client;
pub mod run;
pub mod serve;
pub mod table;
pub mod verdict;
