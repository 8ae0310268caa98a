//! The input_schema subset check.
//!
//! An app registers tools whose `input_schema` is forwarded unchanged to the harness of every AI
//! agent that may call the tool. Harnesses and model providers each accept a different, often
//! undocumented, slice of JSON Schema, so a schema that one of them rejects would break the tool
//! for some agents and not others. This module therefore validates the whole schema, at
//! registration time, against a strict keyword subset that every harness is known to accept, and
//! reports the first offending spot with its JSON path (for example
//! `at $.properties.ref.type: unknown type "bogus"`), which the broker turns into `invalid_tool`.
//! The byte size of the schema is not checked here; the caller does that before calling
//! [`check_input_schema`].
//!
//! # The subset
//!
//! A schema is a JSON object that uses only these keywords:
//!
//! - `type`: a primitive type name (`null`, `boolean`, `object`, `array`, `number`, `string`,
//!   `integer`) or a non-empty array of distinct type names.
//! - `properties`: an object whose every value is a schema.
//! - `required`: an array of distinct strings.
//! - `items`: a single schema.
//! - `additionalProperties`: a boolean or a schema.
//! - `anyOf`, `oneOf`, `allOf`: a non-empty array of schemas.
//! - `enum`: a non-empty array of any JSON values.
//! - `const`, `default`: any JSON value; `examples`: an array of any JSON values.
//! - `description`, `title`, `format`, `pattern`, `$schema`, `$comment`: strings.
//! - `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`: numbers; `multipleOf`: a
//!   number greater than 0.
//! - `minLength`, `maxLength`, `minItems`, `maxItems`, `minProperties`, `maxProperties`:
//!   non-negative integers.
//! - `uniqueItems`, `deprecated`, `readOnly`, `writeOnly`: booleans.
//!
//! Every nested schema (the values of `properties`, `items`, `additionalProperties` when it is
//! an object, and the entries of `anyOf`, `oneOf` and `allOf`) is checked the same way, down to
//! [`MAX_SCHEMA_DEPTH`] levels and up to [`MAX_SCHEMAS`] schemas in all.
//!
//! # Decisions on edge cases
//!
//! Each edge case is decided the strict way, so that nothing a harness might misread gets
//! through:
//!
//! - The root must be a JSON object whose `type` is exactly the string `"object"`. A missing
//!   root `type` is reported at `$`, and any other value (including `["object"]`) at `$.type`,
//!   both with the message `root schema must have "type": "object"`. Nested schemas may omit
//!   `type`.
//! - A boolean schema (`true` or `false`) is accepted only as the value of
//!   `additionalProperties`; anywhere else a nested schema must be a JSON object.
//! - An array as `items` (tuple items) is rejected with `tuple items are not supported`.
//! - A type list must be non-empty and must not repeat a type; `required` must not repeat a
//!   name. The duplicate is reported at its own index, such as `$.required[1]`.
//! - The integer keywords accept only JSON numbers that serde_json reads as non-negative
//!   integers, so `1.0`, `1e2`, `1.5` and `-1` are all rejected.
//! - `multipleOf` must be a number strictly greater than 0.
//! - `pattern` and `format` accept any string: the pattern is not compiled and the format is
//!   not checked against a list of known formats, because harnesses treat both as hints.
//! - The values of `enum`, `const`, `default` and `examples` are data, not schemas, so they are
//!   never descended into; duplicates inside `enum` are accepted because they do not change
//!   its meaning.
//! - Consistency between keywords is not checked: `required` may name a property that
//!   `properties` does not list, and `minimum` may exceed `maximum`. Such schemas are valid JSON
//!   Schema that no value satisfies, and every harness accepts them.
//! - Any other keyword (`patternProperties`, `not`, `if`, `nullable`, `$id`, ...) is rejected
//!   with `unknown keyword "…"` at the path of that keyword. `$ref`, and `$defs` or
//!   `definitions` at the root, are accepted only by [`inline_input_schema`], which registration
//!   uses: it checks them, inlines every ref (module `refs`), and checks the result against the
//!   strict subset but for the root's `$defs`/`definitions`, which stay with each definition
//!   inlined, so what a harness receives never holds a ref.
//! - The root is depth 1. A schema at depth 17 is reported at its own path with `schema nested
//!   deeper than 16 levels`, before its content is looked at, so recursion never goes deeper
//!   than one level past the limit. Schemas are counted in the order they are checked, and the
//!   513th is reported at its own path with `more than 512 schemas`. A boolean
//!   `additionalProperties` is not counted as a schema.
//! - Keys are checked in the order serde_json's map yields them (sorted, unless the
//!   `preserve_order` feature is on), depth first, so the first error reported is stable.
//!
//! # Paths
//!
//! Paths start at `$`. Array entries are appended as `[index]`. A keyword is appended as `.key`
//! when it consists only of `[A-Za-z0-9_$]` characters (so `$.properties.a.$ref`); a property
//! name is appended as `.name` when it consists only of `[A-Za-z0-9_]` characters. Any other
//! key, including the empty one, is appended in bracket form with JSON string escaping, such as
//! `$.properties["a b"]`.

