//! The harness capability table, `testdata/harnesscaps.json`: which MCP clients re-list tools
//! on `notifications/tools/list_changed`.
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
    #![allow(clippy::unwrap_used)]
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
