//! `leo client`, `leo device` and `leo agent` on a home whose store is PostgreSQL
//! (`store.url` or `LEO_STORE_URL`): the tokens are the cluster's, so the commands change the
//! database's row (through `leo_broker::cluster_tokens`) and every instance on it follows
//! within a few seconds, without a restart, revocation included.
//!
//! The database is the one place these tokens live: `add` shows the new token once and keeps
//! it there (an agent's own token also in this host's `state/agents/`, where `leo-mcp` looks;
//! every broker writes it on its host too), `list` reads the database, and `rm` removes the row
//! and whatever this host still kept of it from before the database (a token file, an
//! `api_clients` entry).

use std::fmt::Write as _;

use leo_broker::cluster::tokens::{Cluster, Entry, Kind};
use leo_broker::config::Config;
use leo_broker::error::{BrokerError, Result};
use leo_broker::home::{Home, write_atomic};

use crate::admin::{Report, audited};

/// What every change says about when it applies.
const EVERYWHERE: &str = "Every instance on the cluster's database applies this within a few \
                          seconds, without a restart.";

/// The cluster of `home`, when its store is PostgreSQL, with `home`'s folders made (the audit
/// trail of this host is written there even when no broker ever ran on it).
pub fn of(home: &Home) -> Result<Option<Cluster>> {
    let cluster = Cluster::of(home)?;
    if cluster.is_some() {
        leo_broker::home::prepare(home)?;
    }
    Ok(cluster)
}

fn entry(kind: Kind, name: &str, token: &str, can_message: Vec<String>) -> Entry {
    Entry {
        kind,
        name: name.to_owned(),
        token: token.to_owned(),
        can_message,
    }
}

/// Removes `path` if it exists.
fn remove_file(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(BrokerError::io("remove", path, e))
        }
        _ => Ok(()),
    }
}

/// `leo client add NAME --can-message T…`.
pub fn client_add(
    home: &Home,
    cluster: &Cluster,
    name: &str,
    targets: &[String],
) -> Result<Report> {
    let token = leo_broker::new_token()?;
    if !cluster.add(entry(Kind::Client, name, &token, targets.to_vec()))? {
        return Err(BrokerError::Usage(format!(
            "client {name:?} already exists in the cluster; remove it first with leo client rm {name}"
        )));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Added API client {name:?}, allowed to message: {}",
        targets.join(", ")
    );
    let _ = writeln!(
        out,
        "Token (shown once; kept in the cluster's database):\n{token}\n{EVERYWHERE}"
    );
    for line in crate::admin::reachability(&Config::load(&home.config())?) {
        let _ = writeln!(out, "Reminder: {line}");
    }
    audited(home, "client_add", name, Some(targets.join(",")), &mut out);
    Ok(out)
}

/// `leo client list`.
pub fn client_list(cluster: &Cluster) -> Result<Report> {
    let clients = cluster.list(Kind::Client)?;
    if clients.is_empty() {
        return Ok(
            "no API clients (add one with: leo client add NAME --can-message TARGET)\n".into(),
        );
    }
    Ok(clients
        .iter()
        .map(|c| {
            format!(
                "{}\tcan_message: {}\ttoken: present\n",
                c.name,
                c.can_message.join(",")
            )
        })
        .collect())
}

/// `leo client rm NAME`: the row, and this host's file and `api_clients` entry if any.
pub fn client_rm(home: &Home, cluster: &Cluster, name: &str) -> Result<Report> {
    let removed = cluster.remove(Kind::Client, name)?;
    let text = std::fs::read_to_string(home.config()).unwrap_or_default();
    let edited =
        crate::config_edit::remove_client(&text, name).map_err(|message| BrokerError::Config {
            path: home.config(),
            message,
        })?;
    let path = home.client_token(name);
    let local = edited.is_some() || path.exists();
    if !removed && !local {
        return Err(BrokerError::Usage(format!("no client {name:?}")));
    }
    if let Some(edited) = edited {
        write_atomic(&home.config(), edited.as_bytes())?;
    }
    remove_file(&path)?;
    let mut out = format!("Removed API client {name:?}; its token is revoked. {EVERYWHERE}\n");
    audited(home, "client_rm", name, None, &mut out);
    Ok(out)
}

