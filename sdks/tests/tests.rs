//! The Python and TypeScript SDK suites, run against the binaries this workspace built.
//!
//! Each suite starts real brokers and real `leo-mcp` processes itself; this test hands them the
//! binaries (`LEO_BIN`, `LEO_MCP_BIN`) and fails with the suite's output when any case fails.
//! A missing interpreter or dependency is a failure with the command that installs it (see
//! `leo_testkit::require`), never a silent skip: a suite that did not run would pass for code
//! nobody tested.

#![allow(clippy::too_many_lines)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use leo_testkit::require::{self, Prereq};

/// The TypeScript SDK's package, relative to the checkout.
const TS: &str = "sdks/typescript";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// Runs `cmd` with the binaries' paths exported; panics with its output unless it succeeds.
fn run_suite(name: &str, mut cmd: Command) {
    let out: Output = cmd
        .env("LEO_BIN", leo_testkit::bin("leo"))
        .env("LEO_MCP_BIN", leo_testkit::bin("leo-mcp"))
        .env_remove("LEO_HOME")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the {name} suite: {e}"));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the {name} suite failed:\n{text}");
}

#[test]
fn the_python_sdk_suite_passes() {
    // The test venv (`cargo xtask test` makes it) has pydantic, which the suite's typed tools
    // use; the SDK itself needs the standard library only.
    let Some(python) = require::python(&["pydantic"]) else {
        return;
    };
    // The suite mostly waits on the brokers it starts: three shards of its test classes
    // (`load_tests` in test_app.py) run side by side.
    const SHARDS: usize = 3;
    let shards: Vec<_> = (0..SHARDS)
        .map(|i| {
            let python = python.clone();
            std::thread::spawn(move || {
                let mut cmd = Command::new(&python);
                cmd.args([
                    "-W",
                    "ignore::ResourceWarning",
                    "-m",
                    "unittest",
                    "-v",
                    "test_app",
                ])
                .env("LEO_TEST_SHARD", format!("{i}/{SHARDS}"))
                .current_dir(root().join("sdks/python/tests"));
                run_suite(&format!("Python SDK (shard {i} of {SHARDS})"), cmd);
            })
        })
        .collect();
    for shard in shards {
        if let Err(panic) = shard.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn the_python_sdk_is_type_checked_and_linted() {
    // mypy --strict on the package and its examples, ruff on them and the suite: the settings
    // are sdks/python/pyproject.toml's, the versions the test venv's (pinned with hashes in
    // harness-probe/clients/requirements.txt).
    let Some(python) = require::python(&["mypy", "ruff"]) else {
        return;
    };
    let dir = root().join("sdks/python");
    let mut mypy = Command::new(&python);
    mypy.args(["-m", "mypy"]).current_dir(&dir);
    run_suite("mypy (Python SDK)", mypy);
    let mut ruff = Command::new(&python);
    ruff.args([
        "-m",
        "ruff",
        "check",
        "--no-cache",
        "src",
        "tests",
        "examples",
    ])
    .current_dir(&dir);
    run_suite("ruff (Python SDK)", ruff);
}

#[test]
fn the_typescript_sdk_suite_passes() {
    let pkg = root().join(TS);
    for dep in ["zod", "typescript", "@types/node"] {
        if !require::node_package(Prereq::Node, TS, dep) {
            return;
        }
    }
    let mut files: Vec<String> = std::fs::read_dir(pkg.join("test"))
        .expect("sdks/typescript/test")
        .filter_map(|e| e.ok())
        .map(|e| format!("test/{}", e.file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".test.mjs"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no test files in {}",
        pkg.join("test").display()
    );
    // The files mostly wait on the brokers they start: node runs them side by side (by
    // default it runs one fewer than the cores at once, one at a time on two).
    let mut cmd = Command::new("node");
    cmd.args(["--test", "--test-concurrency=6"])
        .args(&files)
        .current_dir(&pkg);
    run_suite("TypeScript SDK", cmd);
}
