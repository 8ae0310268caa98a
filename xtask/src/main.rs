//! `cargo xtask test`: the one test command, on a fresh machine as on a developer's.
//!
//! The tests drive real outside programs: the official TypeScript and Python MCP SDKs,
//! `playwright-core` with Debian's chromium, and the Claude Code, codex and opencode CLIs. This
//! installs each into the checkout, pinned by the lock files beside the tests (`npm ci` per
//! `package-lock.json`, a venv in `target/test-venv` from the hashed `requirements.txt`),
//! installs chromium, systemd (`systemd-analyze` checks the unit `leo service` writes) and
//! postgresql (the PostgreSQL store's tests start a server of their own when none answers) with
//! apt-get when they are missing and we are root, then runs
//! `cargo build --workspace --bins` and `cargo test --workspace --locked` with `LEO_TEST_PYTHON` set to the venv's interpreter.
//! A step whose inputs did not change since it last ran (a copy of its lock file is kept next to
//! what it installed) is skipped, so a second run starts testing at once.
//!
//! Why an xtask and not a script or a Makefile: cargo is the one tool every contributor has
//! already, the alias in `.cargo/config.toml` makes it a cargo command, and this crate has no
//! dependencies, so it builds in a second before anything else. `cargo xtask man` writes the man
//! pages of `leo` and `leo-mcp` into `target/man`. `.ci/run` calls the same
//! command, so CI and a developer run the same steps.
//!
//! Skipping is opt-in and named: `LEO_TEST_SKIP=browser,node` leaves those installs out and
//! lets the tests that need them skip; each skip is appended to `target/test-skipped.txt`
//! (`LEO_TEST_SKIPPED_FILE`), printed at the end. The names are the ones `leo_testkit::require`
//! knows.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The names `LEO_TEST_SKIP` takes (the same as `leo_testkit::require::Prereq`).
const SKIP_NAMES: [&str; 6] = [
    "node",
    "python",
    "browser",
    "harness-clis",
    "systemd",
    "postgres",
];

/// Each npm lock file the tests use, the skip name that leaves it out, and whether `npm ci`
/// can install it. The harness CLIs cannot: their wrappers list a binary package per platform
/// as optional dependencies, and where the registry lacks one for another platform the lock
/// file cannot hold it, which `npm ci` takes for a stale lock. `npm install --no-save` installs
/// the same locked, exact versions (with the lock's integrity hashes) and writes nothing.
const NPM_DIRS: [(&str, &str, bool); 6] = [
    ("mcp-sidecar/tests/interop", "node", true),
    ("app-sdk/tests/conformance", "node", true),
    ("sdks/typescript", "node", true),
    ("harness-probe/clients", "node", true),
    ("broker/tests/browser", "browser", true),
    ("testdata/harness-clis", "harness-clis", false),
];

const VENV: &str = "target/test-venv";
const REQUIREMENTS: &str = "harness-probe/clients/requirements.txt";
const CHROMIUM: &str = "/usr/bin/chromium";
/// `systemd-analyze`, which checks the unit `leo service install` writes.
const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";
/// PostgreSQL's `initdb`, from which the tests start a throwaway server when no server
/// answers (`leo_testkit::postgres`).
const POSTGRES_INITDB: &str = "/usr/lib/postgresql/*/bin/initdb";
/// Where `cargo xtask man` writes the man pages.
const MAN_DIR: &str = "target/man";
const SKIPPED_FILE: &str = "target/test-skipped.txt";

/// A step that could not be done, with what to do about it.
type Failure = String;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("setup") => setup().map(|_| ExitCode::SUCCESS),
        Some("man") => man().map(|_| ExitCode::SUCCESS),
        _ => {
            eprintln!(
                "usage: cargo xtask test [CARGO TEST ARGS…]   install the test prerequisites, then run the tests\n       \
                 cargo xtask setup                      install the test prerequisites only\n       \
                 cargo xtask man                        write the man pages of leo and leo-mcp into target/man\n\
                 LEO_TEST_SKIP=NAME,… names prerequisites to leave out; names: {}",
                SKIP_NAMES.join(", ")
            );
            return ExitCode::from(2);
        }
    };
    result.unwrap_or_else(|failure| {
        eprintln!("xtask: {failure}");
        ExitCode::FAILURE
    })
}

