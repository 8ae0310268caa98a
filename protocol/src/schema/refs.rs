//! Inlining of local `$ref`s in an input_schema.
//!
//! JSON Schema 2020-12, MCP's default dialect, lets a schema name its parts once under `$defs`
//! (or the older `definitions`) and point at them with `$ref`. Harnesses differ in whether they
//! follow refs at all, so an app may register such a schema but no harness ever sees one: each
//! `$ref` is replaced by the schema it points at before the definition is stored, listed or
//! digested. The root's `$defs`/`definitions` are kept, each definition itself inlined, since
//! MCP clients that read 2020-12 expect them listed as registered; with no `$ref` left anywhere
//! they are inert, and a harness that ignores them loses nothing.
//!
//! Only local refs are accepted: `#/$defs/Name` or `#/definitions/Name` (a JSON pointer, with
//! `~0`/`~1` and percent escapes), possibly pointing further inside a definition. A ref to
//! anything else (another document, the root `#`, an anchor) is refused, and so is a cycle. A
//! `$ref` with sibling keywords becomes those keywords plus an `allOf` entry holding the target,
//! which is what 2020-12 means by it. The expansion stops as soon as it makes more than
//! [`MAX_SCHEMAS`] schemas or nests deeper than [`MAX_SCHEMA_DEPTH`], so a schema whose refs
//! multiply (each definition using the previous one twice) is refused without being built; the
//! caller then checks the byte size of the result. The kept definitions count toward both
//! limits, as they are part of what a harness receives.

use serde_json::{Map, Value};

use super::{MAX_SCHEMA_DEPTH, MAX_SCHEMAS, SchemaError, error, json_string, keyword_path};

/// The keywords under which the root names its definitions.
const DEFINITIONS: [&str; 2] = ["$defs", "definitions"];

/// Returns `root` with every local `$ref` replaced by its target, the root's `$defs` and
/// `definitions` included (each definition inlined in turn). `root` has passed the subset
/// check with refs allowed.
pub(super) fn inline(root: &Value) -> Result<Value, SchemaError> {
    let mut inliner = Inliner {
        root,
        schemas: 0,
        stack: Vec::new(),
    };
    let mut inlined = inliner.schema(root, "$", 1)?;
    // The definitions come after the rest, so that an error a ref in the properties meets is
    // reported where that ref is used.
    for key in DEFINITIONS {
        if let (Some(Value::Object(defs)), Value::Object(out)) = (root.get(key), &mut inlined) {
            let defs = inliner.definitions(key, defs)?;
            out.insert(key.to_owned(), Value::Object(defs));
        }
    }
    Ok(inlined)
}

/// One expansion: the document refs point into, and the budget spent so far.
struct Inliner<'a> {
    /// The registered schema, which refs are resolved against.
    root: &'a Value,
    /// How many schemas the expansion has made.
    schemas: usize,
    /// The refs being expanded, outermost first, to find cycles.
    stack: Vec<String>,
}

