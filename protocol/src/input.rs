//! What a claimant may send while it works on a call: progress, and questions for the user.
//!
//! Both travel to the harness that made the call: progress as MCP `notifications/progress` on
//! the call's progress token, a question as an MCP `elicitation/create` request in form mode.
//! A harness shows the question to its user; MCP limits form schemas to a flat object of
//! primitive properties, and a harness refuses anything else, so the broker checks that shape
//! here and names the JSON path at fault rather than letting the harness fail later.
//!
//! A question is the app's text shown to a person, so its words (the message, titles,
//! descriptions, choice labels) go through the one sanitizer (`sanitized_question`), and its
//! values (property names, `enum` choices, a `default`), which the answer must carry back
//! unchanged, are refused when they hold a control character rather than rewritten.

use crate::names::ClientId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::limits::{MAX_ERROR_MESSAGE, MAX_SCHEMA_BYTES};
use crate::sanitize::{Lines, is_clean, sanitize, sanitize_schema};

/// `POST /api/v1/client-tools/requests/{id}/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressBody {
    pub client_id: ClientId,
    /// How far the work is; a harness expects it to grow with each report.
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ProgressBody {
    /// Checks the numbers and the message length.
    pub fn check(&self) -> Result<(), String> {
        if !self.progress.is_finite() || self.progress < 0.0 {
            return Err("at $.progress: must be a number of at least 0".into());
        }
        if let Some(total) = self.total
            && (!total.is_finite() || total < 0.0)
        {
            return Err("at $.total: must be a number of at least 0".into());
        }
        check_message(self.message.as_deref())
    }
}

fn check_message(message: Option<&str>) -> Result<(), String> {
    match message {
        Some(m) if m.chars().count() > MAX_ERROR_MESSAGE => Err(format!(
            "at $.message: at most {MAX_ERROR_MESSAGE} characters"
        )),
        _ => Ok(()),
    }
}

/// `POST /api/v1/client-tools/requests/{id}/input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputBody {
    pub client_id: ClientId,
    /// What the user is asked, shown by the harness.
    pub message: String,
    /// The form: `{"type": "object", "properties": {...}, "required": [...]}` with properties
    /// of type string, number, integer or boolean (a string may carry `enum`, or titled
    /// choices in `oneOf`), or array (a multi select, see `choices`).
    pub requested_schema: Value,
}

impl InputBody {
    /// Checks the message and the form's shape.
    pub fn check(&self) -> Result<(), String> {
        if self.message.trim().is_empty() {
            return Err("at $.message: required".into());
        }
        check_message(Some(&self.message))?;
        let size = serde_json::to_vec(&self.requested_schema)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_SCHEMA_BYTES {
            return Err(format!(
                "at $.requested_schema: {size} bytes, at most {MAX_SCHEMA_BYTES}"
            ));
        }
        check_form(&self.requested_schema, "$.requested_schema")
    }
}

/// A question as the harness shows it: the message and the form's words through the one
/// sanitizer. The broker calls it where a question enters (`core/relay.rs`), and `leo-mcp`
/// again where a question reaches it (`link.rs`), before it becomes an `elicitation/create`
/// (2025-11-25) or an `input_required` result (2026-07-28).
pub fn sanitized_question(message: &str, mut form: Value) -> (String, Value) {
    sanitize_schema(&mut form);
    (sanitize(message, Lines::Keep).into_owned(), form)
}

/// The keywords a form property may use, by its type.
fn property_keywords(kind: &str) -> Option<&'static [&'static str]> {
    const COMMON: &[&str] = &["type", "title", "description", "default"];
    Some(match kind {
        "string" => &[
            "type",
            "title",
            "description",
            "default",
            "minLength",
            "maxLength",
            "format",
            "enum",
            "enumNames",
            "oneOf",
        ],
        "array" => crate::choices::ARRAY_KEYWORDS,
        "number" | "integer" => &[
            "type",
            "title",
            "description",
            "default",
            "minimum",
            "maximum",
        ],
        "boolean" => COMMON,
        _ => return None,
    })
}