/// The checkout's root (this crate's parent).
fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// The names in `LEO_TEST_SKIP`, checked.
fn skips() -> Result<Vec<String>, Failure> {
    let raw = std::env::var("LEO_TEST_SKIP").unwrap_or_default();
    let names: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    match names.iter().find(|n| !SKIP_NAMES.contains(&n.as_str())) {
        Some(bad) => Err(format!(
            "LEO_TEST_SKIP={raw}: unknown name {bad:?}; the names are {}",
            SKIP_NAMES.join(", ")
        )),
        None => Ok(names),
    }
}

/// What `setup` left for the test run.
struct Setup {
    python: Option<PathBuf>,
    skips: Vec<String>,
}

/// Installs every prerequisite that `LEO_TEST_SKIP` does not name.
fn setup() -> Result<Setup, Failure> {
    let skips = skips()?;
    let wanted = |name: &str| !skips.iter().any(|s| s == name);
    let root = root();
    for (dir, name, ci) in NPM_DIRS {
        if wanted(name) {
            timed(&format!("npm packages in {dir}"), || npm(&root, dir, ci))?;
        } else {
            println!("xtask: npm packages in {dir}: left out (LEO_TEST_SKIP={name})");
        }
    }
    let python = if wanted("python") {
        Some(timed("python venv", || venv(&root))?)
    } else {
        println!("xtask: python venv: left out (LEO_TEST_SKIP=python)");
        None
    };
    for (name, file, package) in [
        ("browser", CHROMIUM, "chromium"),
        ("systemd", SYSTEMD_ANALYZE, "systemd"),
        ("postgres", POSTGRES_INITDB, "postgresql"),
    ] {
        if wanted(name) {
            timed(package, || apt(&installed(file), package, name))?;
        } else {
            println!("xtask: {package}: left out (LEO_TEST_SKIP={name})");
        }
    }
    Ok(Setup { python, skips })
}

/// Runs `step`, then says how long it took.
fn timed<T>(what: &str, step: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    let start = Instant::now();
    let out = step().map_err(|e| format!("{what}: {e}"))?;
    println!("xtask: {what}: {:.1} s", start.elapsed().as_secs_f64());
    Ok(out)
}

/// Runs `cmd`, failing with its name and exit status.
fn run(cmd: &mut Command) -> Result<(), Failure> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

/// True when the copy at `stamp` has the same bytes as `input` (the step ran on this input).
fn up_to_date(input: &Path, stamp: &Path) -> bool {
    match (std::fs::read(input), std::fs::read(stamp)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn stamp(input: &Path, stamp: &Path) -> Result<(), Failure> {
    std::fs::copy(input, stamp)
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", stamp.display()))
}

/// `npm ci` (or `npm install --no-save`) in `dir`, unless its `node_modules` was installed from
/// this very lock file.
fn npm(root: &Path, dir: &str, ci: bool) -> Result<(), Failure> {
    let dir = root.join(dir);
    let lock = dir.join("package-lock.json");
    let done = dir.join("node_modules/.xtask-package-lock.json");
    if up_to_date(&lock, &done) {
        return Ok(());
    }
    if Command::new("npm").arg("--version").output().is_err() {
        return Err(
            "npm is not installed; install Node 20 or newer with npm (`sudo apt-get install -y nodejs npm`), \
             or leave these tests out with LEO_TEST_SKIP=node,browser,harness-clis"
                .into(),
        );
    }
    let install: &[&str] = if ci {
        &["ci"]
    } else {
        &["install", "--no-save"]
    };
    run(Command::new("npm")
        .args(install)
        .args(["--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir))?;
    stamp(&lock, &done)
}

/// The venv in `target/test-venv` with the hashed requirements; returns its interpreter.
fn venv(root: &Path) -> Result<PathBuf, Failure> {
    let venv = root.join(VENV);
    let python = venv.join("bin/python");
    let requirements = root.join(REQUIREMENTS);
    let done = venv.join("xtask-requirements.txt");
    if python.is_file() && up_to_date(&requirements, &done) {
        return Ok(python);
    }
    if !python.is_file() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).map_err(|e| {
            format!(
                "{e}; it needs Python 3.11 or newer with venv (`sudo apt-get install -y python3 python3-venv`), \
                 or leave these tests out with LEO_TEST_SKIP=python"
            )
        })?;
    }
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--require-hashes",
            "-r",
        ])
        .arg(&requirements))?;
    stamp(&requirements, &done)?;
    Ok(python)
}

