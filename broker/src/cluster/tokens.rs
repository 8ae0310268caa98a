//! Tokens that belong to the cluster: with a PostgreSQL store, every instance on the database
//! accepts the same tokens, read from the database's table `tokens`.
//!
//! Instances on one database serve one set of apps and agents (a standby takes over, or a
//! follower forwards to the leader), so a token must work on whichever instance answers, and a
//! revoked one must stop working on all of them. So with `store.url` the files of `$LEO_HOME`
//! are no longer where tokens are decided:
//!
//! - **At start** ([`prepare`], then [`Shared::join`] once the database answers) the broker
//!   takes the database's set; until then it accepts no token (it serves nothing either). The
//!   first instance on a new database (the table holds no operator token yet) fills it from
//!   its own files (operator, shared agent, devices, API clients with their `api_clients`
//!   scopes, agents' own), so a single-host setup that moves to PostgreSQL keeps its tokens;
//!   every later instance adopts the database's operator and agent tokens, rewriting its
//!   `state/operator.token` and `state/agent.token` (0600, atomically; logged once), so `leo`,
//!   `leo-mcp` and the SDKs on its host keep reading the files they always read. Devices and
//!   clients that only this host's files know are not accepted, and the log names them.
//! - **While it runs** ([`Shared::spawn_refresh`]) a thread of its own reads the table every
//!   [`POLL`] and, when it changed, swaps the new set into the one [`TokenBook`] the HTTP door,
//!   `/mcp` and the sidecar door read, and brings the host's files in step (the operator and
//!   agent tokens, and `state/agents/`, which `leo-mcp` reads). A poll is one small query off
//!   the broker's thread; a change made on any instance applies everywhere within about a
//!   second, revocation included. A database away keeps the last set in force.
//! - **`leo client`, `leo device` and `leo agent`** write the row ([`Cluster`]), on whichever
//!   host they run.
//!
//! With the SQLite store none of this runs: tokens are the files, read as before.

use std::path::Path;
use std::time::Duration;

use tracing::{info, warn};

use crate::config::Config;
use crate::error::{BrokerError, Result};
use crate::home::{Home, write_atomic};
pub use crate::store::postgres::tokens::{Entry, Kind};
use crate::store::postgres::{Database, PgError, tokens as sql};
use crate::tokens::{POLL, TokenBook, Tokens, load_or_create, read_token_file};

fn database_error(e: PgError) -> BrokerError {
    e.into()
}

/// What `leo doctor` says of the database connection at `url`: a warning when it reaches
/// another host without TLS on every connection (`sslmode` `disable`, or `prefer`, which falls
/// back to clear text), since the tokens, the cluster's key and every call's arguments and
/// results cross it; `None` when it is encrypted, local, or not a URL this reads.
pub fn clear_text_database(url: &str) -> Option<String> {
    use crate::store::postgres::tls;
    let (config, settings) = tls::parse(url).ok()?;
    (tls::beyond_loopback(&config) && !settings.mode.always_encrypts()).then(|| {
        format!(
            "the database ({}) is reached beyond this host with sslmode={}: the tokens, the \
             cluster's key and every call's arguments and results may cross the network in \
             clear",
            crate::store::postgres::describe(&config),
            settings.mode.as_str()
        )
    })
}

/// The cluster's tokens as the `leo` commands change them, on the database of `store.url`
/// (opened for the one command: a pool of its own, migrated at its first connection). The
/// operator's command is not a leader's decision, so its rows are not fenced: it works on
/// any host, whoever leads.
pub struct Cluster {
    db: Database,
}

impl Cluster {
    /// The cluster of `home`, when its store is PostgreSQL (`LEO_STORE_URL`, else `store.url`
    /// of its `config.yaml`); `None` for SQLite (files). Only `store:` is read, so a command
    /// that worked on a home whose config has an error elsewhere still does.
    pub fn of(home: &Home) -> Result<Option<Cluster>> {
        let store = crate::config::store_of(&home.config())?;
        let url = store.postgres_url(&home.config())?;
        url.map(|url| {
            Ok(Cluster {
                db: Database::open(&url)?,
            })
        })
        .transpose()
    }

    /// Adds `entry`; false when a token of its kind and name exists.
    pub fn add(&self, entry: Entry) -> Result<bool> {
        self.db
            .blocking(move |client| async move { sql::insert(&client, &entry).await })
            .map_err(database_error)
    }

    /// Removes the token of `kind` named `name`; false when there was none.
    pub fn remove(&self, kind: Kind, name: &str) -> Result<bool> {
        let name = name.to_owned();
        self.db
            .blocking(move |client| async move { sql::delete(&client, kind, &name).await })
            .map_err(database_error)
    }