/// Checks an elicitation form schema (MCP's restricted subset), naming the path at fault.
pub fn check_form(schema: &Value, at: &str) -> Result<(), String> {
    let Some(root) = schema.as_object() else {
        return Err(format!("at {at}: expected an object schema"));
    };
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!("at {at}.type: must be \"object\""));
    }
    for key in root.keys() {
        if !matches!(
            key.as_str(),
            "type" | "properties" | "required" | "title" | "description"
        ) {
            return Err(format!(
                "at {at}.{key}: not allowed in a form (type, properties, required, title, description)"
            ));
        }
    }
    let empty = Map::new();
    let properties = match root.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(format!("at {at}.properties: expected an object")),
    };
    for (name, prop) in properties {
        if !is_clean(name, Lines::Join) {
            return Err(format!(
                "at {at}.properties: the property name {name:?} has a control character"
            ));
        }
        check_property(prop, &format!("{at}.properties.{name}"))?;
    }
    match root.get("required") {
        None => Ok(()),
        Some(Value::Array(names)) => {
            for (i, n) in names.iter().enumerate() {
                match n.as_str() {
                    Some(n) if properties.contains_key(n) => {}
                    _ => {
                        return Err(format!(
                            "at {at}.required[{i}]: must name one of the properties"
                        ));
                    }
                }
            }
            Ok(())
        }
        Some(_) => Err(format!("at {at}.required: expected an array of names")),
    }
}

fn check_property(prop: &Value, at: &str) -> Result<(), String> {
    let Some(obj) = prop.as_object() else {
        return Err(format!("at {at}: expected an object"));
    };
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let Some(allowed) = property_keywords(kind) else {
        return Err(format!(
            "at {at}.type: must be \"string\", \"number\", \"integer\", \"boolean\" or \"array\""
        ));
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        let article = if kind.starts_with(['a', 'i']) {
            "an"
        } else {
            "a"
        };
        return Err(format!(
            "at {at}.{k}: not allowed for {article} {kind} property"
        ));
    }
    if kind == "array" {
        return crate::choices::check_multi(obj, at);
    }
    if obj.contains_key("oneOf") {
        if obj.contains_key("enum") {
            return Err(format!(
                "at {at}.oneOf: not with enum (one list of choices)"
            ));
        }
        crate::choices::titled(obj.get("oneOf"), &format!("{at}.oneOf"))?;
    }
    check_values(obj, at)
}

/// The strings the answer must match (the choices and the default) are shown as they are, so
/// one with a control character is refused.
fn check_values(prop: &Map<String, Value>, at: &str) -> Result<(), String> {
    let choices = prop.get("enum").and_then(Value::as_array);
    let choices = choices.into_iter().flatten().enumerate();
    let default = prop.get("default").map(|d| (format!("{at}.default"), d));
    let values = choices
        .map(|(i, v)| (format!("{at}.enum[{i}]"), v))
        .chain(default);
    for (path, value) in values {
        if let Some(text) = value.as_str()
            && !is_clean(text, Lines::Join)
        {
            return Err(format!(
                "at {path}: a control character, in a value the answer must match"
            ));
        }
    }
    Ok(())
}

/// What the user did with a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputAction {
    Accept,
    Decline,
    Cancel,
}

/// The answer the app gets: `{action, content?}` (`content` only with `accept`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputAnswer {
    pub action: InputAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