/// `file`, or for a pattern with one `*` directory (`/usr/lib/postgresql/*/bin/initdb`) the
/// first match; `Err` with the pattern when nothing matches.
fn installed(file: &str) -> Result<PathBuf, String> {
    let Some((dir, rest)) = file.split_once("/*/") else {
        let path = PathBuf::from(file);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(file.to_owned())
        };
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join(rest))
        .find(|p| p.is_file())
        .ok_or_else(|| file.to_owned())
}

/// Debian's `package`, whose file was looked for (`found`, or the missing path): installed
/// with apt-get when missing and we are root; `skip` is the `LEO_TEST_SKIP` name that leaves
/// it out.
fn apt(found: &Result<PathBuf, String>, package: &str, skip: &str) -> Result<(), Failure> {
    let file = match found {
        Ok(_) => return Ok(()),
        Err(file) => file,
    };
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    if uid != "0" {
        return Err(format!(
            "{file} is missing; install it with `sudo apt-get update && sudo apt-get install -y {package}`, \
             or leave the tests that need it out with LEO_TEST_SKIP={skip}"
        ));
    }
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends", package])
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Builds `leo` and `leo-mcp`, then has each write its man pages (generated from its clap
/// definitions) into `target/man`.
fn man() -> Result<(), Failure> {
    let root = root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo)
        .args([
            "build", "--locked", "--quiet", "-p", "leo-cli", "-p", "leo-mcp", "--bins",
        ])
        .current_dir(&root))?;
    let out = root.join(MAN_DIR);
    let bin = root.join("target/debug");
    run(Command::new(bin.join("leo"))
        .args(["man", "--out"])
        .arg(&out))?;
    run(Command::new(bin.join("leo-mcp")).arg("--man").arg(&out))?;
    println!("xtask: man pages in {}", out.display());
    Ok(())
}

/// `setup`, then `cargo test --locked --no-fail-fast` (every failing test binary reported, not
/// only the first; `--workspace` unless arguments are given), then the list of what was skipped.
fn test(args: &[String]) -> Result<ExitCode, Failure> {
    let setup = setup()?;
    let root = root();
    let skipped_file = root.join(SKIPPED_FILE);
    let _ = std::fs::remove_file(&skipped_file);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    build_binaries(&cargo, &root)?;
    let mut cmd = Command::new(cargo);
    cmd.args(["test", "--locked", "--no-fail-fast"])
        .current_dir(&root);
    if args.is_empty() {
        cmd.arg("--workspace");
    } else {
        cmd.args(args);
    }
    cmd.env("LEO_TEST_SKIPPED_FILE", &skipped_file);
    if let Some(python) = &setup.python {
        cmd.env("LEO_TEST_PYTHON", python);
    }
    println!("xtask: {cmd:?}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    println!(
        "xtask: cargo test: {:.1} s, {status}",
        start.elapsed().as_secs_f64()
    );
    report_skips(&setup.skips, &skipped_file);
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Builds every binary of the workspace before the tests that start them. `cargo test` builds
/// a package's binaries only for that package's own integration tests, and `leo` (package
/// `leo-cli`) is started by the broker's, so without this step they would run a stale `leo`,
/// or none on a fresh checkout.
fn build_binaries(cargo: &std::ffi::OsStr, root: &Path) -> Result<(), Failure> {
    let status = Command::new(cargo)
        .args(["build", "--locked", "--workspace", "--bins"])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build --workspace --bins: {status}"))
    }
}

/// Prints the tests that skipped, so a green run still says what it did not test.
fn report_skips(skips: &[String], file: &Path) {
    if skips.is_empty() {
        return;
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    println!(
        "\nxtask: LEO_TEST_SKIP={} — {} test(s) skipped their work:",
        skips.join(","),
        lines.len()
    );
    for line in lines {
        println!("  SKIPPED {line}");
    }
}
