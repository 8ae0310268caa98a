//! The operator's commands that change `$LEO_HOME` while the broker may be running:
//! `leo client add|list|rm` (API clients) and `leo device pair|list|rm`.
//!
//! A running broker follows the token files and `api_clients` (`leo_broker::tokens`): a token
//! made here works for its first request, and `rm` revokes it within a second, without a
//! restart. `client add` also warns when the current `web:` settings would refuse a client in
//! a container.
//!
//! With a PostgreSQL store the tokens are the cluster's instead, and `crate::cluster` changes
//! them in the database, where every running instance follows them within seconds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::Subcommand;
use leo_broker::cluster::tokens::Kind;
use leo_broker::config::Config;
use leo_broker::error::{BrokerError, Result};
use leo_broker::home::{Home, write_atomic, write_secret_new};
use leo_broker::new_token as generate;

use crate::config_edit;

#[derive(Subcommand)]
pub enum ClientCommand {
    /// Create a client and its token, allowed to message the given targets (globs allowed).
    Add {
        name: String,
        /// Targets, comma-separated or repeated: `rocket`, `scout-*`.
        #[arg(long = "can-message", required = true, value_delimiter = ',')]
        can_message: Vec<String>,
    },
    /// List clients, their targets, and whether their token file exists.
    List,
    /// Remove a client and its token (a running broker refuses it within a second; with a
    /// PostgreSQL store, every instance within seconds).
    Rm { name: String },
}

#[derive(Subcommand)]
pub enum DeviceCommand {
    /// Create a token for a device.
    Pair { name: String },
    /// List paired devices.
    List,
    /// Remove a device's token (a running broker refuses it within a second; with a
    /// PostgreSQL store, every instance within seconds).
    Rm { name: String },
}

/// Runs one `leo client` command.
pub fn client(home: &Home, command: &ClientCommand) -> Result<Report> {
    if let Some(cluster) = crate::cluster::of(home)? {
        return match command {
            ClientCommand::Add { name, can_message } => {
                let targets = checked_targets(name, can_message)?;
                crate::cluster::client_add(home, &cluster, name, &targets)
            }
            ClientCommand::List => crate::cluster::client_list(&cluster),
            ClientCommand::Rm { name } => {
                check_name("client", name)?;
                crate::cluster::client_rm(home, &cluster, name)
            }
        };
    }
    match command {
        ClientCommand::Add { name, can_message } => client_add(home, name, can_message),
        ClientCommand::List => client_list(home),
        ClientCommand::Rm { name } => client_rm(home, name),
    }
}

/// Runs one `leo device` command.
pub fn device(home: &Home, command: &DeviceCommand) -> Result<Report> {
    if let Some(cluster) = crate::cluster::of(home)? {
        return match command {
            DeviceCommand::Pair { name } => {
                check_name("device", name)?;
                crate::cluster::device_pair(home, &cluster, name)
            }
            DeviceCommand::List => crate::cluster::names(&cluster, Kind::Device, NO_DEVICES),
            DeviceCommand::Rm { name } => {
                check_name("device", name)?;
                crate::cluster::device_rm(home, &cluster, name)
            }
        };
    }
    match command {
        DeviceCommand::Pair { name } => device_pair(home, name),
        DeviceCommand::List => device_list(home),
        DeviceCommand::Rm { name } => device_rm(home, name),
    }
}

/// What a command tells the user, written to stdout by `main`.
pub type Report = String;

const LIVE: &str = "A running broker accepts it at once, without a restart.";
const REVOKED: &str = "A running broker refuses its token within a second.";

fn check_name(kind: &str, name: &str) -> Result<()> {
    if leo_protocol::names::is_name(name) {
        Ok(())
    } else {
        Err(BrokerError::Usage(format!(
            "{kind} name {name:?} {}",
            leo_protocol::names::NameError
        )))
    }
}

/// The text of `config.yaml` ("" when absent), checked first: the edit must start from, and
/// leave, a config the broker accepts.
fn load_text(home: &Home) -> Result<String> {
    let path = home.config();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(BrokerError::io("read", &path, e)),
    };
    Config::parse(&text).map_err(|message| BrokerError::Config {
        path: path.clone(),
        message,
    })?;
    Ok(text)
}

/// Writes the edited text (already checked by `config_edit`) in one atomic step.
fn save_text(home: &Home, text: &str) -> Result<()> {
    write_atomic(&home.config(), text.as_bytes())
}

/// A refused edit: nothing was written, and the message says why.
fn edit_refused(home: &Home, message: String) -> BrokerError {
    BrokerError::Config {
        path: home.config(),
        message,
    }
}

/// The client's name and `--can-message` targets, checked: at least one, none empty.
fn checked_targets(name: &str, targets: &[String]) -> Result<Vec<String>> {
    check_name("client", name)?;
    let targets: Vec<String> = targets
        .iter()
        .flat_map(|t| t.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if targets.is_empty() {
        return Err(BrokerError::Usage(
            "--can-message needs at least one target: an empty list denies everything".into(),
        ));
    }
    Ok(targets)
}

/// `leo client add NAME --can-message T[,T…]`.
fn client_add(home: &Home, name: &str, targets: &[String]) -> Result<Report> {
    let targets = checked_targets(name, targets)?;
    leo_broker::home::prepare(home)?;
    let text = load_text(home)?;
    let config = Config::parse(&text).unwrap_or_default();
    let token_path = home.client_token(name);
    if config.api_clients.contains_key(name) || token_path.exists() {
        return Err(BrokerError::Usage(format!(
            "client {name:?} already exists; remove it first with leo client rm {name}"
        )));
    }
    // Only the new entry changes: the user's comments and layout stay as they are.
    let edited = config_edit::add_client(&text, name, &targets)
        .map_err(|message| edit_refused(home, message))?;
    let token = generate()?;
    write_secret_new(&token_path, &format!("{token}\n"))?;
    if let Err(e) = save_text(home, &edited) {
        let _ = std::fs::remove_file(&token_path);
        return Err(e);
    }
    let config = Config::load(&home.config())?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Added API client {name:?}, allowed to message: {}",
        targets.join(", ")
    );
    let _ = writeln!(out, "Token (shown once; also in {}):", token_path.display());
    let _ = writeln!(out, "{token}");
    let _ = writeln!(out, "{LIVE}");
    for line in reachability(&config) {
        let _ = writeln!(out, "Reminder: {line}");
    }
    audited(home, "client_add", name, Some(targets.join(",")), &mut out);
    Ok(out)
}