mod refs;

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::Value;

/// Largest nesting depth of schemas (the root is depth 1).
pub const MAX_SCHEMA_DEPTH: usize = 16;
/// Largest number of schemas (the root and every nested one) in one input_schema.
pub const MAX_SCHEMAS: usize = 512;

/// The first place where an input_schema leaves the subset, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {message}")]
pub struct SchemaError {
    /// The JSON path of the offending schema, keyword or value, starting at `$`.
    pub path: String,
    /// What is wrong there, in lower case and without a trailing period.
    pub message: String,
}

/// The primitive type names that `type` accepts.
const TYPE_NAMES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];

/// The message for a root schema that is not an object schema.
const ROOT_TYPE_MESSAGE: &str = "root schema must have \"type\": \"object\"";

/// Checks `schema` against the subset. Does NOT check the byte size (caller does).
pub fn check_input_schema(schema: &Value) -> Result<(), SchemaError> {
    check(schema, false, false)
}

/// Checks `schema` against the subset as an app may register it, with local refs: `$defs` (or
/// `definitions`) at the root and `$ref` strings anywhere a schema may be; then returns the
/// schema with every ref inlined (see [`refs`]), which is checked against the strict subset
/// but for the root's `$defs`/`definitions`, kept with each definition inlined.
/// Does NOT check the byte size of either form (caller does).
pub fn inline_input_schema(schema: &Value) -> Result<Value, SchemaError> {
    check(schema, true, true)?;
    let inlined = refs::inline(schema)?;
    check(&inlined, false, true)?;
    Ok(inlined)
}

/// Checks `schema` against the subset, with `$ref` accepted when `refs` says so and the
/// root's `$defs`/`definitions` when `defs` does.
fn check(schema: &Value, refs: bool, defs: bool) -> Result<(), SchemaError> {
    check_root(schema)?;
    Checker {
        schemas: 0,
        refs,
        defs,
    }
    .schema(schema, "$", 1)
}

/// The root must be an object schema whose `type` is exactly `"object"`.
fn check_root(schema: &Value) -> Result<(), SchemaError> {
    let Some(root) = schema.as_object() else {
        return Err(error("$", "root schema must be a JSON object"));
    };
    match root.get("type") {
        None => Err(error("$", ROOT_TYPE_MESSAGE)),
        Some(Value::String(name)) if name == "object" => Ok(()),
        Some(_) => Err(error("$.type", ROOT_TYPE_MESSAGE)),
    }
}

/// Walks one input_schema and counts the schemas met so far.
struct Checker {
    /// How many schemas have been entered, the one being checked included.
    schemas: usize,
    /// Whether `$ref` is accepted.
    refs: bool,
    /// Whether `$defs`/`definitions` are accepted at the root.
    defs: bool,
}

