//! The harness capability table: which MCP clients re-list tools on `list_changed`, and what
//! each measured harness does with the other MCP features (see `shape`).
//!
//! `harness-probe` measures it and writes `testdata/harnesscaps.json`; the sidecar builds that
//! file in with `include_str!`, so a release carries the table it was tested with and needs no
//! file at run time. The table's types and matching rule are `leo_protocol::harness`; a
//! harness we know nothing about gets the default mode (fallback: it is not assumed to
//! re-list).

use leo_protocol::ipc::Mode;

/// The table as built in.
pub const BUILTIN_JSON: &str = include_str!("../../testdata/harnesscaps.json");

pub use leo_protocol::harness::{Entry, Features, Table};

/// The built-in table, parsed once.
pub fn table() -> &'static Table {
    static TABLE: std::sync::LazyLock<Table> = std::sync::LazyLock::new(builtin);
    &TABLE
}

/// The measured features of the harness named `client_name`.
pub fn features_for(client_name: &str) -> Option<&'static Features> {
    table().features_for(client_name)
}

/// The built-in table. A malformed file is a build mistake that a unit test catches; at run
/// time it degrades to an empty table (every harness gets fallback) rather than a crash.
pub fn builtin() -> Table {
    Table::parse(BUILTIN_JSON).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "built-in harnesscaps.json is malformed; using fallback for every harness");
        Table {
            version: 1,
            comment: String::new(),
            default_mode: Mode::Fallback,
            harnesses: Vec::new(),
        }
    })
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
    fn the_three_harness_clis_have_measured_features() {
        for name in ["claude-code", "codex-mcp-client", "opencode"] {
            let f = features_for(name).unwrap_or_else(|| panic!("{name}: no features"));
            assert!(f.progress_token, "{name}");
        }
        assert!(features_for("no-such-harness-anywhere").is_none());
    }
}
