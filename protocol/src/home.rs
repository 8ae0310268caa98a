//! The `$LEO_HOME` layout: where every file and socket of a Leo installation lives.
//!
//! The broker creates the home, the sidecar reads its agent token and socket, and an app finds
//! the API socket and its token there; each of them used to spell the paths out on its own.
//! Here they are named once (docs/home.md describes them), as paths only: creating, reading
//! and securing the files is the business of the part that does it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The files and folders under `$LEO_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    pub fn new(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// `$LEO_HOME`, else `~/.leo`.
    pub fn from_env() -> Home {
        match std::env::var_os("LEO_HOME").filter(|v| !v.is_empty()) {
            Some(root) => Home::new(root),
            None => Home::default_location(),
        }
    }

    /// `~/.leo`, or `./.leo` when there is no `HOME`.
    pub fn default_location() -> Home {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| ".".into());
        Home::new(PathBuf::from(home).join(".leo"))
    }

    pub fn config(&self) -> PathBuf {
        self.root.join("config.yaml")
    }
    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }
    /// The live state (calls, claims, unread messages): `state/leo.db`.
    pub fn database(&self) -> PathBuf {
        self.state().join("leo.db")
    }
    /// This instance's id, made at its first start on a PostgreSQL store: `state/instance-id`.
    pub fn instance_id(&self) -> PathBuf {
        self.state().join("instance-id")
    }
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
    /// The saved brokers on other hosts (`leo remote add`): `remotes/NAME/`.
    pub fn remotes(&self) -> PathBuf {
        self.root.join("remotes")
    }
    pub fn operator_token(&self) -> PathBuf {
        self.state().join("operator.token")
    }
    /// The token every agent session may present when it has none of its own.
    pub fn agent_token(&self) -> PathBuf {
        self.state().join("agent.token")
    }
    /// Paired devices' tokens, `NAME.token` (`leo device pair`).
    pub fn devices(&self) -> PathBuf {
        self.state().join("devices")
    }
    /// The token of paired device `name`, whether or not it exists.
    pub fn device_token(&self, name: &str) -> PathBuf {
        self.devices().join(format!("{name}.token"))
    }
    /// API clients' tokens, `NAME.token` (`leo client add`).
    pub fn clients(&self) -> PathBuf {
        self.state().join("clients")
    }
    /// The token of API client `name`, whether or not it exists.
    pub fn client_token(&self, name: &str) -> PathBuf {
        self.clients().join(format!("{name}.token"))
    }
    /// Per-agent tokens, `NAME.token` (`leo agent add`).
    pub fn agents(&self) -> PathBuf {
        self.state().join("agents")
    }
    /// The token of agent `name` alone, whether or not it exists.
    pub fn own_agent_token(&self, name: &str) -> PathBuf {
        self.agents().join(format!("{name}.token"))
    }
    /// The mode recorded with agent `name`'s own token (`leo agent add NAME --mode`), whether
    /// or not it exists.
    pub fn own_agent_mode(&self, name: &str) -> PathBuf {
        self.agents().join(format!("{name}.mode"))
    }
    /// The registered groups the broker keeps across restarts.
    pub fn client_tools(&self) -> PathBuf {
        self.state().join("client-tools.json")
    }
    /// The history of ended calls and the audit trail (SQLite).
    pub fn history_db(&self) -> PathBuf {
        self.state().join("history.db")
    }

    /// The webhook providers (`leo webhook add`), with their signing secrets.
    pub fn webhooks(&self) -> PathBuf {
        self.state().join("webhooks.json")
    }
    /// `leo tls init`'s local CA and the server certificate it issues.
    pub fn tls(&self) -> PathBuf {
        self.root.join("tls")
    }
    /// The local CA's certificate: the file clients trust (`LEO_CA_FILE`).
    pub fn tls_ca(&self) -> PathBuf {
        self.tls().join("ca.pem")
    }
    /// The local CA's private key.
    pub fn tls_ca_key(&self) -> PathBuf {
        self.tls().join("ca.key")
    }
    /// The server certificate (its chain: itself, then the CA), for `web.tls.cert`.
    pub fn tls_cert(&self) -> PathBuf {
        self.tls().join("server.pem")
    }
    /// The server certificate's private key, for `web.tls.key`.
    pub fn tls_key(&self) -> PathBuf {
        self.tls().join("server.key")
    }
    /// The HTTP API on a unix socket.
    pub fn api_socket(&self) -> PathBuf {
        self.run().join("leo.sock")
    }
    /// The sidecars' IPC socket.
    pub fn sidecar_socket(&self) -> PathBuf {
        self.run().join("sidecar.sock")
    }
    /// The running broker's lock (one broker per home), with its pid and what it listens on.
    pub fn broker_lock(&self) -> PathBuf {
        self.run().join("broker.lock")
    }
}

/// `state/client-tools.json`: every tool name an app ever registered here. The broker writes
/// it; the sidecar reads it while the broker is down, to tell "no app yet" from "broker down".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientToolsFile {
    /// Always 1.
    pub version: u32,
    pub tools: BTreeSet<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_documented_one() {
        let h = Home::new("/h");
        let rows = [
            (h.config(), "/h/config.yaml"),
            (h.operator_token(), "/h/state/operator.token"),
            (h.agent_token(), "/h/state/agent.token"),
            (h.device_token("phone"), "/h/state/devices/phone.token"),
            (h.client_token("ci"), "/h/state/clients/ci.token"),
            (h.own_agent_token("scout"), "/h/state/agents/scout.token"),
            (h.client_tools(), "/h/state/client-tools.json"),
            (h.history_db(), "/h/state/history.db"),
            (h.webhooks(), "/h/state/webhooks.json"),
            (h.database(), "/h/state/leo.db"),
            (h.api_socket(), "/h/run/leo.sock"),
            (h.tls_ca(), "/h/tls/ca.pem"),
            (h.tls_ca_key(), "/h/tls/ca.key"),
            (h.tls_cert(), "/h/tls/server.pem"),
            (h.tls_key(), "/h/tls/server.key"),
            (h.sidecar_socket(), "/h/run/sidecar.sock"),
            (h.broker_lock(), "/h/run/broker.lock"),
        ];
        for (path, want) in rows {
            assert_eq!(path, PathBuf::from(want));
        }
    }
}
