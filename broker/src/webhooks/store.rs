//! `state/webhooks.json`: the webhook providers, kept across restarts until removed.
//!
//! They are operator configuration, like the API clients' and devices' tokens, not live state:
//! each holds a signing secret the app was given once, and a `client_id` the app answers with,
//! so a restart must bring back the same ones. The file is therefore its own, written
//! atomically with mode 0600 (it holds secrets) on every change, and read at start; a corrupt
//! file, or one others can read, stops the broker rather than being replaced.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use leo_protocol::tool::ToolDef;
use serde::{Deserialize, Serialize};

use crate::error::{BrokerError, Result};

/// One webhook provider as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stored {
    pub name: String,
    pub url: String,
    pub group: String,
    pub tools: Vec<ToolDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    pub client_id: String,
    /// `whsec_…`.
    pub secret: String,
    pub created_at: String,
    /// The principal that created it (`operator`, `device:NAME`): the one whose token may use
    /// its `client_id` on the claim and result routes, and remove it besides the operator. A
    /// file written before owners were kept has none: those webhooks are the operator's.
    #[serde(default = "operator")]
    pub owner: String,
}

fn operator() -> String {
    "operator".to_owned()
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// Always 1.
    version: u32,
    webhooks: Vec<Stored>,
}

/// The file and what it held when read.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
}

impl Store {
    /// Reads the file: missing is none; corrupt, of an unknown version or readable by others
    /// is an error that names the file.
    pub fn load(path: &Path) -> Result<(Store, Vec<Stored>)> {
        let store = Store {
            path: path.to_path_buf(),
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((store, Vec::new())),
            Err(e) => return Err(BrokerError::io("read", path, e)),
        };
        let meta = std::fs::metadata(path).map_err(|e| BrokerError::io("read", path, e))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(BrokerError::LoosePermissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        let state = |message: String| BrokerError::State {
            path: path.to_path_buf(),
            message,
        };
        let file: File = leo_protocol::envelope::parse_json(&bytes)
            .map_err(|e| state(format!("corrupt ({e}); fix or remove it")))?;
        if file.version != 1 {
            return Err(state(format!("unknown version {}", file.version)));
        }
        Ok((store, file.webhooks))
    }

    /// Writes every webhook, atomically, mode 0600.
    pub fn save(&self, webhooks: &[Stored]) -> Result<()> {
        let file = File {
            version: 1,
            webhooks: webhooks.to_vec(),
        };
        crate::state_file::write_json(&self.path, &file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_privately_and_refuses_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhooks.json");
        let (store, none) = Store::load(&path).unwrap();
        assert!(none.is_empty());
        let w = Stored {
            name: "ci".into(),
            url: "http://127.0.0.1:9/".into(),
            group: "ci".into(),
            tools: Vec::new(),
            agents: None,
            client_id: "c_1".into(),
            secret: "whsec_AAAA".into(),
            created_at: "t".into(),
            owner: "device:ipad".into(),
        };
        store.save(&[w]).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (_, back) = Store::load(&path).unwrap();
        assert_eq!(back[0].client_id, "c_1");
        assert_eq!(back[0].owner, "device:ipad");
        // A file from before owners were kept: its webhooks are the operator's.
        let old = std::fs::read_to_string(&path)
            .unwrap()
            .replace(",\"owner\":\"device:ipad\"", "")
            .replace(",\n      \"owner\": \"device:ipad\"", "");
        assert!(!old.contains("owner"), "{old}");
        std::fs::write(&path, old).unwrap();
        assert_eq!(Store::load(&path).unwrap().1[0].owner, "operator");
        std::fs::write(&path, b"{\"version\":1,\"webhooks\":[").unwrap();
        let err = Store::load(&path).unwrap_err().to_string();
        assert!(err.contains("corrupt"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Store::load(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }
}
