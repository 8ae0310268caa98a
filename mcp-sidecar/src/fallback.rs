//! Fallback mode: two fixed tools for harnesses that never list tools again.
//!
//! A harness that ignores `list_changed` (codex, unknown clients) would never see a tool an app
//! registers after the session started. It gets `leo_app_tools`, which lists what apps offer
//! right now with their schemas, and `leo_app_call {tool, args}`, which calls one of them. The
//! pair is listed only if some app has ever registered with this broker, decided once at the
//! session's first `tools/list`: a fresh install shows agents no app tools (only Leo's own
//! `leo_messages`, see `messages`), and an app registering for the very first time needs an
//! agent restart to be seen.

use std::collections::BTreeSet;
use std::sync::Arc;

use leo_protocol::ipc::AgentTool;
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

/// Lists what apps offer now.
pub const APP_TOOLS: &str = "leo_app_tools";
/// Calls one app tool.
pub const APP_CALL: &str = "leo_app_call";

/// The fallback tools this agent may see.
pub fn tools(denied: &BTreeSet<String>) -> Vec<Tool> {
    let mut out = Vec::new();
    if !denied.contains(APP_TOOLS) {
        out.push(Tool::new(
            APP_TOOLS,
            "List the tools that connected apps offer right now, with their input schemas. \
             Call one with leo_app_call. The list changes as apps connect and disconnect.",
            Arc::new(object(json!({"type": "object", "properties": {}}))),
        ));
    }
    if !denied.contains(APP_CALL) {
        out.push(Tool::new(
            APP_CALL,
            "Call a tool offered by a connected app (see leo_app_tools for names and schemas). \
             The result is the app's answer, passed through unchanged.",
            Arc::new(object(json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "description": "The tool's name, as leo_app_tools lists it"},
                    "args": {"type": "object", "description": "Arguments matching the tool's input_schema", "additionalProperties": true}
                },
                "required": ["tool"]
            }))),
        ));
    }
    out
}

/// The text `leo_app_tools` answers: the tools as JSON, one object per tool.
pub fn describe(revision: u64, tools: &[AgentTool]) -> String {
    let list: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut v = json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "group": t.group,
            });
            if let Some(title) = &t.title {
                v["title"] = json!(title);
            }
            if let Some(a) = &t.annotations {
                v["annotations"] = json!(a);
            }
            if let Some(schema) = &t.output_schema {
                // The result's JSON follows this schema (as the text of the answer).
                v["output_schema"] = schema.clone();
            }
            v
        })
        .collect();
    // Serializing a Value cannot fail.
    serde_json::to_string_pretty(&json!({"revision": revision, "tools": list})).unwrap_or_default()
}

/// `leo_app_call`'s arguments, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AppCall {
    pub tool: String,
    pub args: Value,
}

/// Reads `{tool, args}`; the message names the path at fault, as the broker's do.
pub fn parse_call(arguments: &Value) -> Result<AppCall, String> {
    let Some(obj) = arguments.as_object() else {
        return Err("at $: arguments must be an object".into());
    };
    for key in obj.keys() {
        if key != "tool" && key != "args" {
            return Err(format!(
                "at $.{key}: unknown field (expected tool and args)"
            ));
        }
    }
    let tool = match obj.get("tool") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None => return Err("at $.tool: required".into()),
        Some(_) => return Err("at $.tool: expected a string".into()),
    };
    let args = match obj.get("args") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err("at $.args: expected an object".into()),
    };
    Ok(AppCall { tool, args })
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_app_calls() {
        assert_eq!(
            parse_call(&json!({"tool": "t", "args": {"a": 1}})),
            Ok(AppCall {
                tool: "t".into(),
                args: json!({"a": 1})
            })
        );
        assert_eq!(
            parse_call(&json!({"tool": "t"})).map(|c| c.args),
            Ok(json!({}))
        );
        assert!(parse_call(&json!({})).is_err_and(|e| e.contains("$.tool")));
        assert!(parse_call(&json!({"tool": 3})).is_err_and(|e| e.contains("string")));
        assert!(parse_call(&json!({"tool": "t", "args": []})).is_err_and(|e| e.contains("$.args")));
        assert!(parse_call(&json!({"tool": "t", "x": 1})).is_err_and(|e| e.contains("$.x")));
    }

    #[test]
    fn denied_fallback_tools_are_not_listed() {
        let none = BTreeSet::new();
        assert_eq!(tools(&none).len(), 2);
        let deny: BTreeSet<String> = [APP_CALL.to_owned()].into();
        let names: Vec<String> = tools(&deny).iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, [APP_TOOLS]);
    }
}