impl Checker {
    /// Checks the schema `value` found at `path`, which sits at nesting depth `depth`.
    fn schema(&mut self, value: &Value, path: &str, depth: usize) -> Result<(), SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(error(
                path,
                format!("schema nested deeper than {MAX_SCHEMA_DEPTH} levels"),
            ));
        }
        self.schemas += 1;
        if self.schemas > MAX_SCHEMAS {
            return Err(error(path, format!("more than {MAX_SCHEMAS} schemas")));
        }
        let Some(object) = value.as_object() else {
            return Err(error(path, "expected a schema object"));
        };
        for (key, value) in object {
            let path = keyword_path(path, key);
            self.keyword(key, value, &path, depth)?;
        }
        Ok(())
    }

    /// Checks the value of the keyword `key`, found at `path` in a schema at depth `depth`.
    fn keyword(
        &mut self,
        key: &str,
        value: &Value,
        path: &str,
        depth: usize,
    ) -> Result<(), SchemaError> {
        match key {
            "type" => check_type(value, path),
            "properties" => {
                let Some(properties) = value.as_object() else {
                    return Err(error(path, "expected an object"));
                };
                for (name, property) in properties {
                    self.schema(property, &property_path(path, name), depth + 1)?;
                }
                Ok(())
            }
            "required" => check_required(value, path),
            "items" => match value {
                Value::Array(_) => Err(error(path, "tuple items are not supported")),
                _ => self.schema(value, path, depth + 1),
            },
            "additionalProperties" => match value {
                Value::Bool(_) => Ok(()),
                Value::Object(_) => self.schema(value, path, depth + 1),
                _ => Err(error(path, "expected a boolean or a schema object")),
            },
            "anyOf" | "oneOf" | "allOf" => match value {
                Value::Array(entries) if !entries.is_empty() => {
                    for (index, entry) in entries.iter().enumerate() {
                        self.schema(entry, &format!("{path}[{index}]"), depth + 1)?;
                    }
                    Ok(())
                }
                _ => Err(error(path, "expected a non-empty array of schemas")),
            },
            "enum" => match value {
                Value::Array(values) if !values.is_empty() => Ok(()),
                _ => Err(error(path, "expected a non-empty array")),
            },
            "const" | "default" => Ok(()),
            "examples" => match value {
                Value::Array(_) => Ok(()),
                _ => Err(error(path, "expected an array")),
            },
            "description" | "title" | "format" | "pattern" | "$schema" | "$comment" => {
                match value {
                    Value::String(_) => Ok(()),
                    _ => Err(error(path, "expected a string")),
                }
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => match value {
                Value::Number(_) => Ok(()),
                _ => Err(error(path, "expected a number")),
            },
            "multipleOf" => match value.as_f64() {
                None => Err(error(path, "expected a number")),
                Some(divisor) if divisor > 0.0 => Ok(()),
                Some(_) => Err(error(path, "expected a number greater than 0")),
            },
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties"
            | "maxProperties" => match value {
                Value::Number(number) if number.is_u64() => Ok(()),
                _ => Err(error(path, "expected a non-negative integer")),
            },
            "uniqueItems" | "deprecated" | "readOnly" | "writeOnly" => match value {
                Value::Bool(_) => Ok(()),
                _ => Err(error(path, "expected a boolean")),
            },
            "$ref" if self.refs => match value {
                Value::String(_) => Ok(()),
                _ => Err(error(path, "expected a string")),
            },
            "$defs" | "definitions" if self.defs && depth == 1 => {
                let Some(defs) = value.as_object() else {
                    return Err(error(path, "expected an object"));
                };
                for (name, def) in defs {
                    self.schema(def, &property_path(path, name), depth + 1)?;
                }
                Ok(())
            }
            _ => Err(error(path, format!("unknown keyword {}", json_string(key)))),
        }
    }
}

/// Checks the value of a `type` keyword found at `path`.
fn check_type(value: &Value, path: &str) -> Result<(), SchemaError> {
    match value {
        Value::String(name) => check_type_name(name, path),
        Value::Array(names) if !names.is_empty() => {
            let mut seen = HashSet::new();
            for (index, name) in names.iter().enumerate() {
                let path = format!("{path}[{index}]");
                let Value::String(name) = name else {
                    return Err(error(&path, "expected a string"));
                };
                check_type_name(name, &path)?;
                if !seen.insert(name.as_str()) {
                    return Err(error(
                        &path,
                        format!("duplicate type {}", json_string(name)),
                    ));
                }
            }
            Ok(())
        }
        _ => Err(error(
            path,
            "expected a type name or a non-empty array of type names",
        )),
    }
}

/// Checks that `name`, found at `path`, is one of the primitive type names.
fn check_type_name(name: &str, path: &str) -> Result<(), SchemaError> {
    if TYPE_NAMES.contains(&name) {
        Ok(())
    } else {
        Err(error(path, format!("unknown type {}", json_string(name))))
    }
}

/// Checks the value of a `required` keyword found at `path`.
fn check_required(value: &Value, path: &str) -> Result<(), SchemaError> {
    let Value::Array(names) = value else {
        return Err(error(path, "expected an array of strings"));
    };
    let mut seen = HashSet::new();
    for (index, name) in names.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let Value::String(name) = name else {
            return Err(error(&path, "expected a string"));
        };
        if !seen.insert(name.as_str()) {
            return Err(error(
                &path,
                format!("duplicate property name {}", json_string(name)),
            ));
        }
    }
    Ok(())
}

/// Builds a [`SchemaError`] at `path`.
fn error(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Appends the keyword `key` to `path`, in dot form when it is made of `[A-Za-z0-9_$]`.
fn keyword_path(path: &str, key: &str) -> String {
    append_key(path, key, |c| {
        c.is_ascii_alphanumeric() || c == '_' || c == '$'
    })
}

/// Appends the property name `name` to `path`, in dot form when it is made of `[A-Za-z0-9_]`.
fn property_path(path: &str, name: &str) -> String {
    append_key(path, name, |c| c.is_ascii_alphanumeric() || c == '_')
}

/// Appends `key` to `path` as `.key` when every character passes `plain`, else as `["key"]`.
fn append_key(path: &str, key: &str, plain: impl Fn(char) -> bool) -> String {
    if !key.is_empty() && key.chars().all(plain) {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", json_string(key))
    }
}

/// Writes `text` as a JSON string literal, quotes included, escaping as serde_json does.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if c < ' ' => {
                // Writing to a String cannot fail, so the result carries no information.
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
