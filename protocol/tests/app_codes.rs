//! The table of how an app reads a refusal (`ErrorCode::APP_FATAL`, `LOST_RACE`,
//! `REGISTER_AGAIN`, `RESUME_REFUSED`) is the one the SDKs check their copies against: `testdata/sdk/codes.json`
//! must be this table (`UPDATE_WIRE=1` rewrites it), and docs/protocol.md must list the same
//! codes. The Python and TypeScript suites read the file and compare their own sets with it;
//! the Rust SDK uses the table itself.

#![allow(clippy::expect_used)]

use std::path::PathBuf;

use leo_protocol::ErrorCode;
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn names(codes: &[ErrorCode]) -> Vec<&'static str> {
    let mut names: Vec<_> = codes.iter().map(|c| c.as_str()).collect();
    names.sort_unstable();
    names
}

fn table() -> Value {
    json!({
        "fatal": names(&ErrorCode::APP_FATAL),
        "lost_race": names(&ErrorCode::LOST_RACE),
        "register_again": names(&ErrorCode::REGISTER_AGAIN),
        "resume_refused": ErrorCode::RESUME_REFUSED.as_str(),
    })
}

#[test]
fn the_sdks_table_file_is_the_protocol_table() {
    let path = root().join("testdata/sdk/codes.json");
    let mut want = serde_json::to_string_pretty(&table()).expect("json");
    want.push('\n');
    if std::env::var_os("UPDATE_WIRE").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, &want).expect("write");
        return;
    }
    let have = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_WIRE=1 writes it)", path.display()));
    assert_eq!(
        have,
        want,
        "{} differs from ErrorCode::APP_FATAL/LOST_RACE/REGISTER_AGAIN/RESUME_REFUSED (UPDATE_WIRE=1 rewrites it)",
        path.display()
    );
}

/// The row of docs/protocol.md's table that starts with `| label |`, as its codes.
fn documented(label: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("docs/protocol.md")).expect("docs/protocol.md");
    let head = format!("| {label} |");
    let row = text
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("docs/protocol.md has no row {head}"));
    let mut codes: Vec<String> = row
        .split('|')
        .nth(2)
        .unwrap_or_default()
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    codes.sort_unstable();
    codes
}

#[test]
fn docs_list_the_same_codes() {
    assert_eq!(documented("fatal"), names(&ErrorCode::APP_FATAL));
    assert_eq!(documented("lost the race"), names(&ErrorCode::LOST_RACE));
    assert_eq!(
        documented("register again"),
        names(&ErrorCode::REGISTER_AGAIN)
    );
    assert_eq!(
        documented("resume refused"),
        [ErrorCode::RESUME_REFUSED.as_str()]
    );
}

#[test]
fn no_code_is_both_fatal_and_a_lost_race() {
    for code in ErrorCode::APP_FATAL {
        assert!(!code.lost_the_race(), "{code}");
        assert!(code.is_fatal_to_app(), "{code}");
    }
    for code in ErrorCode::LOST_RACE {
        assert!(!code.is_fatal_to_app(), "{code}");
    }
    for code in ErrorCode::REGISTER_AGAIN {
        assert!(code.registers_again(), "{code}");
        assert!(!code.is_fatal_to_app(), "{code}");
    }
}
