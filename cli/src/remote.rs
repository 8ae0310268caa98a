//! `leo remote add|use|list|remove` and `leo --remote NAME`: brokers on other hosts saved by
//! name, so that their URL, token and CA need not be set on every command (as `docker context`
//! and `gh auth` keep theirs).
//!
//! Each is a directory `$LEO_HOME/remotes/NAME/` (0700) of plain files: `url`, `token` (0600, a
//! copy of the token file given, so that the saved remote works after that file moves) and
//! `ca.pem` (a copy of `--ca`, if given); `remotes/current` names the one in use. Plain files,
//! not a format of their own: each is read as the token files and CA files are.
//!
//! Which broker a command that speaks the HTTP API talks to, first match wins: `--url` on the
//! command line; `--remote NAME`; `LEO_URL`; the remote in use; the local `run/leo.sock`.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use leo_broker::error::BrokerError;
use leo_broker::home::{Home, ensure_private_dir, write_atomic, write_secret_new};

use crate::commands::api::Remote;

#[derive(Subcommand)]
pub enum RemoteCommand {
    /// Save the broker at URL as NAME, with the token of --token-file and the CA of --ca.
    Add {
        #[arg(value_parser = parse_name)]
        name: String,
        /// The broker's TCP listener: `https://HOST:PORT`, or `http://`.
        url: String,
        /// A 0600 file holding the token to present (copied into the saved remote).
        #[arg(long, value_name = "PATH")]
        token_file: PathBuf,
        /// The PEM file of the CA to trust for `https://` besides the system's (copied).
        #[arg(long, value_name = "PATH")]
        ca: Option<PathBuf>,
    },
    /// Send status, requests, audit, cancel, tools and webhook to NAME from now on
    /// (`--local`: to the broker of this LEO_HOME again).
    Use {
        #[arg(value_parser = parse_name, required_unless_present = "local")]
        name: Option<String>,
        #[arg(long, conflicts_with = "name")]
        local: bool,
    },
    /// List the saved remotes; `*` marks the one in use.
    List,
    /// Forget a saved remote (its copied token and CA with it).
    Remove {
        #[arg(value_parser = parse_name)]
        name: String,
    },
}

/// A remote's name: the one name rule, and not hidden (`.`, `..`).
fn parse_name(text: &str) -> Result<String, String> {
    if leo_protocol::names::is_name(text) && !text.starts_with('.') {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "remote name {text:?} must be 1 to 64 of [A-Za-z0-9_.-], not starting with ."
        ))
    }
}

/// Runs one `leo remote` command; what it says goes to stdout.
pub fn run(home: &Home, command: &RemoteCommand) -> Result<String, BrokerError> {
    match command {
        RemoteCommand::Add {
            name,
            url,
            token_file,
            ca,
        } => add(home, name, url, token_file, ca.as_deref()),
        RemoteCommand::Use { name, .. } => use_(home, name.as_deref()),
        RemoteCommand::List => list(home),
        RemoteCommand::Remove { name } => remove(home, name),
    }
}

fn dir(home: &Home, name: &str) -> PathBuf {
    home.remotes().join(name)
}

fn current_file(home: &Home) -> PathBuf {
    home.remotes().join("current")
}

fn add(
    home: &Home,
    name: &str,
    url: &str,
    token_file: &Path,
    ca: Option<&Path>,
) -> Result<String, BrokerError> {
    let endpoint =
        leo_app::Endpoint::from_url(url).map_err(|e| BrokerError::Usage(e.to_string()))?;
    let token = leo_broker::read_token_file(token_file)?;
    if let Some(ca) = ca {
        leo_protocol::tls::Connector::new(Some(ca))
            .map_err(|e| BrokerError::Usage(leo_protocol::chain::error_chain(&e)))?;
    }
    let at = dir(home, name);
    if at.exists() {
        return Err(BrokerError::Usage(format!(
            "a remote named {name:?} is saved already; remove it first with leo remote remove {name}"
        )));
    }
    ensure_private_dir(&home.remotes())?;
    ensure_private_dir(&at)?;
    write_secret_new(&at.join("token"), &format!("{token}\n"))?;
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| BrokerError::io("read", ca, e))?;
        write_atomic(&at.join("ca.pem"), &pem)?;
    }
    // Last: a remote is saved once its url is.
    write_atomic(&at.join("url"), format!("{endpoint}\n").as_bytes())?;
    Ok(format!(
        "Saved remote {name:?}: {endpoint}. Use it with leo --remote {name} status, or for every \
         command from now on with leo remote use {name}.\n"
    ))
}

