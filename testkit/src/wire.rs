//! Golden wire fixtures in `testdata/wire/`: one JSON file per request body, response body,
//! event and IPC frame.
//!
//! Request fixtures are inputs, written by hand, with placeholders such as `"<client_id>"`
//! that a test fills in. Response fixtures are compared after `normalize` replaces what
//! changes every run (ids, timestamps) with placeholders; `UPDATE_WIRE=1` rewrites them from
//! what the broker actually sent, and only then.

use std::path::PathBuf;

use serde_json::Value;

/// `testdata/wire/` of this workspace.
pub fn dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/wire"))
}

/// Reads a fixture, replacing each `(placeholder, value)` string.
pub fn load(name: &str, fill: &[(&str, &str)]) -> Value {
    let path = dir().join(name);
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    for (k, v) in fill {
        text = text.replace(k, v);
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Compares `actual` (normalized) with the fixture `name`, or rewrites it under `UPDATE_WIRE=1`.
pub fn check(name: &str, actual: &Value) {
    let actual = normalize(actual.clone());
    let path = dir().join(name);
    if std::env::var_os("UPDATE_WIRE").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let mut text = serde_json::to_string_pretty(&actual).expect("json");
        text.push('\n');
        std::fs::write(&path, text).expect("write fixture");
        return;
    }
    let want = load(name, &[]);
    assert_eq!(
        actual,
        want,
        "wire fixture {name} differs (run with UPDATE_WIRE=1 to accept):\nactual: {}",
        serde_json::to_string_pretty(&actual).unwrap_or_default()
    );
}

/// Replaces ids, webhook secrets, timestamps and ages (`age_s`) with placeholders, recursively.
pub fn normalize(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(placeholder(&s).unwrap_or(s)),
        Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| {
                    let v = if k == "seq" || k == "revision" || k == "session" {
                        v
                    } else if k == "age_s" {
                        Value::String("<age>".into())
                    } else {
                        normalize(v)
                    };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}

fn placeholder(s: &str) -> Option<String> {
    let hex24 = |rest: &str| rest.len() == 24 && rest.bytes().all(|b| b.is_ascii_hexdigit());
    if s.strip_prefix("c_").is_some_and(hex24) {
        return Some("<client_id>".into());
    }
    if s.strip_prefix("r_").is_some_and(hex24) {
        return Some("<request_id>".into());
    }
    if s.starts_with("whsec_") {
        return Some("<secret>".into());
    }
    if s.strip_prefix("k_").is_some_and(hex24) {
        return Some("<resume_key>".into());
    }
    let b = s.as_bytes();
    let looks_like_time = s.len() == 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && s.ends_with('Z');
    if looks_like_time {
        return Some("<time>".into());
    }
    // Ids embedded in messages, such as "request r_… already ended".
    let mut out = String::new();
    let mut changed = false;
    for (i, word) in s.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match placeholder_word(word) {
            Some(p) => {
                out.push_str(&p);
                changed = true;
            }
            None => out.push_str(word),
        }
    }
    changed.then_some(out)
}

fn placeholder_word(word: &str) -> Option<String> {
    let hex24 = |rest: &str| rest.len() >= 24 && rest[..24].bytes().all(|b| b.is_ascii_hexdigit());
    for (prefix, name) in [("c_", "<client_id>"), ("r_", "<request_id>")] {
        if let Some(rest) = word.strip_prefix(prefix)
            && hex24(rest)
        {
            return Some(format!("{name}{}", &rest[24..]));
        }
    }
    None
}