/// How a question ended on the sidecar: an answer, or a refusal with a documented code
/// (`input_unsupported` when the harness cannot ask its user).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InputOutcome {
    Answer(InputAnswer),
    Refused { error: crate::content::AppError },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn forms_are_flat_objects_of_primitives() {
        let ok = json!({"type": "object", "properties": {
            "ok": {"type": "boolean", "title": "Deploy?"},
            "env": {"type": "string", "enum": ["prod", "dev"]},
            "n": {"type": "integer", "minimum": 1}
        }, "required": ["ok"]});
        assert_eq!(check_form(&ok, "$.s"), Ok(()));
        let cases = [
            (json!([]), "at $.s: expected an object schema"),
            (json!({"type": "string"}), "at $.s.type: must be \"object\""),
            (
                json!({"type": "object", "properties": {"a": {"type": "object"}}}),
                "at $.s.properties.a.type: must be \"string\", \"number\", \"integer\", \"boolean\" or \"array\"",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "number", "enum": [1]}}}),
                "at $.s.properties.a.enum: not allowed for a number property",
            ),
            (
                json!({"type": "object", "properties": {}, "required": ["x"]}),
                "at $.s.required[0]: must name one of the properties",
            ),
            (
                json!({"type": "object", "properties": {"a\u{1b}": {"type": "boolean"}}}),
                "at $.s.properties: the property name \"a\\u{1b}\" has a control character",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y\u{7}"]}}}),
                "at $.s.properties.a.enum[1]: a control character, in a value the answer must match",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "default": "\u{9b}2J"}}}),
                "at $.s.properties.a.default: a control character, in a value the answer must match",
            ),
            (
                json!({"type": "object", "anyOf": []}),
                "at $.s.anyOf: not allowed in a form (type, properties, required, title, description)",
            ),
        ];
        for (schema, want) in cases {
            assert_eq!(check_form(&schema, "$.s"), Err(want.to_owned()), "{schema}");
        }
    }

    #[test]
    fn titled_and_multi_select_choices_are_checked_with_their_paths() {
        let ok = json!({"type": "object", "properties": {
            "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}], "default": "s"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1, "default": ["a"]},
            "envs": {"type": "array", "title": "Where", "items": {"anyOf": [{"const": "prod", "title": "Production"}]}, "maxItems": 1}
        }});
        assert_eq!(check_form(&ok, "$.s"), Ok(()));
        let form = |prop: Value| json!({"type": "object", "properties": {"p": prop}});
        let cases = [
            (
                json!({"type": "string", "oneOf": []}),
                "at $.s.properties.p.oneOf: expected a non-empty array of {const, title}",
            ),
            (
                json!({"type": "string", "oneOf": [{"const": "a"}]}),
                "at $.s.properties.p.oneOf[0].title: expected a string",
            ),
            (
                json!({"type": "string", "oneOf": [{"const": 1, "title": "x"}]}),
                "at $.s.properties.p.oneOf[0].const: expected a string",
            ),
            (
                json!({"type": "string", "enum": ["a"], "oneOf": [{"const": "a", "title": "A"}]}),
                "at $.s.properties.p.oneOf: not with enum (one list of choices)",
            ),
            (
                json!({"type": "array"}),
                "at $.s.properties.p.items: required, an object",
            ),
            (
                json!({"type": "array", "items": {"type": "number", "enum": ["a"]}}),
                "at $.s.properties.p.items.type: must be \"string\"",
            ),
            (
                json!({"type": "array", "items": {"anyOf": [{"const": "a\u{7}", "title": "A"}]}}),
                "at $.s.properties.p.items.anyOf[0].const: a control character, in a value the answer must match",
            ),
            (
                json!({"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": ["z"]}),
                "at $.s.properties.p.default[0]: not one of the choices",
            ),
            (
                json!({"type": "array", "items": {"type": "string", "enum": ["a"]}, "minItems": -1}),
                "at $.s.properties.p.minItems: expected an integer of at least 0",
            ),
            (
                json!({"type": "array", "items": {"type": "string", "enum": ["a"]}, "uniqueItems": true}),
                "at $.s.properties.p.uniqueItems: not allowed for an array property",
            ),
        ];
        for (prop, want) in cases {
            assert_eq!(
                check_form(&form(prop.clone()), "$.s"),
                Err(want.to_owned()),
                "{prop}"
            );
        }
    }

    #[test]
    fn a_question_is_shown_with_its_words_sanitized_and_its_values_kept() {
        let form = json!({"type": "object", "title": "T\u{1b}]0;x\u{7}", "properties": {
            "env": {"type": "string", "title": "E\u{8}", "description": "one\r\ntwo\u{0}",
                    "enum": ["prod", "dev"], "enumNames": ["P\u{1b}[2J", "D\u{7f}"],
                    "default": "prod"}
        }});
        assert_eq!(check_form(&form, "$.s"), Ok(()));
        let (message, form) = sanitized_question("Sure?\u{9b}1m\n", form);
        assert_eq!(message, "Sure?\u{fffd}1m\n");
        assert_eq!(
            form,
            json!({"type": "object", "title": "T\u{fffd}]0;x\u{fffd}", "properties": {
                "env": {"type": "string", "title": "E\u{fffd}", "description": "one\ntwo\u{fffd}",
                        "enum": ["prod", "dev"], "enumNames": ["P\u{fffd}[2J", "D\u{fffd}"],
                        "default": "prod"}
            }})
        );
    }

    #[test]
    fn progress_numbers_are_checked() {
        let body = |p: f64, t: Option<f64>| ProgressBody {
            client_id: "c".into(),
            progress: p,
            total: t,
            message: None,
        };
        assert!(body(1.0, Some(3.0)).check().is_ok());
        assert!(
            body(-1.0, None)
                .check()
                .unwrap_err()
                .starts_with("at $.progress")
        );
        assert!(
            body(1.0, Some(-2.0))
                .check()
                .unwrap_err()
                .starts_with("at $.total")
        );
    }
}
