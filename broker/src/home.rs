//! The `$LEO_HOME` layout, and creating its directories and secret files with safe modes.
//!
//! The paths themselves are `leo_protocol::home`, shared with the sidecar and the SDK.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::{BrokerError, Result};

pub mod lock;

pub use leo_protocol::home::Home;
pub use lock::{Holder, HomeLock, holder};

/// Creates `state/`, `state/devices/`, `state/clients/`, `state/agents/` and `run/`, all 0700.
pub fn prepare(home: &Home) -> Result<()> {
    for dir in [
        home.root.clone(),
        home.state(),
        home.devices(),
        home.clients(),
        home.agents(),
        home.run(),
    ] {
        ensure_private_dir(&dir)?;
    }
    Ok(())
}

/// The broker's first step in its home: creates `run/` (0700) and locks the home for this
/// process (`lock`), before anything else there is read or opened.
pub fn lock(home: &Home) -> Result<HomeLock> {
    ensure_private_dir(&home.root)?;
    ensure_private_dir(&home.run())?;
    HomeLock::acquire(home)
}

/// The id of `home`'s instance on a PostgreSQL store: `i_` and the first 16 characters of
/// `state/instance-id` (made at its first use, kept across restarts). The store's lease and
/// the history's and audit trail's rows name the instance by it.
pub fn instance_id(home: &Home) -> Result<String> {
    let value = crate::tokens::load_or_create(&home.instance_id())?;
    Ok(format!("i_{}", &value[..value.len().min(16)]))
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
