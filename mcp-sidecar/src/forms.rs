//! A question's form for a harness of an older MCP revision.
//!
//! MCP 2025-11-25 added titled choices (`oneOf: [{const, title}]` on a string) and multi
//! selects (`type: "array"`). A harness that negotiated an older revision reads neither, so a
//! titled single select goes to it as the older spelling of the same thing (`enum` with
//! `enumNames`), and a multi select, which an older form cannot express, is refused with its
//! path (`input_unsupported`, so the app falls back as for a harness that cannot ask at all).

use rmcp::model::ProtocolVersion;
use serde_json::Value;

/// `form` as a harness speaking `version` reads it, or why it cannot be asked there.
pub fn for_revision(mut form: Value, version: Option<&ProtocolVersion>) -> Result<Value, String> {
    let older = version.is_some_and(|v| *v < ProtocolVersion::V_2025_11_25);
    if !older {
        return Ok(form);
    }
    let said = version.map(ToString::to_string).unwrap_or_default();
    let properties = form.get_mut("properties").and_then(Value::as_object_mut);
    for (name, prop) in properties.into_iter().flatten() {
        if prop.get("type").and_then(Value::as_str) == Some("array") {
            return Err(format!(
                "at $.requested_schema.properties.{name}: a multi select needs a harness of \
                 MCP 2025-11-25 or later (this one speaks {said})"
            ));
        }
        let Some(choices) = prop.as_object_mut().and_then(|p| p.remove("oneOf")) else {
            continue;
        };
        let list = choices.as_array().cloned().unwrap_or_default();
        prop["enum"] = list.iter().map(|c| c["const"].clone()).collect();
        prop["enumNames"] = list.iter().map(|c| c["title"].clone()).collect();
    }
    Ok(form)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form() -> Value {
        json!({"type": "object", "properties": {
            "size": {"type": "string", "title": "Size", "oneOf": [
                {"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}], "default": "s"},
            "ok": {"type": "boolean"}
        }})
    }

    #[test]
    fn a_titled_single_select_is_spelled_the_older_way_for_an_older_harness() {
        let old = ProtocolVersion::V_2025_06_18;
        assert_eq!(
            for_revision(form(), Some(&old)).unwrap(),
            json!({"type": "object", "properties": {
                "size": {"type": "string", "title": "Size", "enum": ["s", "l"],
                         "enumNames": ["Small", "Large"], "default": "s"},
                "ok": {"type": "boolean"}
            }})
        );
        let new = ProtocolVersion::V_2025_11_25;
        assert_eq!(for_revision(form(), Some(&new)).unwrap(), form());
    }

    #[test]
    fn a_multi_select_is_refused_for_an_older_harness_with_its_path() {
        let mut f = form();
        f["properties"]["tags"] =
            json!({"type": "array", "items": {"type": "string", "enum": ["a"]}});
        let old = ProtocolVersion::V_2025_06_18;
        let refused = for_revision(f.clone(), Some(&old)).unwrap_err();
        assert!(
            refused.starts_with("at $.requested_schema.properties.tags: a multi select needs")
                && refused.ends_with("(this one speaks 2025-06-18)"),
            "{refused}"
        );
        assert!(for_revision(f, Some(&ProtocolVersion::V_2025_11_25)).is_ok());
    }
}