/// `leo device pair NAME`.
pub fn device_pair(home: &Home, cluster: &Cluster, name: &str) -> Result<Report> {
    let token = leo_broker::new_token()?;
    if !cluster.add(entry(Kind::Device, name, &token, vec![]))? {
        return Err(BrokerError::Usage(format!(
            "device {name:?} is already paired in the cluster; remove it first with leo device rm {name}"
        )));
    }
    let mut out = format!(
        "Paired device {name:?}. Token (shown once; kept in the cluster's database):\n{token}\n{EVERYWHERE}\n"
    );
    audited(home, "device_pair", name, None, &mut out);
    Ok(out)
}

/// `leo device list`, or `leo agent list` (`kind`), one name a line; `empty` when none.
pub fn names(cluster: &Cluster, kind: Kind, empty: &str) -> Result<Report> {
    let names = cluster.list(kind)?;
    if names.is_empty() {
        return Ok(empty.to_owned());
    }
    Ok(names.iter().map(|e| format!("{}\n", e.name)).collect())
}

/// `leo device rm NAME`: the row, and this host's file if any.
pub fn device_rm(home: &Home, cluster: &Cluster, name: &str) -> Result<Report> {
    let removed = cluster.remove(Kind::Device, name)?;
    let path = home.devices().join(format!("{name}.token"));
    if !removed && !path.exists() {
        return Err(BrokerError::Usage(format!("no paired device {name:?}")));
    }
    remove_file(&path)?;
    let mut out = format!("Removed device {name:?}; its token is revoked. {EVERYWHERE}\n");
    audited(home, "device_rm", name, None, &mut out);
    Ok(out)
}

/// `leo agent add NAME`: the row, and this host's copy for `leo-mcp`; the token.
pub fn agent_add(home: &Home, cluster: &Cluster, name: &str) -> Result<String> {
    let token = leo_broker::new_token()?;
    if !cluster.add(entry(Kind::OwnAgent, name, &token, vec![]))? {
        return Err(BrokerError::Usage(format!(
            "agent {name:?} already has its own token in the cluster; remove it first with leo agent rm {name}"
        )));
    }
    // Atomic, not create-new: this host's broker may have written the copy already.
    write_atomic(&home.own_agent_token(name), format!("{token}\n").as_bytes())?;
    Ok(token)
}

/// `leo agent rm NAME`: the row, and this host's copy; false when neither existed.
pub fn agent_rm(home: &Home, cluster: &Cluster, name: &str) -> Result<bool> {
    let removed = cluster.remove(Kind::OwnAgent, name)?;
    let path = home.own_agent_token(name);
    let local = path.exists();
    remove_file(&path)?;
    Ok(removed || local)
}

/// The line `leo agent add|rm` adds on a cluster.
pub fn agent_note() -> String {
    format!("{EVERYWHERE}\n")
}

/// `leo cluster …`: what belongs to the cluster of a PostgreSQL store itself.
#[derive(clap::Subcommand)]
pub enum ClusterCommand {
    /// Replace the key the cluster's instances forward requests with. Every instance takes
    /// the new key up within seconds, without a stop; the old one is refused after the grace.
    RotateKey {
        /// Seconds the old key is still accepted while every instance takes the new one up.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(2..=86_400))]
        grace_s: u64,
    },
}

/// Runs a `leo cluster` command on `home`, whose store must be PostgreSQL.
pub fn run(home: &Home, command: &ClusterCommand) -> Result<Report> {
    let Some(cluster) = of(home)? else {
        return Err(BrokerError::Usage(
            "this home's store is SQLite (no store.url or LEO_STORE_URL): it has no cluster"
                .to_owned(),
        ));
    };
    match command {
        ClusterCommand::RotateKey { grace_s } => {
            if !cluster.rotate_key(std::time::Duration::from_secs(*grace_s))? {
                return Err(BrokerError::Usage(
                    "the cluster has no key yet: its first instance makes one when it leads"
                        .to_owned(),
                ));
            }
            let mut out = format!(
                "Replaced the cluster's key. Every instance forwards with the new one within a \
                 few seconds, without a restart; the old key is refused after {grace_s} s.\n"
            );
            audited(home, "cluster_rotate_key", "cluster", None, &mut out);
            Ok(out)
        }
    }
}
