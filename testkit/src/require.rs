//! Prerequisites that Cargo does not install: Node with the npm packages a test drives, the
//! Python venv with the MCP SDK, Debian's chromium, the harness CLIs, Debian's systemd, PostgreSQL (see `postgres`).
//!
//! A test that lacks one fails, naming the command that installs it: a test that returns early
//! would pass without doing its work, and `cargo test` hides what a passing test prints. On a
//! machine that truly cannot have one, skipping is opt-in by name (`LEO_TEST_SKIP=browser,node`);
//! each skip is then written straight to stderr (past libtest's capture) and appended to the
//! file named by `LEO_TEST_SKIPPED_FILE`, which `cargo xtask test` prints at the end.
//!
//! `cargo xtask test` installs all of them into the checkout; the names here match its own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that names the prerequisites whose tests may skip.
pub const SKIP_VAR: &str = "LEO_TEST_SKIP";
/// The file each skip is appended to, when set.
pub const SKIPPED_FILE_VAR: &str = "LEO_TEST_SKIPPED_FILE";
/// The Python interpreter of the test venv, when set (`cargo xtask test` sets it).
pub const PYTHON_VAR: &str = "LEO_TEST_PYTHON";

/// One thing a test needs from outside Cargo, by the name `LEO_TEST_SKIP` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prereq {
    /// `node` and the npm packages of a test's own `package-lock.json`.
    Node,
    /// The test venv's Python with the packages of `harness-probe/clients/requirements.txt`.
    Python,
    /// Debian's chromium (with `playwright-core` from npm).
    Browser,
    /// The Claude Code, codex and opencode CLIs of `testdata/harness-clis/`.
    HarnessClis,
    /// Debian's systemd, for `systemd-analyze verify`.
    Systemd,
    /// A PostgreSQL server, or Debian's `postgresql` binaries to start one (`postgres`).
    Postgres,
}

impl Prereq {
    /// Every prerequisite, in the order they are listed.
    pub const ALL: [Prereq; 6] = [
        Prereq::Node,
        Prereq::Python,
        Prereq::Browser,
        Prereq::HarnessClis,
        Prereq::Systemd,
        Prereq::Postgres,
    ];

    /// Its name in `LEO_TEST_SKIP`.
    pub fn key(self) -> &'static str {
        match self {
            Prereq::Node => "node",
            Prereq::Python => "python",
            Prereq::Browser => "browser",
            Prereq::HarnessClis => "harness-clis",
            Prereq::Systemd => "systemd",
            Prereq::Postgres => "postgres",
        }
    }
}

/// The checkout's root.
pub fn repo_root() -> PathBuf {
    let testkit = Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().unwrap_or(testkit).to_path_buf()
}

/// The prerequisites `LEO_TEST_SKIP` names; panics on a name that is none of them, so a typo
/// does not turn into a silent run of everything (or of nothing).
pub fn skipped_by_request() -> Vec<Prereq> {
    let raw = std::env::var(SKIP_VAR).unwrap_or_default();
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            Prereq::ALL
                .into_iter()
                .find(|p| p.key() == name)
                .unwrap_or_else(|| {
                    let known: Vec<_> = Prereq::ALL.iter().map(|p| p.key()).collect();
                    panic!("{SKIP_VAR}={raw}: unknown name {name:?}; the names are {known:?}")
                })
        })
        .collect()
}

/// True when `missing` is `None`. Otherwise panics with the install command, or, when
/// `LEO_TEST_SKIP` names `prereq`, reports the skip and returns false.
pub fn require(prereq: Prereq, missing: Option<String>, install: &str) -> bool {
    let Some(what) = missing else {
        return true;
    };
    if !skipped_by_request().contains(&prereq) {
        panic!(
            "missing test prerequisite: {what}.\n  Install it with (from the checkout's root): {install}\n  \
             (`cargo xtask test` installs every test prerequisite into the checkout; \
             {SKIP_VAR}={} skips the tests that need this one)",
            prereq.key()
        );
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!("{test}: {what} ({SKIP_VAR}={})\n", prereq.key());
    // Past libtest's capture, so a passing run still shows what it did not test.
    let _ = std::io::stderr().write_all(format!("SKIPPED {line}").as_bytes());
    if let Ok(file) = std::env::var(SKIPPED_FILE_VAR) {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            panic!("{SKIPPED_FILE_VAR}={file}: {e}");
        }
    }
    false
}