impl Inliner<'_> {
    /// Inlines each definition under the root's keyword `key`, with its own pointer on the
    /// stack so that a definition that uses itself is reported as a cycle at its first `$ref`.
    fn definitions(
        &mut self,
        key: &str,
        defs: &Map<String, Value>,
    ) -> Result<Map<String, Value>, SchemaError> {
        let mut out = Map::new();
        for (name, def) in defs {
            let path = super::property_path(&keyword_path("$", key), name);
            self.stack.push(format!("/{key}/{}", escape_pointer(name)));
            let inlined = self.schema(def, &path, 2);
            self.stack.pop();
            out.insert(name.clone(), inlined?);
        }
        Ok(out)
    }

    /// Expands the schema `value` found at `path`, to be placed at depth `depth`.
    fn schema(&mut self, value: &Value, path: &str, depth: usize) -> Result<Value, SchemaError> {
        if depth > MAX_SCHEMA_DEPTH + 1 {
            return Err(error(
                path,
                format!(
                    "schema nested deeper than {MAX_SCHEMA_DEPTH} levels once refs are inlined"
                ),
            ));
        }
        self.schemas += 1;
        if self.schemas > MAX_SCHEMAS {
            return Err(error(
                path,
                format!("more than {MAX_SCHEMAS} schemas once refs are inlined"),
            ));
        }
        let Some(object) = value.as_object() else {
            return Ok(value.clone());
        };
        let mut out = Map::new();
        for (key, value) in object {
            if depth == 1 && DEFINITIONS.contains(&key.as_str()) || key == "$ref" {
                continue;
            }
            let at = keyword_path(path, key);
            out.insert(key.clone(), self.keyword(key, value, &at, depth)?);
        }
        let Some(reference) = object.get("$ref").and_then(Value::as_str) else {
            return Ok(Value::Object(out));
        };
        let at = keyword_path(path, "$ref");
        if out.is_empty() {
            return self.reference(reference, &at, depth);
        }
        let target = self.reference(reference, &at, depth + 1)?;
        match out.get_mut("allOf") {
            Some(Value::Array(entries)) => entries.push(target),
            _ => {
                out.insert("allOf".into(), Value::Array(vec![target]));
            }
        }
        Ok(Value::Object(out))
    }

    /// Expands the value of the keyword `key` found at `path` in a schema at depth `depth`:
    /// the keywords that hold schemas are descended into, the others (data included) copied.
    fn keyword(
        &mut self,
        key: &str,
        value: &Value,
        path: &str,
        depth: usize,
    ) -> Result<Value, SchemaError> {
        match (key, value) {
            ("properties", Value::Object(properties)) => {
                let mut out = Map::new();
                for (name, property) in properties {
                    let at = super::property_path(path, name);
                    out.insert(name.clone(), self.schema(property, &at, depth + 1)?);
                }
                Ok(Value::Object(out))
            }
            ("items" | "additionalProperties", Value::Object(_)) => {
                self.schema(value, path, depth + 1)
            }
            ("anyOf" | "oneOf" | "allOf", Value::Array(entries)) => entries
                .iter()
                .enumerate()
                .map(|(i, entry)| self.schema(entry, &format!("{path}[{i}]"), depth + 1))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            _ => Ok(value.clone()),
        }
    }

    /// Expands the target of the ref `reference`, found at `path`, to be placed at `depth`.
    fn reference(
        &mut self,
        reference: &str,
        path: &str,
        depth: usize,
    ) -> Result<Value, SchemaError> {
        let pointer = local_pointer(reference).map_err(|message| error(path, message))?;
        if self.stack.contains(&pointer) {
            return Err(error(
                path,
                format!("$ref {} is a cycle", json_string(reference)),
            ));
        }
        let Some(target) = self.root.pointer(&pointer) else {
            return Err(error(
                path,
                format!("$ref {} names no definition", json_string(reference)),
            ));
        };
        self.stack.push(pointer);
        let expanded = self.schema(target, path, depth);
        self.stack.pop();
        expanded
    }
}

/// The JSON pointer of a local ref into `$defs` or `definitions`, percent escapes decoded, or
/// why the ref is refused.
fn local_pointer(reference: &str) -> Result<String, String> {
    let shown = json_string(reference);
    let Some(fragment) = reference.strip_prefix('#') else {
        return Err(format!(
            "$ref {shown} is not local; only refs like \"#/$defs/Name\" are supported"
        ));
    };
    if fragment.is_empty() {
        return Err(format!("$ref {shown} points at the whole schema, a cycle"));
    }
    let pointer = percent_decode(fragment)
        .ok_or_else(|| format!("$ref {shown} has a malformed percent escape"))?;
    let into_defs = ["/$defs/", "/definitions/"]
        .iter()
        .any(|prefix| pointer.len() > prefix.len() && pointer.starts_with(prefix));
    if !into_defs {
        return Err(format!(
            "$ref {shown} must point into \"#/$defs/\" or \"#/definitions/\""
        ));
    }
    Ok(pointer)
}

/// Escapes `name` as one JSON pointer token (`~` as `~0`, `/` as `~1`).
fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Decodes `%XX` escapes; `None` when one is malformed or the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
