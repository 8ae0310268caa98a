//! The choice lists of a question's form (MCP 2025-11-25): a titled single select
//! (`oneOf: [{const, title}]` on a string) and multi selects (`type: "array"` with
//! `items: {type: "string", enum}` or `items: {anyOf: [{const, title}]}`).
//!
//! The values (`const`, the `enum` of items, a `default`) are what the answer carries back, so
//! one with a control character is refused rather than rewritten; the titles are words, which
//! the one sanitizer cleans with the rest of the form.

use serde_json::{Map, Value};

use crate::sanitize::{Lines, is_clean};

/// The keywords of a multi-select property.
pub const ARRAY_KEYWORDS: &[&str] = &[
    "type",
    "title",
    "description",
    "default",
    "minItems",
    "maxItems",
    "items",
];

/// Checks a list of `{const, title}` choices at `at`, returning the values.
pub fn titled(list: Option<&Value>, at: &str) -> Result<Vec<String>, String> {
    let Some(list) = list.and_then(Value::as_array).filter(|l| !l.is_empty()) else {
        return Err(format!(
            "at {at}: expected a non-empty array of {{const, title}}"
        ));
    };
    let mut values = Vec::with_capacity(list.len());
    for (i, choice) in list.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let Some(obj) = choice.as_object() else {
            return Err(format!("at {at}: expected {{const, title}}"));
        };
        if let Some(k) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "const" | "title"))
        {
            return Err(format!(
                "at {at}.{k}: not allowed in a choice (const, title)"
            ));
        }
        if !obj.get("title").is_some_and(Value::is_string) {
            return Err(format!("at {at}.title: expected a string"));
        }
        values.push(value(obj.get("const"), &format!("{at}.const"))?);
    }
    Ok(values)
}

/// Checks a multi-select property (its keywords already allowed): `items`, the counts and
/// the default.
pub fn check_multi(prop: &Map<String, Value>, at: &str) -> Result<(), String> {
    let Some(items) = prop.get("items").and_then(Value::as_object) else {
        return Err(format!("at {at}.items: required, an object"));
    };
    let items_at = format!("{at}.items");
    let choices = match (items.get("enum"), items.get("anyOf")) {
        (Some(list), None) => {
            if items.get("type").and_then(Value::as_str) != Some("string") {
                return Err(format!("at {items_at}.type: must be \"string\""));
            }
            plain(list, &format!("{items_at}.enum"))?
        }
        (None, Some(list)) => titled(Some(list), &format!("{items_at}.anyOf"))?,
        _ => {
            return Err(format!(
                "at {items_at}: one of enum (with type \"string\") or anyOf"
            ));
        }
    };
    if let Some(k) = items
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "enum" | "anyOf"))
    {
        return Err(format!(
            "at {items_at}.{k}: not allowed (type, enum, anyOf)"
        ));
    }
    for key in ["minItems", "maxItems"] {
        if let Some(n) = prop.get(key)
            && n.as_u64().is_none()
        {
            return Err(format!("at {at}.{key}: expected an integer of at least 0"));
        }
    }
    match prop.get("default") {
        None => Ok(()),
        Some(Value::Array(picked)) => {
            for (i, p) in picked.iter().enumerate() {
                let v = value(Some(p), &format!("{at}.default[{i}]"))?;
                if !choices.contains(&v) {
                    return Err(format!("at {at}.default[{i}]: not one of the choices"));
                }
            }
            Ok(())
        }
        Some(_) => Err(format!("at {at}.default: expected an array of choices")),
    }
}

/// Checks a plain list of string choices.
fn plain(list: &Value, at: &str) -> Result<Vec<String>, String> {
    let Some(list) = list.as_array().filter(|l| !l.is_empty()) else {
        return Err(format!("at {at}: expected a non-empty array of strings"));
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| value(Some(v), &format!("{at}[{i}]")))
        .collect()
}

/// A value the answer must match: a string without a control character.
fn value(v: Option<&Value>, at: &str) -> Result<String, String> {
    match v.and_then(Value::as_str) {
        Some(s) if is_clean(s, Lines::Join) => Ok(s.to_owned()),
        Some(_) => Err(format!(
            "at {at}: a control character, in a value the answer must match"
        )),
        None => Err(format!("at {at}: expected a string")),
    }
}
