//! Registration lints: what the rules allow but harnesses are known to mishandle.
//!
//! A registration that passes every rule is accepted; these only add `warnings` to the answer
//! (and to `leo status` and the console), so an app author hears about a name a harness will cut
//! or a schema a model API will refuse before an agent trips over it.

use leo_protocol::tool::ToolDef;

/// The longest tool name many model APIs accept, prefix included.
pub const MODEL_NAME_LIMIT: usize = 64;

/// What harnesses put in front of an MCP tool's name, and who does.
const PREFIXES: &[(&str, &str)] = &[
    ("mcp__leo__", "Claude Code and codex"),
    ("leo_", "opencode"),
];

/// The keywords a root `input_schema` should not lead with.
const ROOT_COMBINATORS: &[&str] = &["anyOf", "oneOf", "allOf"];

/// The warnings for a registration's `defs`; `others` are the names of every other tool agents
/// may see (other groups').
pub fn warnings<'a>(
    defs: &[&'a ToolDef],
    others: impl Iterator<Item = &'a str> + Clone,
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, def) in defs.iter().enumerate() {
        let at = format!("$.tools[{i}]");
        name_length(&at, &def.name, &mut out);
        root_combinators(&at, def, &mut out);
        if is_blank(&def.description) {
            out.push(format!(
                "at {at}.description: the description of tool {:?} is empty once spaces and invisible characters are trimmed; the model has nothing to go on",
                def.name
            ));
        }
        let earlier = defs[..i].iter().map(|d| d.name.as_str());
        for other in others.clone().chain(earlier) {
            if other != def.name && same_but_separators(other, &def.name) {
                out.push(format!(
                    "at {at}.name: tool {:?} differs from tool {other:?} only by \"-\" and \"_\"; harnesses and models that normalize names may call the wrong one",
                    def.name
                ));
            }
        }
    }
    out
}

fn name_length(at: &str, name: &str, out: &mut Vec<String>) {
    for (prefix, who) in PREFIXES {
        let total = prefix.len() + name.len();
        if total > MODEL_NAME_LIMIT {
            out.push(format!(
                "at {at}.name: tool {name:?} becomes {total} characters with the prefix {prefix:?} that {who} add, more than the {MODEL_NAME_LIMIT} model APIs accept; keep names to {} characters",
                MODEL_NAME_LIMIT - PREFIXES[0].0.len()
            ));
            // The longest prefix comes first: one warning says it all.
            return;
        }
    }
}

fn root_combinators(at: &str, def: &ToolDef, out: &mut Vec<String>) {
    let Some(root) = def.input_schema.as_object() else {
        return;
    };
    for key in ROOT_COMBINATORS {
        if root.contains_key(*key) {
            out.push(format!(
                "at {at}.input_schema.{key}: {key:?} at the root of the input_schema of tool {:?} is refused or dropped by some harnesses and model APIs; put the choices inside a property",
                def.name
            ));
        }
    }
}

/// True when nothing visible is left of `text` without spaces and invisible formatting
/// characters (zero-width, bidirectional controls, the byte-order mark).
fn is_blank(text: &str) -> bool {
    text.chars().all(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}')
    })
}

/// True when `a` and `b` are equal once `-` and `_` count as one character (without case).
fn same_but_separators(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    a.len() == b.len() && norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str, description: &str, schema: serde_json::Value) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: description.into(),
            input_schema: schema,
            timeout_s: None,
            label: None,
            ..ToolDef::default()
        }
    }

    #[test]
    fn each_lint_says_where_and_why() {
        let plain = json!({"type": "object"});
        let long = "a".repeat(55);
        let longer = "b".repeat(61);
        let defs = [
            def(&long, "d", plain.clone()),
            def(&longer, "d", plain.clone()),
            def(
                "pick",
                "d",
                json!({"anyOf": [{"type": "object"}], "type": "object"}),
            ),
            def("blank", "\u{200B} \u{FEFF}", plain.clone()),
            def("read-file", "d", plain.clone()),
            def("ok_tool", "fine", plain.clone()),
        ];
        let refs: Vec<&ToolDef> = defs.iter().collect();
        let w = warnings(&refs, ["read_file", "other"].into_iter());
        assert_eq!(w.len(), 5, "{w:#?}");
        assert!(
            w[0].starts_with("at $.tools[0].name: tool \"aaaa"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("becomes 65 characters with the prefix \"mcp__leo__\" that Claude Code and codex add"), "{}", w[0]);
        assert!(
            w[1].contains("becomes 71 characters with the prefix \"mcp__leo__\""),
            "{}",
            w[1]
        );
        assert!(
            w[2].starts_with("at $.tools[2].input_schema.anyOf: \"anyOf\" at the root"),
            "{}",
            w[2]
        );
        assert!(
            w[3].starts_with(
                "at $.tools[3].description: the description of tool \"blank\" is empty"
            ),
            "{}",
            w[3]
        );
        assert_eq!(
            w[4],
            "at $.tools[4].name: tool \"read-file\" differs from tool \"read_file\" only by \"-\" and \"_\"; harnesses and models that normalize names may call the wrong one"
        );
        let fine = [def(&"c".repeat(54), "d", plain)];
        let refs: Vec<&ToolDef> = fine.iter().collect();
        assert!(
            warnings(&refs, std::iter::empty()).is_empty(),
            "54 + 10 is 64"
        );
    }
}
