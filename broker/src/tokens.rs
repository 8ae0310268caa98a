//! Bearer tokens: created at first start, kept in 0600 files, compared in constant time.
//!
//! A token is 32 random bytes (256 bits) written as 64 hex characters. Lookup compares the
//! presented token against every known token with `subtle::ConstantTimeEq` and never returns
//! early, so timing tells an attacker neither which token nor how many leading bytes matched.
//!
//! The set is replaced whole in the [`TokenBook`] when the tokens change, so a token made or
//! removed while the broker runs applies without a restart. With a PostgreSQL store the set is
//! the cluster's (`cluster_tokens`), read again from the database every second; with files,
//! the paired devices and API clients are read again when their files or `config.yaml` change
//! ([`Files`]): a lookup that finds no token looks at once, and every lookup at most a second
//! after the last look, so `leo device pair` is in force for the app's first request and `leo
//! device rm` within a second, as `leo agent add` is (its file is read at each `hello`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use leo_protocol::names::AgentName;
use subtle::ConstantTimeEq;

use crate::error::{BrokerError, Result};
use crate::home::{Home, write_secret_new};

/// How often a book of tokens looks at its source again: this home's files, or the
/// cluster's table (`cluster::tokens`). A revoked token stops working within about this.
pub const POLL: Duration = Duration::from_secs(1);

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Operator,
    Device(String),
    Agent,
    /// An API client of `api_clients:`, scoped to messaging its targets.
    ApiClient(String),
}

/// Every token the broker accepts: loaded at start from the files, or (with a PostgreSQL
/// store) built from the cluster's database each time it changes (`cluster_tokens`).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(Vec<u8>, Principal)>,
    /// `can_message` of each API client (`api_clients:`, or the database's).
    scopes: BTreeMap<String, Vec<String>>,
    /// The agents' own tokens, when they come from the database; from files they are read at
    /// each `hello` instead (`agent_tokens`).
    own: Vec<(Vec<u8>, AgentName)>,
    /// The home whose files this set was read from (`Tokens::load`), which a book follows,
    /// and the files as `Tokens::load` found them just before reading them.
    home: Option<(Home, Stamp)>,
}

/// The token set the doors check, behind one handle. With files it is the set loaded at
/// start, read without a lock (a single-host broker pays nothing for the cluster); with a
/// PostgreSQL store it is swapped whole when the database's tokens change, and readers take a
/// read lock for the length of one lookup.
#[derive(Debug, Clone)]
pub struct TokenBook(Book);

#[derive(Debug, Clone)]
enum Book {
    Fixed(Arc<Tokens>),
    Live(Arc<RwLock<Arc<Tokens>>>),
    Files(Arc<Files>),
}

/// A set read from a home's files and read again when they change: the devices, the API
/// clients and `config.yaml`'s `api_clients`. The operator and shared agent tokens stay those
/// read at start (`AgentKeys` holds the agent token too).
#[derive(Debug)]
struct Files {
    home: Home,
    set: RwLock<Arc<Tokens>>,
    /// The files as they were when `set` was read.
    stamp: Mutex<Stamp>,
    /// When the files are next looked at by a lookup that found its token, in milliseconds
    /// since `epoch`.
    next_look: AtomicU64,
    epoch: Instant,
}

/// Each followed file's path, size, inode and modification time: a change of any is a change
/// of the set (`leo client add` replaces `config.yaml` by a rename, so its inode changes).
type Stamp = Vec<(PathBuf, u64, u64, Option<SystemTime>)>;

/// The followed files of `home` as they are now.
fn stamp(home: &Home) -> Stamp {
    let mut paths = vec![home.config()];
    for dir in [home.devices(), home.clients()] {
        if let Ok(entries) = fs::read_dir(&dir) {
            paths.extend(entries.flatten().map(|e| e.path()));
        }
    }
    paths.push(home.devices());
    paths.push(home.clients());
    let mut out: Stamp = paths
        .into_iter()
        .filter_map(|path| {
            let meta = fs::metadata(&path).ok()?;
            Some((path, meta.len(), meta.ino(), meta.modified().ok()))
        })
        .collect();
    out.sort();
    out
}

impl Files {
    fn current(&self) -> Arc<Tokens> {
        Arc::clone(&self.set.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Reads the set again if the files changed: at once when `now`, else when a second has
    /// passed since the last look.
    fn follow(&self, now: bool) {
        let at = self.now_ms();
        if !now && at < self.next_look.load(Ordering::Relaxed) {
            return;
        }
        let mut seen = self.stamp.lock().unwrap_or_else(PoisonError::into_inner);
        let poll = u64::try_from(POLL.as_millis()).unwrap_or(1000);
        self.next_look
            .store(at.saturating_add(poll), Ordering::Relaxed);
        // Looked at before the files are read: a change made meanwhile is seen next time.
        let now_stamp = stamp(&self.home);
        if now_stamp == *seen {
            return;
        }
        *seen = now_stamp;
        match self.current().reload(&self.home) {
            Ok(tokens) => {
                tracing::info!("the device and API client tokens changed; in force now");
                *self.set.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tokens);
            }
            Err(e) => tracing::warn!(
                error = %e,
                "the device and API client tokens changed but cannot be read; the ones read \
                 before stay in force"
            ),
        }
    }
}

impl TokenBook {
    /// The set `tokens`: followed as its files change when it was read from a home's files
    /// (`Tokens::load`), else a set that never changes.
    pub fn of_files(tokens: Tokens) -> TokenBook {
        match tokens.home.clone() {
            Some((home, seen)) => TokenBook(Book::Files(Arc::new(Files {
                stamp: Mutex::new(seen),
                home,
                set: RwLock::new(Arc::new(tokens)),
                next_look: AtomicU64::new(0),
                epoch: Instant::now(),
            }))),
            None => TokenBook(Book::Fixed(Arc::new(tokens))),
        }
    }

