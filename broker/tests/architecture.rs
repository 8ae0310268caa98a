//! The rules ARCHITECTURE.md states that a reading of the source can check: where wire types,
//! routes, HTTP, MCP and clap live, and that every crate's integration tests are one binary that
//! holds every test file. A rule broken here is broken in the map too; fix the code or the map.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// `dir` if it is a file, else every `.rs` file under it (relative to the repository), sorted.
fn sources(dir: &str) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    let root = repo().join(dir);
    if root.is_dir() {
        walk(&root, &mut paths);
    } else {
        paths.push(root);
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a source file");
            let rel = p.strip_prefix(repo()).expect("in the repository");
            (rel.display().to_string(), text)
        })
        .collect()
}

/// `file:line` of every line of `dirs` that `hit` matches, outside the files in `allowed`.
fn offenders(dirs: &[&str], allowed: &[&str], hit: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for dir in dirs {
        for (path, text) in sources(dir) {
            if allowed.iter().any(|a| path.starts_with(a)) {
                continue;
            }
            for (n, line) in text.lines().enumerate() {
                if !line.trim_start().starts_with("//") && hit(line) {
                    found.push(format!("{path}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn only_protocol_defines_the_types_written_onto_the_wire() {
    let found = offenders(
        &["broker/src", "cli/src", "mcp-sidecar/src", "app-sdk/src"],
        // Not the wire: `leo status --json` on stdout, and a state file on disk.
        &[
            "cli/src/commands/snapshot.rs",
            "broker/src/webhooks/store.rs",
        ],
        |line| line.contains("derive(") && line.contains("Serialize"),
    );
    assert!(
        found.is_empty(),
        "a serialized type outside leo-protocol; move it there:\n{}",
        found.join("\n")
    );
}

#[test]
fn routes_are_declared_only_by_the_route_table() {
    let found = offenders(&["broker/src"], &["broker/src/http/mod.rs"], |line| {
        line.contains(".route(")
    });
    assert!(
        found.is_empty(),
        "a route outside http::mod's router:\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_sidecar_knows_rmcp() {
    let found = offenders(
        &["broker/src", "cli/src", "app-sdk/src", "protocol/src"],
        &[],
        |line| line.contains("rmcp"),
    );
    assert!(
        found.is_empty(),
        "rmcp outside leo-mcp:\n{}",
        found.join("\n")
    );
    for krate in ["broker", "cli", "app-sdk", "protocol"] {
        assert!(
            !dependencies(krate).contains("rmcp"),
            "{krate} depends on rmcp"
        );
    }
}

/// The `[dependencies]` section of `krate`'s manifest (not the dev-dependencies).
fn dependencies(krate: &str) -> String {
    let manifest = std::fs::read_to_string(repo().join(krate).join("Cargo.toml")).unwrap();
    manifest
        .split("\n[dependencies]")
        .nth(1)
        .map(|rest| rest.split("\n[").next().unwrap_or(rest))
        .unwrap_or_default()
        .to_owned()
}

/// The daemon's library is not the CLI: command-line parsing and the SDK's HTTP client are the
/// `leo-cli` crate's, so `leo-broker` depends on neither and names neither.
#[test]
fn the_daemon_library_knows_no_clap_and_no_sdk() {
    let deps = dependencies("broker");
    for name in ["clap", "leo-app"] {
        assert!(
            !deps.lines().any(|l| l.trim_start().starts_with(name)),
            "leo-broker depends on {name}; the CLI's parts belong in cli/"
        );
    }
    let found = offenders(&["broker/src"], &[], |line| {
        ["clap::", "use clap", "leo_app::", "use leo_app"]
            .iter()
            .any(|w| line.contains(w))
    });
    assert!(
        found.is_empty(),
        "clap or leo_app in the daemon's library:\n{}",
        found.join("\n")
    );
    // The one `leo` binary is the CLI crate's.
    let manifest = std::fs::read_to_string(repo().join("cli/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("[[bin]]\nname = \"leo\""),
        "cli/ builds `leo`"
    );
    let manifest = std::fs::read_to_string(repo().join("broker/Cargo.toml")).unwrap();
    assert!(!manifest.contains("[[bin]]"), "leo-broker is a library");
}

#[test]
fn the_core_and_its_state_machines_know_no_http() {
    let found = offenders(
        &[
            "broker/src/core",
            "store/src",
            "broker/src/history",
            "broker/src/ipc",
            "broker/src/registry.rs",
            "broker/src/requests.rs",
            "broker/src/ownership.rs",
            "broker/src/events.rs",
        ],
        &[],
        |line| {
            ["axum", "hyper", "http::"]
                .iter()
                .any(|w| line.contains(&format!("{w}::")) || line.contains(&format!("use {w}")))
        },
    );
    assert!(
        found.is_empty(),
        "HTTP below broker::http:\n{}",
        found.join("\n")
    );
}

/// Each crate with integration tests builds them as one binary, `tests/tests.rs`, and every
/// file in `tests/` is a module of it (a file left out would never run).
#[test]
fn every_crate_has_one_test_binary_that_holds_every_test_file() {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the workspace members");
    let mut with_tests = 0;
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        let dir = repo().join(member);
        let tests = dir.join("tests");
        if !tests.is_dir() {
            continue;
        }
        with_tests += 1;
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains("autotests = false"),
            "{member}: autotests must be off"
        );
        assert_eq!(
            cargo.matches("[[test]]").count(),
            1,
            "{member}: one [[test]]"
        );
        assert!(
            cargo.contains("path = \"tests/tests.rs\""),
            "{member}: the test binary is tests/tests.rs"
        );
        let root = std::fs::read_to_string(tests.join("tests.rs")).unwrap();
        for entry in std::fs::read_dir(&tests).unwrap() {
            let path = entry.unwrap().path();
            let Some(stem) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|_| path.extension().is_some_and(|x| x == "rs"))
            else {
                continue;
            };
            if stem != "tests" {
                assert!(
                    root.lines().any(|l| l.trim() == format!("mod {stem};")),
                    "{member}/tests/{stem}.rs is not a module of tests/tests.rs, so it never runs"
                );
            }
        }
    }
    assert!(with_tests >= 5, "found {with_tests} crates with tests");
}
