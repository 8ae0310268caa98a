//! The harness capability table: which MCP clients re-list tools on `list_changed`.
//!
//! `harness-probe` measures it and writes `testdata/harnesscaps.json`; the sidecar builds that
//! file in with `include_str!`, so a release carries the table it was tested with and needs no
//! file at run time. Entries match `clientInfo.name` by a case-insensitive pattern where `*`
//! matches any run of characters; the first match wins and no match means the default mode
//! (fallback: a harness we know nothing about is not assumed to re-list).

use serde::Deserialize;

use leo_protocol::ipc::Mode;

/// The table as built in.
pub const BUILTIN_JSON: &str = include_str!("../../testdata/harnesscaps.json");

/// `harnesscaps.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Table {
    pub version: u32,
    #[serde(default)]
    pub comment: Option<String>,
    pub default_mode: Mode,
    pub harnesses: Vec<Entry>,
}

/// One harness, as published or as measured.
#[derive(Debug, Clone, Deserialize)]
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
}

impl Table {
    /// Parses a table.
    pub fn parse(json: &str) -> Result<Table, String> {
        let table: Table = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if table.version != 1 {
            return Err(format!("unknown table version {}", table.version));
        }
        Ok(table)
    }

    /// The built-in table. A malformed file is a build mistake that a unit test catches; at run
    /// time it degrades to an empty table (every harness gets fallback) rather than a crash.
    pub fn builtin() -> Table {
        Table::parse(BUILTIN_JSON).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "built-in harnesscaps.json is malformed; using fallback for every harness");
            Table {
                version: 1,
                comment: None,
                default_mode: Mode::Fallback,
                harnesses: Vec::new(),
            }
        })
    }

    /// The first entry whose pattern matches `client_name`.
    pub fn find(&self, client_name: &str) -> Option<&Entry> {
        self.harnesses
            .iter()
            .find(|e| pattern_matches(&e.pattern, client_name))
    }

    /// The mode for `client_name`.
    pub fn mode_for(&self, client_name: &str) -> Mode {
        self.find(client_name)
            .map(Entry::mode)
            .unwrap_or(self.default_mode)
    }
}

/// Case-insensitive glob match where `*` matches any run of characters (including none).
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.to_lowercase().chars().collect();
    let name: Vec<char> = name.to_lowercase().chars().collect();
    // Classic iterative wildcard match with one backtrack point.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_parses_and_every_entry_maps_to_its_mode() {
        let table = Table::parse(BUILTIN_JSON).unwrap_or_else(|e| panic!("{e}"));
        assert!(!table.harnesses.is_empty());
        for e in &table.harnesses {
            assert!(
                e.source == "published" || e.source == "measured",
                "{}: source {:?}",
                e.harness,
                e.source
            );
            if !e.pattern.contains('*') {
                let first = table.find(&e.pattern).map(|f| f.harness.clone());
                if first.as_deref() == Some(e.harness.as_str()) {
                    assert_eq!(table.mode_for(&e.pattern), e.mode(), "{}", e.harness);
                    assert_eq!(table.mode_for(&e.pattern.to_uppercase()), e.mode());
                }
            }
        }
        assert_eq!(
            table.mode_for("no-such-harness-anywhere"),
            table.default_mode
        );
    }

    #[test]
    fn entries_map_by_their_measurement() {
        let table = Table::parse(
            r#"{"version": 1, "default_mode": "fallback", "harnesses": [
                {"harness": "A", "pattern": "a-cli*", "honors_list_changed": true, "source": "measured", "extra": 1},
                {"harness": "B", "pattern": "b", "honors_list_changed": false, "source": "published"}
            ], "not_measured": []}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(table.mode_for("a-cli-mcp-client"), Mode::Native);
        assert_eq!(table.mode_for("b"), Mode::Fallback);
        assert_eq!(table.mode_for("c"), Mode::Fallback);
        assert!(
            Table::parse(r#"{"version": 2, "default_mode": "native", "harnesses": []}"#).is_err()
        );
    }

    #[test]
    fn patterns() {
        assert!(pattern_matches("claude-code", "claude-code"));
        assert!(!pattern_matches("claude-code", "claude-code-x"));
        assert!(pattern_matches(
            "gemini-cli-mcp-client*",
            "gemini-cli-mcp-client"
        ));
        assert!(pattern_matches(
            "gemini-cli-mcp-client*",
            "gemini-cli-mcp-client-leo"
        ));
        assert!(pattern_matches("*code*", "Visual Studio Code"));
        assert!(pattern_matches("a*b*c", "aXXbYYc"));
        assert!(!pattern_matches("a*b*c", "aXXbYY"));
        assert!(pattern_matches("*", ""));
        assert!(!pattern_matches("x", ""));
    }
}
