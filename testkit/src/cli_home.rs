//! A throw-away `HOME` for one run of the real harness CLIs (Claude Code, codex, opencode), with
//! only the environment a fresh login would have and every switch that keeps them offline: the
//! README's setup lines and the harness CLI calls both start the CLIs this way, so what one test
//! learns about a CLI's environment the other gets too.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use crate::require;

/// `HOME` for a harness CLI run; its `proj/` is the working directory.
pub struct CliHome {
    dir: tempfile::TempDir,
    path_var: String,
}

impl CliHome {
    /// `extra_path` comes first on PATH, then the harness CLIs, then node, then the system's.
    /// `None` when the CLIs are missing and `LEO_TEST_SKIP` allows it.
    pub fn new(extra_path: Option<&Path>) -> Option<CliHome> {
        let clis = require::harness_clis()?;
        let node_dir = which("node").and_then(|p| p.parent().map(Path::to_path_buf));
        let mut dirs: Vec<PathBuf> = extra_path.into_iter().map(Path::to_path_buf).collect();
        dirs.push(clis);
        dirs.extend(node_dir);
        dirs.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        let path_var = std::env::join_paths(dirs)
            .expect("PATH")
            .to_string_lossy()
            .into_owned();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("proj")).expect("project dir");
        Some(CliHome { dir, path_var })
    }

    /// `HOME`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The `PATH` its commands get.
    pub fn path_var(&self) -> &str {
        &self.path_var
    }

    /// A command with only this home's environment, in `proj/`, stdin closed, killed on drop.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let home = self.path();
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .current_dir(home.join("proj"))
            .env("HOME", home)
            .env("PATH", &self.path_var)
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", std::env::temp_dir())
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            // Claude Code: no update check, no telemetry.
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_TELEMETRY", "1")
            // opencode: no self-update, no models list, no plugin install.
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }
}

/// The first `name` on this process's PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The records the scripted model server wrote to `path` (its `HARNESS_PROBE_OUT`), and
/// whether one of them says the model was given `text`.
pub fn model_was_given(path: &Path, text: &str) -> (bool, Vec<serde_json::Value>) {
    let saw: Vec<serde_json::Value> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let given = saw
        .iter()
        .any(|r| r["event"] == "model_saw" && r.to_string().contains(text));
    (given, saw)
}