fn use_(home: &Home, name: Option<&str>) -> Result<String, BrokerError> {
    let current = current_file(home);
    let Some(name) = name else {
        match std::fs::remove_file(&current) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(BrokerError::io("remove", &current, e));
            }
            _ => {}
        }
        return Ok(format!(
            "Commands talk to the broker of {} again.\n",
            home.root.display()
        ));
    };
    let remote = load(home, name)?;
    write_atomic(&current, format!("{name}\n").as_bytes())?;
    Ok(format!(
        "Commands talk to remote {name:?} ({}) from now on; leo remote use --local goes back.\n",
        remote.endpoint
    ))
}

/// The saved remotes' names, sorted.
fn names(home: &Home) -> Result<Vec<String>, BrokerError> {
    let mut names: Vec<String> = match std::fs::read_dir(home.remotes()) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.path().join("url").is_file())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(BrokerError::io("read", home.remotes(), e)),
    };
    names.sort();
    Ok(names)
}

fn list(home: &Home) -> Result<String, BrokerError> {
    let names = names(home)?;
    if names.is_empty() {
        return Ok(
            "no saved remote (save one with: leo remote add NAME URL --token-file PATH \
                   [--ca PATH])\n"
                .into(),
        );
    }
    let current = current(home)?;
    let mut out = String::new();
    for name in names {
        let mark = if current.as_deref() == Some(name.as_str()) {
            '*'
        } else {
            ' '
        };
        let url = read_text(&dir(home, &name).join("url"))?;
        let ca = if dir(home, &name).join("ca.pem").exists() {
            "  (own CA)"
        } else {
            ""
        };
        out.push_str(&format!("{mark} {name}  {url}{ca}\n"));
    }
    Ok(out)
}

fn remove(home: &Home, name: &str) -> Result<String, BrokerError> {
    let at = dir(home, name);
    if !at.exists() {
        return Err(BrokerError::Usage(format!(
            "no remote named {name:?} is saved"
        )));
    }
    std::fs::remove_dir_all(&at).map_err(|e| BrokerError::io("remove", &at, e))?;
    let mut out = format!("Removed remote {name:?}.\n");
    if current(home)?.as_deref() == Some(name) {
        use_(home, None)?;
        out.push_str("It was in use: commands talk to the local broker again.\n");
    }
    Ok(out)
}

fn read_text(path: &Path) -> Result<String, BrokerError> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_owned())
        .map_err(|e| BrokerError::io("read", path, e))
}

/// The remote in use (`leo remote use`), if any.
pub fn current(home: &Home) -> Result<Option<String>, BrokerError> {
    match std::fs::read_to_string(current_file(home)) {
        Ok(name) => Ok(Some(name.trim().to_owned()).filter(|n| !n.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(BrokerError::io("read", current_file(home), e)),
    }
}

/// The saved remote `name`, as the commands use it.
pub fn load(home: &Home, name: &str) -> Result<Remote, BrokerError> {
    let at = dir(home, name);
    if parse_name(name).is_err() || !at.join("url").is_file() {
        return Err(BrokerError::Usage(format!(
            "no remote named {name:?} is saved (leo remote list shows them)"
        )));
    }
    let url = read_text(&at.join("url"))?;
    let endpoint = leo_app::Endpoint::from_url(&url)
        .map_err(|e| BrokerError::Usage(format!("{}: {e}", at.join("url").display())))?;
    let token = leo_broker::read_token_file(&at.join("token"))?;
    let ca = Some(at.join("ca.pem")).filter(|p| p.is_file());
    Ok(Remote {
        endpoint,
        token,
        ca,
    })
}
