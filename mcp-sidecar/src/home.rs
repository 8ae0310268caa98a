//! The few paths under `$LEO_HOME` the sidecar reads.
//!
//! The broker owns the home and its layout (SPEC "Files"); the sidecar only reads the agent
//! token, connects to the sidecar socket, and, while the broker is down, peeks at
//! `state/client-tools.json` and `config.yaml` so that what it lists matches what the broker
//! would have said.

use std::path::{Path, PathBuf};

use crate::error::{Result, SidecarError};

/// `$LEO_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    pub fn new(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// `~/.leo`, or `./.leo` when there is no `HOME`.
    pub fn default_location() -> Home {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| ".".into());
        Home::new(PathBuf::from(home).join(".leo"))
    }

    pub fn socket(&self) -> PathBuf {
        self.root.join("run").join("sidecar.sock")
    }

    pub fn agent_token(&self) -> PathBuf {
        self.root.join("state").join("agent.token")
    }

    pub fn client_tools(&self) -> PathBuf {
        self.root.join("state").join("client-tools.json")
    }

    pub fn config(&self) -> PathBuf {
        self.root.join("config.yaml")
    }

    /// The agent token, trimmed. A missing file means the broker never ran here.
    pub fn read_agent_token(&self) -> Result<String> {
        read_trimmed(&self.agent_token())
    }
}

fn read_trimmed(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SidecarError::NotRunning),
        Err(source) => Err(SidecarError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}