    /// A set that `replace` swaps (the cluster's).
    pub fn live(tokens: Tokens) -> TokenBook {
        TokenBook(Book::Live(Arc::new(RwLock::new(Arc::new(tokens)))))
    }

    /// Runs `f` on the current set.
    pub fn with<R>(&self, f: impl FnOnce(&Tokens) -> R) -> R {
        match &self.0 {
            Book::Fixed(tokens) => f(tokens),
            Book::Live(lock) => f(&lock.read().unwrap_or_else(PoisonError::into_inner)),
            Book::Files(files) => {
                files.follow(false);
                f(&files.current())
            }
        }
    }

    /// Puts `tokens` in place of the current set, for every reader's next lookup; a fixed
    /// book does not change.
    pub fn replace(&self, tokens: Tokens) {
        if let Book::Live(lock) = &self.0 {
            *lock.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tokens);
        }
    }

    /// `Tokens::lookup` on the current set; a token a set read from files does not know is
    /// looked for again once they have been read again, if they changed.
    pub fn lookup(&self, presented: &str) -> Option<Principal> {
        let found = self.with(|t| t.lookup(presented));
        match &self.0 {
            Book::Files(files) if found.is_none() => {
                files.follow(true);
                files.current().lookup(presented)
            }
            _ => found,
        }
    }

    /// Whether API client `name` may message `target`.
    pub fn may_message(&self, name: &str, target: &str) -> bool {
        self.with(|t| {
            let patterns = t.scopes.get(name).map(Vec::as_slice).unwrap_or_default();
            leo_protocol::glob::any_matches(patterns, target)
        })
    }
}

/// 32 random bytes as hex.
pub fn generate() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| BrokerError::State {
        path: "getrandom".into(),
        message: format!("no randomness for a token: {e}"),
    })?;
    Ok(hex(&bytes))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// A short random id with a prefix, such as `r_3f2a…` (96 bits).
pub fn random_id(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // Ids only need to be unique, not secret; fall back to the clock and a counter.
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        bytes[..8].copy_from_slice(&t.to_le_bytes());
        bytes[8..].copy_from_slice(&(N.fetch_add(1, Ordering::Relaxed) as u32).to_le_bytes());
    }
    format!("{prefix}{}", hex(&bytes))
}

