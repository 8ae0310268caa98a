//! Tool definitions as apps register them, and the per-tool rules of registration.
//!
//! Rules that need only one tool (name shape, reserved prefix, description, schema, timeout,
//! label) are checked here; rules that need the whole broker (uniqueness across groups, the
//! per-broker count) belong to the broker's registry.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::*;
use crate::schema::check_input_schema;

/// `POST /api/v1/client-tools`: register or replace a group; an empty `tools` withdraws it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    pub client_id: String,
    pub group: String,
    pub tools: Vec<ToolDef>,
    /// The agents this group is offered to: exact names or `*`/`?` globs; `None` means every
    /// agent. An agent outside the list neither sees nor can call the group's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
}

/// At most this many entries in a registration's `agents`.
pub const MAX_AGENT_PATTERNS: usize = 64;

/// Checks a registration's `agents`: 1 to 64 entries, each 1 to 64 of `[A-Za-z0-9_.-]`, `*`
/// and `?` (the agent-name characters and the glob marks).
pub fn check_agent_patterns(agents: &[String]) -> Result<(), ToolError> {
    if agents.is_empty() {
        return Err(ToolError {
            message: "at $.agents: an empty list offers the tools to no agent; leave agents out to offer them to every agent".into(),
        });
    }
    if agents.len() > MAX_AGENT_PATTERNS {
        return Err(ToolError {
            message: format!(
                "at $.agents: {} entries, at most {MAX_AGENT_PATTERNS}",
                agents.len()
            ),
        });
    }
    for (i, p) in agents.iter().enumerate() {
        let ok = !p.is_empty()
            && p.len() <= MAX_GROUP_NAME
            && p.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'*' | b'?')
            });
        if !ok {
            return Err(ToolError {
                message: format!(
                    "at $.agents[{i}]: {p:?} must be 1 to 64 of [A-Za-z0-9_.-], with * and ? as globs"
                ),
            });
        }
    }
    Ok(())
}

/// One tool as an app defines it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// A registration rule that one tool breaks, with the JSON path of the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub message: String,
}

/// True when `name` is 1 to 64 of `[A-Za-z0-9_-]`.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// True when `name` starts with the reserved `leo_` prefix, in any case.
pub fn is_reserved_name(name: &str) -> bool {
    name.len() >= RESERVED_PREFIX.len()
        && name.as_bytes()[..RESERVED_PREFIX.len()].eq_ignore_ascii_case(RESERVED_PREFIX.as_bytes())
}

/// True when `group` is 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn is_valid_group_name(group: &str) -> bool {
    !group.is_empty()
        && group.len() <= MAX_GROUP_NAME
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl ToolDef {
    /// The timeout this tool's calls get; `None` means never (a handoff).
    pub fn effective_timeout_s(&self, default_s: u64) -> Option<u64> {
        match self.timeout_s.unwrap_or(default_s) {
            0 => None,
            s => Some(s),
        }
    }

    /// Checks every rule that needs only this tool. `at` is the JSON path of the tool in the
    /// body, such as `$.tools[2]`.
    pub fn check(&self, at: &str) -> Result<(), ToolError> {
        let fail = |field: &str, message: String| ToolError {
            message: format!("at {at}.{field}: {message}"),
        };
        if !is_valid_tool_name(&self.name) {
            return Err(fail(
                "name",
                format!(
                    "tool name {:?} must be 1 to {MAX_TOOL_NAME} of [A-Za-z0-9_-]",
                    self.name
                ),
            ));
        }
        if is_reserved_name(&self.name) {
            return Err(fail(
                "name",
                format!(
                    "tool name {:?} uses the reserved prefix \"{RESERVED_PREFIX}\"",
                    self.name
                ),
            ));
        }
        let described = self.description.chars().count();
        if self.description.trim().is_empty() {
            return Err(fail("description", "description is required".into()));
        }
        if described > MAX_DESCRIPTION {
            return Err(fail(
                "description",
                format!("description has {described} characters, at most {MAX_DESCRIPTION}"),
            ));
        }
        let size = serde_json::to_vec(&self.input_schema)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_SCHEMA_BYTES {
            return Err(fail(
                "input_schema",
                format!("input_schema has {size} bytes, at most {MAX_SCHEMA_BYTES}"),
            ));
        }
        if let Err(e) = check_input_schema(&self.input_schema) {
            return Err(ToolError {
                message: format!("invalid input_schema of tool {:?}: {e}", self.name),
            });
        }
        if let Some(t) = self.timeout_s
            && t > MAX_TIMEOUT_S
        {
            return Err(fail(
                "timeout_s",
                format!("timeout_s {t} is more than {MAX_TIMEOUT_S} (use 0 for never)"),
            ));
        }
        if let Some(label) = &self.label {
            let n = label.chars().count();
            if n == 0 || n > MAX_LABEL {
                return Err(fail(
                    "label",
                    format!("label must be 1 to {MAX_LABEL} characters, got {n}"),
                ));
            }
        }
        Ok(())
    }
}