    /// Replaces the cluster's key (`leo cluster rotate-key`) with a new random one; the old one
    /// is accepted for `grace` more. False when no instance has led yet.
    pub fn rotate_key(&self, grace: Duration) -> Result<bool> {
        let new = crate::tokens::generate()?;
        self.db
            .blocking(move |client| async move {
                crate::store::postgres::lease::rotate_key(&client, &new, grace).await
            })
            .map_err(database_error)
    }

    /// The tokens of `kind`, by name.
    pub fn list(&self, kind: Kind) -> Result<Vec<Entry>> {
        let all = self
            .db
            .blocking(|client| async move { sql::read(&client).await })
            .map_err(database_error)?;
        Ok(all.into_iter().filter(|e| e.kind == kind).collect())
    }
}

/// The cluster's tokens in a running broker: the book the doors read, and what the refresher
/// compares the database with.
pub(crate) struct Shared {
    db: Database,
    pub book: TokenBook,
    rows: Vec<Entry>,
    /// This home's tokens, which fill a new database.
    local: Vec<Entry>,
    /// Whether the database's set was taken ([`Shared::join`]).
    joined: bool,
}

/// The cluster's tokens at start: this home's files are read (the operator and agent tokens
/// made if missing), and the database's set is taken at once if it answers, so that the
/// host's files are the cluster's before the broker says it listens. A database that cannot
/// be reached does not stop the start: the book accepts nothing (the instance serves nothing
/// either) until [`Shared::join`] succeeds. One that answers with an error (a schema newer
/// than this broker; a role, password or database that is wrong, [`PgError::at_start`]) does.
pub(crate) fn prepare(home: &Home, config: &Config, db: &Database) -> Result<Shared> {
    let mut shared = Shared {
        db: db.clone(),
        book: TokenBook::live(Tokens::default()),
        rows: Vec::new(),
        local: local_entries(home, config)?,
        joined: false,
    };
    // At start nothing is served yet: waiting here for the database's thread holds nobody.
    let taken = shared.db.blocking(fill_and_read(shared.local.clone()));
    match taken
        .map(|taken| shared.adopt(home, taken))
        .map_err(PgError::at_start)
    {
        Err(e) if e.is_outage() => {
            warn!(error = %leo_protocol::chain::error_chain(&e), "cannot reach the database now; serving anyway, and joining the cluster once it answers");
            Ok(shared)
        }
        joined => joined.map(|()| shared).map_err(database_error),
    }
}

impl Shared {
    /// Whether the database's set was taken.
    pub(crate) fn joined(&self) -> bool {
        self.joined
    }

    /// Takes the cluster's tokens once the database answers: fills a new database from this
    /// home's files, or adopts the database's (see the module's doc). The database's work
    /// runs on its runtime; the host's files are written here, a few small files.
    pub(crate) async fn join(&mut self, home: &Home) -> std::result::Result<(), PgError> {
        let taken = self.db.run(fill_and_read(self.local.clone())).await?;
        self.adopt(home, taken);
        Ok(())
    }

    /// Takes `(filled, rows)` of [`fill_and_read`] into the book and the host's files.
    fn adopt(&mut self, home: &Home, (filled, rows): (bool, Vec<Entry>)) {
        if filled {
            info!(
                tokens = rows.len(),
                "this instance is the first on the database: the cluster's tokens are this home's"
            );
        }
        in_step(home, &rows);
        warn_local_only(&self.local, &rows);
        self.book.replace(Tokens::from_entries(&rows));
        self.rows = rows;
        self.joined = true;
    }
}

/// Fills a new database with `ours`, then reads the cluster's tokens: whether this instance
/// filled it, and the rows.
fn fill_and_read(
    ours: Vec<Entry>,
) -> impl FnOnce(
    crate::store::postgres::Object,
) -> futures_util::future::BoxFuture<
    'static,
    std::result::Result<(bool, Vec<Entry>), PgError>,
> {
    move |mut client| {
        Box::pin(async move {
            let filled = sql::fill(&mut client, &ours).await?;
            Ok((filled, sql::read(&client).await?))
        })
    }
}

