//! What `leo serve-tool` serves: tools and their commands, from flags or from a tools file,
//! checked before anything connects.
//!
//! Flags and the file take the same fields. Each is checked with the broker's own rules
//! (`ToolDef::check`), the schema is read and parsed, and the program is found in `PATH` now,
//! so a typo is an error at start, naming the flag or the key path, not a failure at the first
//! call.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use leo_protocol::tool::{ToolDef, is_valid_group_name};
use serde::Deserialize;
use serde_json::{Value, json};

/// How a command's stdout becomes the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ContentKind {
    /// One text block with the whole of stdout.
    #[default]
    Text,
    /// stdout is MCP content: an array of blocks, or one block.
    Json,
}

/// One tool, and the command that answers its calls.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub def: ToolDef,
    pub group: String,
    /// The program, resolved in `PATH`.
    pub program: PathBuf,
    pub args: Vec<String>,
    pub content: ContentKind,
}

/// The fields of one tool, as flags or a file entry give them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fields {
    pub name: String,
    pub description: String,
    /// A schema object, or the name of a JSON file holding one.
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub timeout: Option<u64>,
    #[serde(default)]
    pub group: Option<String>,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub content: ContentKind,
}

/// A tools file: `tools: [ {name, description, schema?, timeout?, group?, command, args?,
/// content?}, … ]`, in YAML or JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsFile {
    tools: Vec<Fields>,
}

/// The tool of `--name … -- COMMAND ARGS…`. `schema` is the `--schema` text: a JSON object, or
/// the name of a file holding one.
pub fn from_flags(mut fields: Fields, schema: Option<&str>) -> Result<ToolSpec, String> {
    fields.schema = match schema {
        None => None,
        Some(text) => Some(schema_from_flag(text)?),
    };
    // Said against the flag that gave it, as the other flags' errors are below.
    if let Some(schema) = &fields.schema {
        leo_protocol::schema::inline_input_schema(schema).map_err(|e| format!("--schema: {e}"))?;
    }
    // The command is what follows `--`, not a field: say so rather than `$.command`.
    let program =
        find_program(&fields.command).map_err(|e| format!("the command after -- is wrong: {e}"))?;
    build(fields, "$", Path::new("."))
        .map(|spec| ToolSpec { program, ..spec })
        .map_err(|e| format!("invalid tool {e}"))
}

