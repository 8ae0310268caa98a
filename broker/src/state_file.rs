//! `state/client-tools.json`: the name of every client tool ever registered.
//!
//! It exists so that things decided before any app connects can still name client tools: a
//! `deny_tools` entry is valid at boot, and a fallback-mode sidecar lists its two tools only
//! once some app has ever registered. It is written atomically, and a corrupt file stops the
//! broker at start rather than being silently replaced.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{BrokerError, Result};
use crate::home::write_atomic;

use leo_protocol::home::ClientToolsFile as File;

/// The remembered names and where they are kept.
#[derive(Debug)]
pub struct EverRegistered {
    path: PathBuf,
    names: BTreeSet<String>,
}

impl EverRegistered {
    /// Reads the file; a missing file is an empty set, a corrupt one an error.
    pub fn load(path: &Path) -> Result<EverRegistered> {
        let names = match std::fs::read(path) {
            Ok(bytes) => {
                let file: File = leo_protocol::envelope::parse_json(&bytes).map_err(|e| {
                    BrokerError::State {
                        path: path.to_path_buf(),
                        message: format!(
                            "corrupt ({e}); fix or remove it (deny_tools entries are checked against it)"
                        ),
                    }
                })?;
                if file.version != 1 {
                    return Err(BrokerError::State {
                        path: path.to_path_buf(),
                        message: format!("unknown version {}", file.version),
                    });
                }
                file.tools
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(BrokerError::io("read", path, e)),
        };
        Ok(EverRegistered {
            path: path.to_path_buf(),
            names,
        })
    }

    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Adds names; writes the file only when one is new.
    pub fn remember<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let mut added = false;
        for n in names {
            added |= self.names.insert(n.to_owned());
        }
        if added {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the file atomically.
    pub fn flush(&self) -> Result<()> {
        let file = File {
            version: 1,
            tools: self.names.clone(),
        };
        write_json(&self.path, &file)
    }
}

/// Writes `value` to the state file `path` as pretty JSON with a final newline, atomically
/// (`home::write_atomic`: mode 0600, renamed into place).
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| BrokerError::State {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client-tools.json");
        let mut e = EverRegistered::load(&path).unwrap();
        assert!(e.is_empty());
        e.remember(["b", "a"]).unwrap();
        let again = EverRegistered::load(&path).unwrap();
        assert_eq!(again.names().iter().collect::<Vec<_>>(), ["a", "b"]);
        std::fs::write(&path, b"{\"version\":1,\"tools\":[").unwrap();
        let err = EverRegistered::load(&path).unwrap_err().to_string();
        assert!(err.contains("corrupt"), "{err}");
    }
}
