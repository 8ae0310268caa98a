//! What the sidecar can know about tools while the broker is down.
//!
//! Two facts outlive the broker process: whether any app ever registered a tool
//! (`state/client-tools.json`, which decides whether fallback tools are listed) and the agent's
//! `deny_tools` (`config.yaml`). When no `welcome` has been seen yet, the sidecar reads them
//! itself so that its first `tools/list` says what the broker would have said. Both reads are
//! lenient: a file the broker would reject at start is the broker's error to report, and here
//! it only means "nothing known".

use std::collections::BTreeSet;

use leo_protocol::home::ClientToolsFile;

use crate::home::Home;

/// True when `state/client-tools.json` names at least one tool.
pub fn ever_registered(home: &Home) -> bool {
    let Ok(bytes) = std::fs::read(home.client_tools()) else {
        return false;
    };
    match serde_json::from_slice::<ClientToolsFile>(&bytes) {
        Ok(file) => !file.tools.is_empty(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot parse state/client-tools.json; assuming no app ever registered");
            false
        }
    }
}

/// `agents.<agent>.deny_tools` from `config.yaml`; empty when absent or unreadable.
pub fn denied(home: &Home, agent: &str) -> BTreeSet<String> {
    let Ok(text) = std::fs::read_to_string(home.config()) else {
        return BTreeSet::new();
    };
    denied_in(&text, agent)
}

/// `agents.<agent>.deny_tools` in the YAML `text`.
pub fn denied_in(text: &str, agent: &str) -> BTreeSet<String> {
    let Ok(doc) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) else {
        return BTreeSet::new();
    };
    doc.get("agents")
        .and_then(|a| a.get(agent))
        .and_then(|a| a.get("deny_tools"))
        .and_then(|d| d.as_sequence())
        .map(|seq| {
            seq.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_deny_tools_of_one_agent() {
        let yaml = "web:\n  port: 1\nagents:\n  a:\n    deny_tools: [x, leo_app_call]\n  b:\n    deny_tools: [y]\n";
        let a: Vec<String> = denied_in(yaml, "a").into_iter().collect();
        assert_eq!(a, ["leo_app_call", "x"]);
        assert!(denied_in(yaml, "c").is_empty());
        assert!(denied_in("not: [valid", "a").is_empty());
    }
}