/// Refuses a secret file (a token, a TLS key) that its group or others can read.
pub(crate) fn check_owner_only(path: &Path) -> Result<()> {
    let meta = fs::metadata(path).map_err(|e| BrokerError::io("read", path, e))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(BrokerError::LoosePermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Reads a token file, refusing one that others can read.
pub fn read_token_file(path: &Path) -> Result<String> {
    check_owner_only(path)?;
    let text = fs::read_to_string(path).map_err(|e| BrokerError::io("read", path, e))?;
    let token = text.trim().to_owned();
    if token.len() < 32 {
        return Err(BrokerError::State {
            path: path.to_path_buf(),
            message: "token is shorter than 32 characters".into(),
        });
    }
    Ok(token)
}

/// Reads the token at `path`, creating it (0600) if it does not exist.
pub fn load_or_create(path: &Path) -> Result<String> {
    if !path.exists() {
        write_secret_new(path, &format!("{}\n", generate()?))?;
    }
    read_token_file(path)
}

impl Tokens {
    /// Loads (and creates where missing) the operator and agent tokens, every paired device,
    /// and the token of every API client in the config. An API client whose token file is
    /// missing cannot authenticate; that is logged, not fatal.
    pub fn load(home: &Home, config: &crate::config::Config) -> Result<Tokens> {
        // Looked at before the files are read: a change made meanwhile is seen at the next look.
        let mut tokens = Tokens {
            home: Some((home.clone(), stamp(home))),
            ..Tokens::default()
        };
        tokens.add(load_or_create(&home.operator_token())?, Principal::Operator);
        tokens.add(load_or_create(&home.agent_token())?, Principal::Agent);
        tokens.add_apps(home, &config.api_clients)?;
        Ok(tokens)
    }

    /// This set's operator and agent tokens with the devices and API clients read again from
    /// `home`'s files and `config.yaml`.
    fn reload(&self, home: &Home) -> Result<Tokens> {
        let config = crate::config::Config::load(&home.config())?;
        let mut tokens = Tokens {
            home: self.home.clone(),
            ..Tokens::default()
        };
        tokens.entries = (self.entries.iter())
            .filter(|(_, who)| matches!(who, Principal::Operator | Principal::Agent))
            .cloned()
            .collect();
        tokens.add_apps(home, &config.api_clients)?;
        Ok(tokens)
    }

    /// Every paired device of `home`, and the API clients of `clients` that have a token file.
    fn add_apps(
        &mut self,
        home: &Home,
        clients: &BTreeMap<String, crate::config::ApiClient>,
    ) -> Result<()> {
        let tokens = self;
        let dir = home.devices();
        if let Ok(entries) = fs::read_dir(&dir) {
            let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for path in paths {
                let Some(name) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".token"))
                else {
                    continue;
                };
                let name = name.to_owned();
                tokens.add(read_token_file(&path)?, Principal::Device(name));
            }
        }
        for (name, client) in clients {
            tokens
                .scopes
                .insert(name.clone(), client.can_message.clone());
            let path = home.client_token(name);
            if path.exists() {
                tokens.add(read_token_file(&path)?, Principal::ApiClient(name.clone()));
            } else {
                tracing::warn!(client = %name, path = %path.display(), "API client has no token file; run leo client add");
            }
        }
        Ok(())
    }

    pub fn add(&mut self, token: String, who: Principal) {
        self.entries.push((token.into_bytes(), who));
    }

    /// The set of the cluster's `entries`, as the database holds them.
    pub fn from_entries(entries: &[crate::store::postgres::tokens::Entry]) -> Tokens {
        use crate::store::postgres::tokens::Kind;
        let mut tokens = Tokens::default();
        for e in entries {
            let who = match e.kind {
                Kind::Operator => Principal::Operator,
                Kind::Agent => Principal::Agent,
                Kind::Device => Principal::Device(e.name.clone()),
                Kind::Client => {
                    tokens.scopes.insert(e.name.clone(), e.can_message.clone());
                    Principal::ApiClient(e.name.clone())
                }
                Kind::OwnAgent => {
                    // A name the database holds that is not an agent name opens nothing.
                    if let Ok(name) = AgentName::parse(&e.name) {
                        tokens.own.push((e.token.as_bytes().to_vec(), name));
                    }
                    continue;
                }
            };
            tokens.add(e.token.clone(), who);
        }
        tokens
    }

    /// Whether `presented` is `who`'s token, compared in constant time with every token.
    pub fn is(&self, presented: &str, who: &Principal) -> bool {
        self.lookup(presented).as_ref() == Some(who)
    }

    /// The own token of `agent`, when the set holds the agents' own tokens.
    pub fn own_token(&self, agent: &AgentName) -> Option<&[u8]> {
        self.own
            .iter()
            .find(|(_, name)| name == agent)
            .map(|(token, _)| token.as_slice())
    }

    /// The agent whose own token `presented` is, comparing with every one in constant time.
    pub fn owner_of(&self, presented: &str) -> Option<AgentName> {
        let presented = presented.as_bytes();
        let mut found = None;
        for (token, name) in &self.own {
            if bool::from(token.as_slice().ct_eq(presented)) && found.is_none() {
                found = Some(name.clone());
            }
        }
        found
    }

    /// The principal of `presented`, comparing against every token in constant time.
    pub fn lookup(&self, presented: &str) -> Option<Principal> {
        let presented = presented.as_bytes();
        let mut found = None;
        for (token, who) in &self.entries {
            // ct_eq on slices of different length returns false without comparing bytes;
            // every token has the same length, so the time does not depend on the input.
            if bool::from(token.as_slice().ct_eq(presented)) && found.is_none() {
                found = Some(who.clone());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A device paired after the start is found at its first lookup; one whose file cannot be
    /// trusted keeps the set read before in force; a removed one is refused.
    #[test]
    fn a_book_of_files_follows_the_devices_and_keeps_the_last_set_it_could_read() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        crate::home::prepare(&home).unwrap();
        let config = crate::config::Config::default();
        let book = TokenBook::of_files(Tokens::load(&home, &config).unwrap());
        let phone = "p".repeat(64);
        assert_eq!(book.lookup(&phone), None);
        write_secret_new(&home.device_token("phone"), &phone).unwrap();
        assert_eq!(book.lookup(&phone), Some(Principal::Device("phone".into())));

        let ipad = "i".repeat(64);
        let loose = home.device_token("ipad");
        fs::write(&loose, &ipad).unwrap();
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            book.lookup(&ipad),
            None,
            "a file others may read is refused"
        );
        assert_eq!(book.lookup(&phone), Some(Principal::Device("phone".into())));

        fs::remove_file(&loose).unwrap();
        fs::remove_file(home.device_token("phone")).unwrap();
        // Revoked within a second of the last look.
        let deadline = Instant::now() + 2 * POLL;
        while book.lookup(&phone).is_some() {
            assert!(
                Instant::now() < deadline,
                "the removed device is still accepted"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let operator = read_token_file(&home.operator_token()).unwrap();
        assert_eq!(book.lookup(&operator), Some(Principal::Operator));
    }
}