/// The tokens of this home's files, as the first instance fills them: the operator and agent
/// tokens (made now if missing), paired devices, API clients of `api_clients` that have a
/// token file, and agents' own tokens that can be trusted.
fn local_entries(home: &Home, config: &Config) -> Result<Vec<Entry>> {
    let entry = |kind, name: &str, token, can_message| Entry {
        kind,
        name: name.to_owned(),
        token,
        can_message,
    };
    let mut out = vec![
        entry(
            Kind::Operator,
            "",
            load_or_create(&home.operator_token())?,
            vec![],
        ),
        entry(
            Kind::Agent,
            "",
            load_or_create(&home.agent_token())?,
            vec![],
        ),
    ];
    for (name, path) in token_files(&home.devices()) {
        out.push(entry(Kind::Device, &name, read_token_file(&path)?, vec![]));
    }
    for (name, client) in &config.api_clients {
        let path = home.client_token(name);
        if path.exists() {
            let targets = client.can_message.clone();
            out.push(entry(Kind::Client, name, read_token_file(&path)?, targets));
        }
    }
    for (name, path) in token_files(&home.agents()) {
        match read_token_file(&path) {
            Ok(token) if leo_protocol::names::is_name(&name) => {
                out.push(entry(Kind::OwnAgent, &name, token, vec![]));
            }
            Ok(_) => {}
            Err(e) => {
                warn!(agent = %name, error = %e, "an agent's own token is not written to the cluster's database")
            }
        }
    }
    Ok(out)
}

/// The `NAME.token` files of `dir`, by name.
fn token_files(dir: &Path) -> Vec<(String, std::path::PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".token")?
                .to_owned();
            Some((name, path))
        })
        .collect();
    files.sort();
    files
}

/// Says which devices and clients of this home's files the cluster does not accept.
fn warn_local_only(local: &[Entry], rows: &[Entry]) {
    let ignored: Vec<String> = local
        .iter()
        .filter(|e| matches!(e.kind, Kind::Device | Kind::Client))
        .filter(|e| {
            !rows
                .iter()
                .any(|r| r.kind == e.kind && r.name == e.name && r.token == e.token)
        })
        .map(|e| format!("{} {}", e.kind.as_str(), e.name))
        .collect();
    if !ignored.is_empty() {
        warn!(
            ignored = %ignored.join(", "),
            "these tokens of this home's files are not the cluster's, so no instance accepts \
             them; add them again with leo device pair / leo client add"
        );
    }
}

/// Brings this host's files in step with the cluster's `rows`: `state/operator.token`,
/// `state/agent.token` and `state/agents/NAME.token` (what `leo`, `leo-mcp` and the SDKs
/// read). A file that cannot be written is logged; the broker's own checks use `rows`.
fn in_step(home: &Home, rows: &[Entry]) {
    for (kind, path) in [
        (Kind::Operator, home.operator_token()),
        (Kind::Agent, home.agent_token()),
    ] {
        if let Some(row) = rows.iter().find(|e| e.kind == kind) {
            write_if_changed(&path, &row.token, "adopted the cluster's token");
        }
    }
    let own: Vec<&Entry> = rows.iter().filter(|e| e.kind == Kind::OwnAgent).collect();
    for row in &own {
        if leo_protocol::names::is_name(&row.name) {
            let path = home.own_agent_token(&row.name);
            write_if_changed(
                &path,
                &row.token,
                "wrote an agent's own token of the cluster",
            );
        }
    }
    for (name, path) in token_files(&home.agents()) {
        if !own.iter().any(|e| e.name == name) {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    info!(path = %path.display(), "removed an agent's own token the cluster no longer has")
                }
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "cannot remove a revoked agent token's file")
                }
            }
        }
    }
}

/// Writes `token` to `path` (0600, atomically) unless the file holds it already.
fn write_if_changed(path: &Path, token: &str, what: &str) {
    let held = std::fs::read_to_string(path).unwrap_or_default();
    if held.trim() == token {
        return;
    }
    match write_atomic(path, format!("{token}\n").as_bytes()) {
        Ok(()) => info!(path = %path.display(), "{what}"),
        Err(e) => warn!(path = %path.display(), error = %e, "cannot write a token of the cluster"),
    }
}

impl Shared {
    /// Reads the table every [`POLL`] on the database's runtime until `stop`, swapping a
    /// changed set into the book and the host's files.
    pub(crate) fn spawn_refresh(self, home: Home, stop: tokio_util::sync::CancellationToken) {
        let db = self.db.clone();
        db.spawn(self.refresh(home, stop));
    }

    async fn refresh(mut self, home: Home, stop: tokio_util::sync::CancellationToken) {
        let home = &home;
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(POLL) => {}
            }
            let read = async { sql::read(&self.db.client().await?).await }.await;
            match read {
                Ok(rows) => {
                    if failing {
                        info!("reading the cluster's tokens again");
                        failing = false;
                    }
                    if rows != self.rows {
                        self.book.replace(Tokens::from_entries(&rows));
                        in_step(home, &rows);
                        info!(
                            tokens = rows.len(),
                            "the cluster's tokens changed; in force now"
                        );
                        self.rows = rows;
                    }
                }
                Err(e) if !failing => {
                    failing = true;
                    warn!(
                        error = %leo_protocol::chain::error_chain(&e),
                        "cannot read the cluster's tokens; the last ones read stay in force"
                    );
                }
                Err(_) => {}
            }
        }
    }
}
