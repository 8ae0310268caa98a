//! The harness capability table, `testdata/harnesscaps.json`: which MCP clients re-list tools
//! on `notifications/tools/list_changed`, and what each measured harness does with the rest of
//! MCP (`features`: lifecycle, elicitation, tasks, structured results, images, progress,
//! cancellation), so `leo-mcp` can shape a result for the harness that reads it.
//!
//! `harness-probe table` writes it and `leo-mcp` builds it in; both read and write these
//! types, so the file has one definition. Entries match `clientInfo.name` case-insensitively
//! with `crate::glob` (`*` any run of characters); the first match wins and no match means
//! `default_mode`. Unknown fields are ignored, so an older sidecar reads a newer table.

use serde::{Deserialize, Serialize};

use crate::ipc::Mode;

/// `harnesscaps.json`: the part `leo-mcp` reads. The probe adds its own lists beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub version: u32,
    #[serde(default)]
    pub comment: String,
    pub default_mode: Mode,
    pub harnesses: Vec<Entry>,
}

/// One harness, as published or as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// A human name such as `Claude Code`.
    pub harness: String,
    /// Matched against `clientInfo.name`.
    pub pattern: String,
    /// Whether the client lists tools again after `notifications/tools/list_changed`.
    pub honors_list_changed: bool,
    /// `published` (from changelogs and code) or `measured` (by harness-probe).
    pub source: String,
    #[serde(default)]
    pub version_seen: Option<String>,
    #[serde(default)]
    pub latency_ms: Option<u64>,
    #[serde(default)]
    pub date: Option<String>,
    #[serde(default)]
    pub evidence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions_seen: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_evidence: Option<String>,
    /// What the harness does with the MCP features, as measured (none if never measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
}

/// What the model is given from a result with both `content` and `structuredContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredSeen {
    /// Only `structuredContent` (as JSON text); the content blocks beside it are dropped.
    StructuredOnly,
    /// Only the content blocks; `structuredContent` is dropped.
    ContentOnly,
    /// Both.
    Both,
}

/// One harness's handling of the MCP features, measured by
/// `harness-probe/clients/features/measure.sh` on `version_seen`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    pub version_seen: String,
    pub date: String,
    pub how: String,
    /// The revision it settles on when `leo-mcp` refuses `server/discover`.
    pub protocol_version: Option<String>,
    /// The revision it settles on when `leo-mcp` answers `server/discover`.
    pub protocol_version_with_discover: Option<String>,
    /// Whether it opens with `server/discover`.
    pub tries_discover: bool,
    /// Whether it opened `subscriptions/listen` in a 2026-07-28 session.
    pub subscriptions_listen: bool,
    /// The elicitation modes it declares; empty when it declares none.
    pub elicitation: Vec<String>,
    /// What a question got in the measured (non-interactive) mode: an MCP action
    /// (`accept`, `decline`, `cancel`) or the app's error code (`input_unsupported`).
    pub elicitation_answer: Option<String>,
    /// Whether it declares the tasks extension.
    pub tasks: bool,
    /// Whether every `tools/call` carried a progress token.
    pub progress_token: bool,
    pub structured_result: Option<StructuredSeen>,
    /// Whether the model is given image blocks.
    pub images: Option<bool>,
    /// The setting that bounds a tool call, as measured (`MCP_TOOL_TIMEOUT`, ...).
    pub tool_timeout_setting: String,
    /// Whether progress notifications reset that bound.
    pub progress_resets_timeout: Option<bool>,
    /// Whether it sends `notifications/cancelled` when its own tool timeout ends a call.
    pub cancels_on_timeout: Option<bool>,
    /// Whether an interrupt (Esc, Ctrl-C) sends `notifications/cancelled`; `None` when not
    /// measured.
    #[serde(default)]
    pub cancels_on_interrupt: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Entry {
    /// The mode this harness gets: native only if it re-lists.
    pub fn mode(&self) -> Mode {
        if self.honors_list_changed {
            Mode::Native
        } else {
            Mode::Fallback
        }
    }

    /// True when this row names `client_name`.
    pub fn names(&self, client_name: &str) -> bool {
        crate::glob::matches_ignore_case(&self.pattern, client_name)
    }
}

impl Table {
    /// Parses a table of a version this build knows.
    pub fn parse(json: &str) -> Result<Table, String> {
        let table: Table = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if table.version != 1 {
            return Err(format!("unknown table version {}", table.version));
        }
        Ok(table)
    }

    /// The measured features of the harness named `client_name`, if any.
    pub fn features_for(&self, client_name: &str) -> Option<&Features> {
        self.find(client_name).and_then(|e| e.features.as_ref())
    }

    /// The first entry whose pattern matches `client_name`.
    pub fn find(&self, client_name: &str) -> Option<&Entry> {
        self.harnesses.iter().find(|e| e.names(client_name))
    }

    /// The mode for `client_name`.
    pub fn mode_for(&self, client_name: &str) -> Mode {
        self.find(client_name)
            .map(Entry::mode)
            .unwrap_or(self.default_mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_map_by_their_measurement() {
        let table = Table::parse(
            r#"{"version": 1, "default_mode": "fallback", "harnesses": [
                {"harness": "A", "pattern": "a-cli*", "honors_list_changed": true, "source": "measured", "extra": 1},
                {"harness": "B", "pattern": "b", "honors_list_changed": false, "source": "published"}
            ], "not_measured": []}"#,
        )
        .unwrap();
        assert_eq!(table.mode_for("A-CLI-mcp-client"), Mode::Native);
        assert_eq!(table.mode_for("b"), Mode::Fallback);
        assert_eq!(table.mode_for("c"), Mode::Fallback);
        assert!(
            Table::parse(r#"{"version": 2, "default_mode": "native", "harnesses": []}"#).is_err()
        );
    }
}
