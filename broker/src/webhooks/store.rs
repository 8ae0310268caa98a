//! `state/webhooks.json`: the webhook providers, kept across restarts until removed.
//!
//! They are operator configuration, like the API clients' and devices' tokens, not live state:
//! each holds a signing secret the app was given once, and a `client_id` the app answers with,
//! so a restart must bring back the same ones. The file is therefore its own, written
//! atomically with mode 0600 (it holds secrets) on every change, and read at start; a corrupt
//! file, or one others can read, stops the broker rather than being replaced.
//!
//! With a PostgreSQL store they are the cluster's instead, in the database's table `webhooks`
//! (one row each, its body the file's entry), read by whichever instance takes the lead, so a
//! takeover delivers to the same webhooks with the same secrets. A change is written before
//! the route answers, as the file is, one row added or removed, by the leader only: the write
//! is fenced (`Database::fenced`), so a leader deposed meanwhile changes nothing, and it runs
//! on the database's runtime, the route only awaiting it. A home's own `state/webhooks.json`
//! is not read then; webhooks it holds that the database lacks are named in the log, to be
//! added again.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use leo_protocol::tool::ToolDef;
use serde::{Deserialize, Serialize};

use tracing::warn;

use crate::error::{BrokerError, Result};
use crate::store::postgres::{Database, Fenced, PgError};

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
    /// An approver's webhook (`POST /api/v1/approvals/webhooks`): sent the approval requests
    /// its owner may decide; no group, no tools, no `client_id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approvals: bool,
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

/// Where the webhooks are kept, and what it held when read.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    /// `store.url`: the cluster's table instead of the file.
    database: Option<Database>,
}

/// One change of the webhooks.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    Added(&'a Stored),
    Removed(&'a str),
}

impl Store {
    /// Reads the file: missing is none; corrupt, of an unknown version or readable by others
    /// is an error that names the file.
    pub fn load(path: &Path) -> Result<(Store, Vec<Stored>)> {
        let store = Store {
            path: path.to_path_buf(),
            database: None,
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

    /// The cluster's webhooks, in `db`; `path` (this home's file) is only read to name in
    /// the log the webhooks it holds that the database lacks.
    pub async fn load_cluster(db: &Database, path: &Path) -> Result<(Store, Vec<Stored>)> {
        let rows = db
            .run(|client| async move {
                let rows = client
                    .query("SELECT name, body FROM webhooks ORDER BY name", &[])
                    .await
                    .map_err(PgError::doing("read the webhooks"))?;
                Ok(rows
                    .iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                    .collect::<Vec<_>>())
            })
            .await?;
        let mut stored = Vec::with_capacity(rows.len());
        for (name, body) in rows {
            let hook: Stored = leo_protocol::envelope::parse_json(body.as_bytes())
                .map_err(|e| PgError::Unreadable(format!("webhook {name}: {e}")))?;
            stored.push(hook);
        }
        if let Ok((_, local)) = Store::load(path) {
            let missing: Vec<&str> = local
                .iter()
                .filter(|l| !stored.iter().any(|s| s.client_id == l.client_id))
                .map(|l| l.name.as_str())
                .collect();
            if !missing.is_empty() {
                warn!(
                    webhooks = ?missing,
                    file = %path.display(),
                    "webhooks of this home's file are not the cluster's and are not served; add \
                     them again with leo webhook add"
                );
            }
        }
        let store = Store {
            path: path.to_path_buf(),
            database: Some(db.clone()),
        };
        Ok((store, stored))
    }

    /// Keeps `change`, after which the webhooks are `all`: the file rewritten atomically with
    /// mode 0600, or the one row of the cluster's table added or removed, fenced.
    pub async fn save(&self, change: Change<'_>, all: &[Stored]) -> Result<()> {
        let Some(db) = &self.database else {
            let file = File {
                version: 1,
                webhooks: all.to_vec(),
            };
            return crate::state_file::write_json(&self.path, &file);
        };
        match change {
            Change::Added(hook) => {
                let body = serde_json::to_string(hook).map_err(|e| BrokerError::State {
                    path: self.path.clone(),
                    message: format!("cannot write webhook {}: {e}", hook.name),
                })?;
                let name = hook.name.clone();
                db.fenced(move |tx| Box::pin(async move { insert(tx, &name, &body).await }))
                    .await?;
            }
            Change::Removed(name) => {
                let name = name.to_owned();
                db.fenced(move |tx| Box::pin(async move { delete(tx, &name).await }))
                    .await?;
            }
        }
        Ok(())
    }
}

/// The one row of the cluster's webhook `name`, added (a leader's write, fenced).
async fn insert(tx: &Fenced<'_>, name: &str, body: &str) -> std::result::Result<(), PgError> {
    tx.execute(
        "INSERT INTO webhooks (name, body) VALUES ($1, $2)",
        &[&name, &body],
    )
    .await
    .map(drop)
    .map_err(PgError::doing("add the webhook"))
}

/// The one row of the cluster's webhook `name`, removed (a leader's write, fenced).
async fn delete(tx: &Fenced<'_>, name: &str) -> std::result::Result<(), PgError> {
    tx.execute("DELETE FROM webhooks WHERE name = $1", &[&name])
        .await
        .map(drop)
        .map_err(PgError::doing("remove the webhook"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trips_privately_and_refuses_corruption() {
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
            approvals: false,
        };
        store
            .save(Change::Added(&w), std::slice::from_ref(&w))
            .await
            .unwrap();
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