/// Every tool of a tools file.
pub fn from_file(path: &Path) -> Result<Vec<ToolSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: ToolsFile =
        leo_broker::config::parse_yaml(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if file.tools.is_empty() {
        return Err(format!("{}: tools: the list is empty", path.display()));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut names = HashSet::new();
    let mut specs = Vec::new();
    for (i, fields) in file.tools.into_iter().enumerate() {
        let at = format!("tools[{i}]");
        let spec = build(fields, &at, dir).map_err(|e| format!("{}: {e}", path.display()))?;
        if !names.insert(spec.def.name.to_ascii_lowercase()) {
            return Err(format!(
                "{}: at {at}.name: tool {:?} is given twice",
                path.display(),
                spec.def.name
            ));
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// `--schema`: JSON text if it parses, else a file.
fn schema_from_flag(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => Ok(value),
        Err(e) if text.trim_start().starts_with('{') => Err(format!("--schema: invalid JSON: {e}")),
        Err(_) => read_schema_file(Path::new(text)).map_err(|e| format!("--schema {e}")),
    }
}

fn read_schema_file(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: invalid JSON: {e}", path.display()))
}

/// Checks one tool; `at` is its JSON path, `dir` where relative schema files are.
fn build(fields: Fields, at: &str, dir: &Path) -> Result<ToolSpec, String> {
    let input_schema = match fields.schema {
        None => json!({"type": "object"}),
        Some(Value::String(file)) => {
            read_schema_file(&dir.join(file)).map_err(|e| format!("at {at}.schema: {e}"))?
        }
        Some(schema @ Value::Object(_)) => schema,
        Some(_) => {
            return Err(format!(
                "at {at}.schema: expected a schema object or the name of a JSON file"
            ));
        }
    };
    let mut def = ToolDef {
        name: fields.name,
        description: fields.description,
        input_schema,
        timeout_s: fields.timeout,
        label: None,
        ..ToolDef::default()
    };
    def.check(at).map_err(|e| e.message)?;
    let group = fields.group.unwrap_or_else(|| def.name.clone());
    if !is_valid_group_name(&group) {
        return Err(format!(
            "at {at}.group: group name {group:?} must be 1 to 64 of [A-Za-z0-9_.-]"
        ));
    }
    let program = find_program(&fields.command).map_err(|e| format!("at {at}.command: {e}"))?;
    Ok(ToolSpec {
        def,
        group,
        program,
        args: fields.args,
        content: fields.content,
    })
}

/// The program as `execvp` would find it: a path if it has a `/`, else the first executable
/// file of that name in `PATH`. The error says what is wrong with it, without saying where it
/// was given (the caller does).
fn find_program(command: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    if command.is_empty() {
        return Err("the command is empty".into());
    }
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let path = PathBuf::from(command);
        return match std::fs::metadata(&path) {
            Err(_) => Err(format!("{command:?} not found")),
            Ok(m) if m.is_dir() => Err(format!("{command:?} is a directory, not a program")),
            Ok(_) if !runnable(&path) => Err(format!(
                "{command:?} is not executable (make it so with: chmod +x {command})"
            )),
            Ok(_) => Ok(path),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| runnable(p))
        .ok_or_else(|| format!("program {command:?} not found in PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(name: &str, command: &str) -> Fields {
        Fields {
            name: name.into(),
            description: "A tool".into(),
            command: command.into(),
            ..Fields::default()
        }
    }

    #[test]
    fn flags_give_one_tool_with_defaults() {
        let spec = from_flags(fields("count", "sh"), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.group, "count");
        assert_eq!(spec.def.input_schema, json!({"type": "object"}));
        assert!(spec.program.is_absolute(), "{:?}", spec.program);
        let spec = from_flags(
            fields("count", "sh"),
            Some(r#"{"type": "object", "properties": {}}"#),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.def.input_schema["properties"], json!({}));
    }

    #[test]
    fn bad_flags_name_what_is_wrong() {
        let cases = [
            (
                fields("a b", "sh"),
                None,
                "invalid tool at $.name: tool name \"a b\"",
            ),
            (
                fields("ok", "no-such-program-x"),
                None,
                "the command after -- is wrong: program \"no-such-program-x\" not found in PATH",
            ),
            (
                fields("ok", "./nope/x"),
                None,
                "the command after -- is wrong: \"./nope/x\" not found",
            ),
            (
                fields("ok", "/"),
                None,
                "the command after -- is wrong: \"/\" is a directory, not a program",
            ),
            (
                fields("ok", "sh"),
                Some("{\"type\": "),
                "--schema: invalid JSON",
            ),
            (
                fields("ok", "sh"),
                Some("/no/such/schema.json"),
                "--schema /no/such/schema.json: No such file",
            ),
            (
                fields("ok", "sh"),
                Some("{\"type\": \"string\"}"),
                "--schema: at $.type: root schema must have \"type\": \"object\"",
            ),
        ];
        for (f, schema, want) in cases {
            match from_flags(f, schema) {
                Ok(_) => panic!("accepted; want {want}"),
                Err(e) => assert!(
                    e.contains(want) && !e.contains("invalid tool invalid"),
                    "got {e:?}, want {want:?}"
                ),
            }
        }
    }

    #[test]
    fn files_are_strict_and_name_the_key_path() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |text: &str| {
            let path = dir.path().join("tools.yaml");
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            path
        };
        std::fs::write(
            dir.path().join("s.json"),
            r#"{"type": "object", "required": ["x"]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let good = write(
            "tools:\n  - {name: a, description: A, command: sh, args: [-c, 'cat'], schema: s.json, group: kit, timeout: 5}\n  - {name: b, description: B, command: sh, content: json, schema: {type: object}}\n",
        );
        let specs = from_file(&good).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].def.input_schema["required"], json!(["x"]));
        assert_eq!(
            (specs[0].group.as_str(), specs[0].def.timeout_s),
            ("kit", Some(5))
        );
        assert_eq!(
            (specs[1].group.as_str(), specs[1].content),
            ("b", ContentKind::Json)
        );

        let cases = [
            (
                "tools:\n  - {name: a, description: A, comand: sh}\n",
                "tools[0].comand: unknown field `comand`",
            ),
            (
                "tools:\n  - {name: a, description: A}\n",
                "tools[0]: missing field `command`",
            ),
            (
                "tools:\n  - {name: a, description: A, command: sh, content: xml}\n",
                "tools[0].content: unknown variant `xml`",
            ),
            (
                "tools:\n  - {name: a, description: A, command: sh, schema: 3}\n",
                "at tools[0].schema: expected a schema object",
            ),
            (
                "tools:\n  - {name: a, description: A, command: sh, schema: missing.json}\n",
                "at tools[0].schema: ",
            ),
            (
                "tools:\n  - {name: a, description: A, command: sh}\n  - {name: A, description: B, command: sh}\n",
                "at tools[1].name: tool \"A\" is given twice",
            ),
            (
                "tools:\n  - {name: a, description: '', command: sh}\n",
                "at tools[0].description: description is required",
            ),
            ("tools: []\n", "tools: the list is empty"),
            ("tool: []\n", "unknown field `tool`"),
        ];
        for (text, want) in cases {
            match from_file(&write(text)) {
                Ok(_) => panic!("{text:?} accepted"),
                Err(e) => assert!(e.contains(want), "{text:?}: got {e:?}, want {want:?}"),
            }
        }
    }
}