/// Records a `leo client` / `leo device` / `leo agent` change in the audit trail; a failure is
/// reported in `out`, the change stands.
pub(crate) fn audited(
    home: &Home,
    action: &str,
    name: &str,
    detail: Option<String>,
    out: &mut String,
) {
    if let Err(e) = leo_broker::record_local(home, action, name, detail) {
        let _ = writeln!(out, "Warning: not written to the audit trail: {e}");
    }
}

/// Why a client outside this host (a container, say) could not reach the broker now.
pub fn reachability(config: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    if !config.web.enabled {
        lines.push("web.enabled is false: no TCP listener, only the unix socket".to_owned());
        return lines;
    }
    if config.web.bind.is_loopback() {
        lines.push(format!(
            "web.bind is {}: only this host can connect; a container needs an address it can route to (e.g. web.bind: 0.0.0.0)",
            config.web.bind
        ));
    }
    if config.web.allowed_hosts.is_empty() {
        lines.push(format!(
            "web.allowed_hosts is empty: a client must send Host: localhost:{0} or 127.0.0.1:{0}; list the name it connects to (e.g. host.docker.internal)",
            config.web.port
        ));
    }
    lines
}

/// `leo client list`.
fn client_list(home: &Home) -> Result<Report> {
    let config = Config::load(&home.config())?;
    let mut out = String::new();
    if config.api_clients.is_empty() {
        out.push_str("no API clients (add one with: leo client add NAME --can-message TARGET)\n");
    }
    for (name, c) in &config.api_clients {
        let token = home.client_token(name).exists();
        let _ = writeln!(
            out,
            "{name}\tcan_message: {}\ttoken: {}",
            c.can_message.join(","),
            if token { "present" } else { "MISSING" }
        );
    }
    Ok(out)
}

/// `leo client rm NAME`.
fn client_rm(home: &Home, name: &str) -> Result<Report> {
    check_name("client", name)?;
    let text = load_text(home)?;
    let token_path = home.client_token(name);
    let edited =
        config_edit::remove_client(&text, name).map_err(|message| edit_refused(home, message))?;
    if edited.is_none() && Config::parse(&text).is_ok_and(|c| c.api_clients.contains_key(name)) {
        return Err(edit_refused(
            home,
            format!("cannot find the lines of api_clients.{name}; remove them by hand"),
        ));
    }
    if edited.is_none() && !token_path.exists() {
        return Err(BrokerError::Usage(format!("no client {name:?}")));
    }
    if let Some(edited) = &edited {
        save_text(home, edited)?;
    }
    if token_path.exists() {
        std::fs::remove_file(&token_path).map_err(|e| BrokerError::io("remove", &token_path, e))?;
    }
    let mut out = format!("Removed API client {name:?}.\n");
    let _ = writeln!(out, "{REVOKED}");
    audited(home, "client_rm", name, None, &mut out);
    Ok(out)
}

/// `leo device pair NAME`: a token for an app on another device.
fn device_pair(home: &Home, name: &str) -> Result<Report> {
    check_name("device", name)?;
    leo_broker::home::prepare(home)?;
    let path = home.devices().join(format!("{name}.token"));
    if path.exists() {
        return Err(BrokerError::Usage(format!(
            "device {name:?} is already paired; remove it first with leo device rm {name}"
        )));
    }
    let token = generate()?;
    write_secret_new(&path, &format!("{token}\n"))?;
    let mut out = format!(
        "Paired device {name:?}. Token (shown once; also in {}):\n{token}\n{LIVE}\n",
        path.display()
    );
    audited(home, "device_pair", name, None, &mut out);
    Ok(out)
}

const NO_DEVICES: &str = "no paired devices (pair one with: leo device pair NAME)\n";

/// `leo device list`.
fn device_list(home: &Home) -> Result<Report> {
    let mut names: BTreeMap<String, ()> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(home.devices()) {
        for e in entries.flatten() {
            if let Some(n) = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".token"))
            {
                names.insert(n.to_owned(), ());
            }
        }
    }
    if names.is_empty() {
        return Ok(NO_DEVICES.into());
    }
    Ok(names.keys().map(|n| format!("{n}\n")).collect())
}

/// `leo device rm NAME`.
fn device_rm(home: &Home, name: &str) -> Result<Report> {
    check_name("device", name)?;
    let path = home.devices().join(format!("{name}.token"));
    if !path.exists() {
        return Err(BrokerError::Usage(format!("no paired device {name:?}")));
    }
    std::fs::remove_file(&path).map_err(|e| BrokerError::io("remove", &path, e))?;
    let mut out = format!("Removed device {name:?}. {REVOKED}\n");
    audited(home, "device_rm", name, None, &mut out);
    Ok(out)
}
