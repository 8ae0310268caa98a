//! The `$LEO_HOME` layout, and creating its directories and secret files with safe modes.
//!
//! Every path the broker touches is named here, so the layout (docs/home.md) has one source.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{BrokerError, Result};

/// The files and folders under `$LEO_HOME`.
#[derive(Debug, Clone)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    /// `$LEO_HOME`, else `~/.leo`.
    pub fn from_env() -> Home {
        let root = std::env::var_os("LEO_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
                PathBuf::from(home).join(".leo")
            });
        Home { root }
    }

    pub fn new(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    pub fn config(&self) -> PathBuf {
        self.root.join("config.yaml")
    }
    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn operator_token(&self) -> PathBuf {
        self.state().join("operator.token")
    }
    pub fn agent_token(&self) -> PathBuf {
        self.state().join("agent.token")
    }
    pub fn devices(&self) -> PathBuf {
        self.state().join("devices")
    }
    pub fn clients(&self) -> PathBuf {
        self.state().join("clients")
    }
    /// Per-agent tokens, `NAME.token` (`leo agent add`).
    pub fn agents(&self) -> PathBuf {
        self.state().join("agents")
    }
    /// The token of agent `name` alone, whether or not it exists.
    pub fn own_agent_token(&self, name: &str) -> PathBuf {
        self.agents().join(format!("{name}.token"))
    }
    pub fn client_tools(&self) -> PathBuf {
        self.state().join("client-tools.json")
    }
    pub fn api_socket(&self) -> PathBuf {
        self.run().join("leo.sock")
    }
    pub fn sidecar_socket(&self) -> PathBuf {
        self.run().join("sidecar.sock")
    }

    /// Creates `state/`, `state/devices/`, `state/clients/`, `state/agents/` and `run/`, all
    /// 0700.
    pub fn prepare(&self) -> Result<()> {
        for dir in [
            self.root.clone(),
            self.state(),
            self.devices(),
            self.clients(),
            self.agents(),
            self.run(),
        ] {
            ensure_private_dir(&dir)?;
        }
        Ok(())
    }
}

/// Creates `dir` with mode 0700 if missing, and tightens `run/`-style dirs that exist.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| BrokerError::io("create directory", dir, e))?;
    }
    let meta = fs::metadata(dir).map_err(|e| BrokerError::io("read", dir, e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| BrokerError::io("set permissions of", dir, e))?;
    }
    Ok(())
}

/// Writes `contents` to a new file created with mode 0600; fails if it exists.
pub fn write_secret_new(path: &Path, contents: &str) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| BrokerError::io("create", path, e))?;
    f.write_all(contents.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| BrokerError::io("write", path, e))
}

/// Writes `bytes` to `path` atomically: a temp file beside it, fsync, rename, fsync the dir.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| BrokerError::io("create", &tmp, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| BrokerError::io("write", &tmp, e))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| BrokerError::io("rename into", path, e))?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
