//! The Python and TypeScript SDK suites, run against the binaries this workspace built.
//!
//! Each suite starts real brokers and real `leo-mcp` processes itself; this test hands them the
//! binaries (`LEO_BIN`, `LEO_MCP_BIN`) and fails with the suite's output when any case fails.
//! A missing interpreter or dependency is a failure with the command that installs it, never a
//! skip: a suite that silently did not run would pass for code nobody tested.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

fn version_of(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The interpreter: `LEO_TEST_PYTHON` (such as a virtual environment's), else `python3`.
fn python() -> String {
    std::env::var("LEO_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn the_python_sdk_suite_passes() {
    let python = python();
    let requirements = root().join("sdks/python/tests/requirements.txt");
    let install = format!(
        "{python} -m pip install -r {} (or set LEO_TEST_PYTHON to an interpreter that has them)",
        requirements.display()
    );
    let check = "import sys; assert sys.version_info >= (3, 10), sys.version; import pydantic";
    let ok = Command::new(&python)
        .args(["-c", check])
        .output()
        .map(|o| o.status.success());
    match ok {
        Ok(true) => {}
        Ok(false) => {
            panic!("{python} is older than 3.10 or lacks the suite's requirements: {install}")
        }
        Err(e) => panic!("cannot run {python} ({e}): install Python 3.10 or newer, then {install}"),
    }
    let mut cmd = Command::new(&python);
    cmd.args([
        "-W",
        "ignore::ResourceWarning",
        "-m",
        "unittest",
        "-v",
        "test_app",
    ])
    .current_dir(root().join("sdks/python/tests"));
    run_suite("Python SDK", cmd);
}

#[test]
fn the_typescript_sdk_suite_passes() {
    let pkg = root().join("sdks/typescript");
    let install = format!("npm ci --prefix {}", pkg.display());
    let version = version_of("node", &["--version"]).unwrap_or_else(|| {
        panic!("node is not installed: install Node.js 20 or newer, then {install}")
    });
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 20,
        "node {version} is too old: install Node.js 20 or newer"
    );
    for dep in ["zod", "typescript", "@types/node"] {
        assert!(
            pkg.join("node_modules")
                .join(dep)
                .join("package.json")
                .is_file(),
            "the TypeScript SDK's dev dependencies are not installed ({dep} missing): {install}"
        );
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
    let mut cmd = Command::new("node");
    cmd.arg("--test").args(&files).current_dir(&pkg);
    run_suite("TypeScript SDK", cmd);
}