/// True when `node --version` runs.
fn node_runs() -> bool {
    Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Why `node` with `package` installed under `dir` (relative to the checkout) is not usable.
pub fn node_package_missing(dir: &str, package: &str) -> Option<String> {
    if !node_runs() {
        return Some("node is not installed".into());
    }
    let manifest = repo_root()
        .join(dir)
        .join("node_modules")
        .join(package)
        .join("package.json");
    (!manifest.is_file()).then(|| format!("the npm package {package} is not installed in {dir}"))
}

/// The command that installs `dir`'s npm packages (or node itself).
pub fn npm_install_command(dir: &str) -> String {
    if node_runs() {
        format!("npm ci --prefix {dir}")
    } else {
        "sudo apt-get install -y nodejs npm".into()
    }
}

/// Requires `node` with `package` installed from `dir`'s lock file; `prereq` is the name a
/// skip goes by.
pub fn node_package(prereq: Prereq, dir: &str, package: &str) -> bool {
    require(
        prereq,
        node_package_missing(dir, package),
        &npm_install_command(dir),
    )
}

/// Where the test venv lives.
pub const VENV: &str = "target/test-venv";
/// The command that makes the test venv.
pub const VENV_INSTALL: &str = "python3 -m venv target/test-venv && target/test-venv/bin/pip install -r harness-probe/clients/requirements.txt";

/// The test venv's Python: `LEO_TEST_PYTHON`, else `target/test-venv/bin/python`, when it can
/// import every module in `modules`; `None` (after [`require`]) otherwise.
pub fn python(modules: &[&str]) -> Option<PathBuf> {
    let python = std::env::var_os(PYTHON_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(VENV).join("bin/python"));
    let imports = if modules.is_empty() {
        "pass".to_owned()
    } else {
        format!("import {}", modules.join(", "))
    };
    let missing = match Command::new(&python).args(["-c", &imports]).output() {
        Err(e) => Some(format!("the test venv's python {} ({e})", python.display())),
        Ok(o) if !o.status.success() => Some(format!(
            "{} cannot `{imports}`: {}",
            python.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    };
    require(Prereq::Python, missing, VENV_INSTALL).then_some(python)
}

/// Debian's chromium, where the browser test looks for it.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Requires Debian's chromium.
pub fn chromium() -> bool {
    let missing = (!Path::new(CHROMIUM).is_file()).then(|| format!("chromium ({CHROMIUM})"));
    require(
        Prereq::Browser,
        missing,
        "sudo apt-get update && sudo apt-get install -y chromium",
    )
}

/// Debian's `systemd-analyze`, which checks the unit `leo service install` writes.
pub const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";

/// Requires `systemd-analyze`.
pub fn systemd_analyze() -> bool {
    let missing = (!Path::new(SYSTEMD_ANALYZE).is_file())
        .then(|| format!("systemd-analyze ({SYSTEMD_ANALYZE})"));
    require(
        Prereq::Systemd,
        missing,
        "sudo apt-get update && sudo apt-get install -y systemd",
    )
}

/// The directory of the pinned harness CLIs.
pub const HARNESS_CLIS: &str = "testdata/harness-clis";

/// The `node_modules/.bin` holding `claude`, `codex` and `opencode`, when installed.
pub fn harness_clis() -> Option<PathBuf> {
    let bin = repo_root().join(HARNESS_CLIS).join("node_modules/.bin");
    let missing = ["claude", "codex", "opencode"]
        .into_iter()
        .filter(|cli| !bin.join(cli).exists())
        .collect::<Vec<_>>();
    let why = if !node_runs() {
        Some("node is not installed".to_owned())
    } else if missing.is_empty() {
        None
    } else {
        Some(format!(
            "the harness CLIs {missing:?} are not installed in {HARNESS_CLIS}"
        ))
    };
    require(Prereq::HarnessClis, why, &npm_install_command(HARNESS_CLIS)).then_some(bin)
}
