//! Tool definitions as apps register them, and the per-tool rules of registration.
//!
//! Rules that need only one tool (name shape, reserved prefix, description, schema, timeout,
//! label) are checked here; rules that need the whole broker (uniqueness across groups, the
//! per-broker count) belong to the broker's registry.

use crate::names::ClientId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::*;
use crate::schema::{check_input_schema, inline_input_schema};

/// `POST /api/v1/client-tools`: register or replace a group; a body that offers nothing (no
/// tools, prompts, resources or templates) withdraws it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    pub client_id: ClientId,
    pub group: String,
    pub tools: Vec<ToolDef>,
    /// The agents this group is offered to: exact names or `*`/`?` globs; `None` means every
    /// agent. An agent outside the list neither sees nor can call the group's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// Prompts the group offers (`crate::offers`), with the group's scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<crate::offers::PromptDef>,
    /// Resources at fixed URIs the group offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<crate::offers::ResourceDef>,
    /// Resource templates the group offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_templates: Vec<crate::offers::ResourceTemplateDef>,
}

impl RegisterBody {
    /// True when the body offers nothing: no tools, prompts, resources or templates.
    pub fn is_withdrawal(&self) -> bool {
        self.tools.is_empty()
            && self.prompts.is_empty()
            && self.resources.is_empty()
            && self.resource_templates.is_empty()
    }
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

/// One tool as an app defines it. The optional MCP fields (`title`, `annotations`,
/// `output_schema`, `execution`) are left out of the JSON when absent, so a definition without
/// them has the digest it always had.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The MCP tool's `title` (a harness shows it instead of the name); `label` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// MCP tool annotations: hints a harness may use to decide whether to ask before a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// An object schema for the result's `structured_content`, with the input_schema subset and
    /// limits; a tool with one must send `structured_content` that matches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// How a harness that supports MCP tasks should run the tool's calls; absent means `task`
    /// for a handoff (`timeout_s: 0`) and `sync` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// `required`: every call waits for a person's approval before any app sees it
    /// (docs/approvals.md). Absent: only the operator's `approvals:` rules may require it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMode>,
}

/// `approval` of a tool definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// A person approves each call first.
    Required,
}

/// MCP tool annotations, as the app registers them (`docs/protocol.md`, "Tool annotations").
/// They are hints for the harness, not guarantees Leo checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolAnnotations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// Whether a call runs as an MCP task where the harness supports tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// The call blocks the harness's request until it ends.
    #[default]
    Sync,
    /// The harness gets a task at once and polls it (`tasks/get`, `tasks/result`).
    Task,
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
    crate::names::is_name_within(group, MAX_GROUP_NAME)
}

impl ToolDef {
    /// The timeout this tool's calls get; `None` means never (a handoff).
    pub fn effective_timeout_s(&self, default_s: u64) -> Option<u64> {
        match self.timeout_s.unwrap_or(default_s) {
            0 => None,
            s => Some(s),
        }
    }

    /// Checks every rule that needs only this tool, and inlines the local refs of its
    /// input_schema (so every consumer of the checked definition sees the inlined form). `at`
    /// is the JSON path of the tool in the body, such as `$.tools[2]`.
    pub fn check(&mut self, at: &str) -> Result<(), ToolError> {
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
        self.check_input_schema(at)?;
        if let Some(output) = &self.output_schema {
            self.check_output_schema(output, at)?;
        }
        if let Some(title) = &self.title {
            let n = title.chars().count();
            if n == 0 || n > MAX_LABEL || title.trim().is_empty() {
                return Err(fail(
                    "title",
                    format!("title must be 1 to {MAX_LABEL} characters, got {n}"),
                ));
            }
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

    /// Checks the input_schema's size and subset, and inlines its local refs in place.
    fn check_input_schema(&mut self, at: &str) -> Result<(), ToolError> {
        let fail = |at: &str, field: &str, message: String| ToolError {
            message: format!("at {at}.{field}: {message}"),
        };
        let size = json_size(&self.input_schema);
        if size > MAX_SCHEMA_BYTES {
            return Err(fail(
                at,
                "input_schema",
                format!("input_schema has {size} bytes, at most {MAX_SCHEMA_BYTES}"),
            ));
        }
        self.input_schema = inline_input_schema(&self.input_schema).map_err(|e| ToolError {
            message: format!("invalid input_schema of tool {:?}: {e}", self.name),
        })?;
        let size = json_size(&self.input_schema);
        if size > MAX_SCHEMA_BYTES {
            return Err(fail(
                at,
                "input_schema",
                format!(
                    "input_schema has {size} bytes once refs are inlined, at most {MAX_SCHEMA_BYTES}"
                ),
            ));
        }
        Ok(())
    }

    /// `output_schema` follows the input_schema rules: an object schema of the subset, at most
    /// `MAX_SCHEMA_BYTES`.
    fn check_output_schema(&self, output: &Value, at: &str) -> Result<(), ToolError> {
        let size = json_size(output);
        if size > MAX_SCHEMA_BYTES {
            return Err(ToolError {
                message: format!(
                    "at {at}.output_schema: output_schema has {size} bytes, at most {MAX_SCHEMA_BYTES}"
                ),
            });
        }
        check_input_schema(output).map_err(|e| ToolError {
            message: format!(
                "invalid output_schema of tool {:?}: at {at}.output_schema{}: {}",
                self.name,
                e.path.strip_prefix('$').unwrap_or(&e.path),
                e.message
            ),
        })
    }

    /// The title a harness shows: `title`, else `label`.
    pub fn shown_title(&self) -> Option<&str> {
        self.title.as_deref().or(self.label.as_deref())
    }

    /// The execution mode this tool's calls get where the harness supports tasks; `handoff`
    /// says whether its calls never time out.
    pub fn effective_execution(&self, handoff: bool) -> Execution {
        match self.execution {
            Some(e) => e,
            None if handoff => Execution::Task,
            None => Execution::Sync,
        }
    }
}

/// The byte size of `value` as compact JSON.
fn json_size(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}
