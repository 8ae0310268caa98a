//! What the sidecar reads under `$LEO_HOME` (the layout itself is `leo_protocol::home`).
//!
//! The broker owns the home; the sidecar only reads the agent token (the
//! agent's own, `state/agents/<agent>.token`, when it has one), connects to the sidecar socket, and, while the broker is down, peeks at
//! `state/client-tools.json` and `config.yaml` so that what it lists matches what the broker
//! would have said.

use std::path::Path;

use crate::error::{Result, SidecarError};

pub use leo_protocol::home::Home;

/// The token for sessions of agent `name`, trimmed: its own when it has one, else the shared
/// agent token. A missing shared file means the broker never ran here.
pub fn read_agent_token(home: &Home, name: &str) -> Result<String> {
    match std::fs::read_to_string(home.own_agent_token(name)) {
        Ok(text) => Ok(text.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => read_trimmed(&home.agent_token()),
        Err(source) => Err(SidecarError::Read {
            path: home.own_agent_token(name),
            source,
        }),
    }
}

/// A token file named by `--token-file`, trimmed; missing is an error, not "not running".
pub fn read_token_at(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_owned())
        .map_err(|source| SidecarError::Read {
            path: path.to_path_buf(),
            source,
        })
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
