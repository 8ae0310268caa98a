//! Which token may open a sidecar session under which agent name.
//!
//! By default one agent token (`state/agent.token`) opens a session under any name: the name is
//! asserted, not proven, so `deny_tools` is a guardrail against mistakes, not a boundary. An
//! operator who wants a name proven gives it its own token (`leo agent add NAME` writes
//! `state/agents/NAME.token`). From then on that token, and only that token, opens sessions
//! under NAME, and the session reads NAME's mailbox only; the shared token is refused for NAME.
//! A per-agent token opens no other name (it matches no other file) and no HTTP route but the
//! IPC upgrade (`GET /api/v1/ipc`), whose session it binds to NAME (`owner_of`).
//!
//! `leo agent add|rm|list` (in the `leo-cli` crate) manage the files. The file is read at each
//! `hello`, so `leo agent add` and `leo agent rm` apply to the next session at once, without a
//! broker restart. A session already open keeps its name.
//!
//! With a PostgreSQL store the tokens are the cluster's (`cluster_tokens`): the shared one and
//! the agents' own come from the database's set, swapped in within a second of a change on any
//! instance, and the files of `state/agents/` are only this host's copy for `leo-mcp`.
//!
//! An agent's own token may carry the mode its harness is shown tools in
//! (`leo agent add NAME --mode native|fallback|auto` writes `state/agents/NAME.mode`): since
//! that token alone opens NAME's sessions, the mode is the token's. It is read at each `hello`
//! too, and wins over the config's `agents.NAME.mode` (`mode_of`). The file is this host's
//! even with a PostgreSQL store: the instance that serves the session reads its own.

use std::path::PathBuf;
use std::sync::Arc;

use leo_protocol::ErrorCode;
use leo_protocol::names::AgentName;
use subtle::ConstantTimeEq;

use crate::config::AgentMode;
use crate::error::BrokerError;
use crate::refusal::Refusal;
use crate::tokens::{Principal, TokenBook, read_token_file};

/// The shared agent token and the folder of per-agent ones, or the cluster's set of both.
#[derive(Clone)]
pub struct AgentKeys {
    shared: Arc<str>,
    dir: PathBuf,
    /// The cluster's tokens (PostgreSQL store): used instead of `shared` and the files.
    cluster: Option<TokenBook>,
    /// OAuth access tokens (`oauth`), which open their grant's agent while they are valid.
    oauth: Option<Arc<dyn AccessTokens>>,
}

impl std::fmt::Debug for AgentKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentKeys")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Access tokens issued by OAuth: whether one opens `agent`'s sessions now. A trait so that
/// this low layer names nothing of the authorization server.
pub trait AccessTokens: Send + Sync {
    /// Whether `token` is one of these (by its form), so no other check applies to it.
    fn recognizes(&self, token: &str) -> bool;
    fn opens(&self, token: &str, agent: &AgentName) -> bool;
}

impl AgentKeys {
    pub fn new(shared: Arc<str>, dir: PathBuf) -> AgentKeys {
        AgentKeys {
            shared,
            dir,
            cluster: None,
            oauth: None,
        }
    }

    /// The same keys, with OAuth access tokens opening their agents' sessions too.
    pub fn with_oauth(mut self, oauth: Arc<dyn AccessTokens>) -> AgentKeys {
        self.oauth = Some(oauth);
        self
    }

    /// The keys of a cluster: the shared agent token and the agents' own are `book`'s
    /// (`dir` only names this host's copies in messages).
    pub fn cluster(book: TokenBook, dir: PathBuf) -> AgentKeys {
        AgentKeys {
            shared: Arc::from(""),
            dir,
            cluster: Some(book),
            oauth: None,
        }
    }

    /// Whether `presented` is the shared agent token (constant time).
    fn is_shared(&self, presented: &str) -> bool {
        match &self.cluster {
            Some(book) => book.with(|t| t.is(presented, &Principal::Agent)),
            None => ct_eq(presented, &self.shared),
        }
    }

    /// Whether `presented` is `agent`'s own token: `Ok(None)` when it has none, `Err` when
    /// its file cannot be trusted.
    fn own_matches(&self, agent: &AgentName, presented: &str) -> Result<Option<bool>, BrokerError> {
        if let Some(book) = &self.cluster {
            return Ok(book.with(|t| {
                t.own_token(agent)
                    .map(|own| bool::from(own.ct_eq(presented.as_bytes())))
            }));
        }
        match read_token_file(&self.dir.join(format!("{agent}.token"))) {
            Ok(own) => Ok(Some(ct_eq(presented, &own))),
            Err(BrokerError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether `presented` may open a session under `agent`, a checked name (so it is one file
    /// name, never a path). The refusal names the hello's field (`at $.token`).
    pub fn check(&self, agent: &AgentName, presented: &str) -> Result<(), Refusal> {
        if presented.starts_with(leo_protocol::oauth::ACCESS_PREFIX)
            || self.oauth.as_ref().is_some_and(|o| o.recognizes(presented))
        {
            // `/mcp` checked this token's resource and agent; a session's hello presents it
            // again, and it must still be valid and for this agent (an access token of Leo's
            // own authorization server, or an outside issuer's JWT).
            return match &self.oauth {
                Some(oauth) if oauth.opens(presented, agent) => Ok(()),
                _ => Err(unauthorized(
                    "at $.token: not a valid access token for this agent",
                )),
            };
        }
        self.why_not(agent, presented)
            .map_err(|why| unauthorized(&format!("at $.token: {why}")))
    }

    /// `check`, for a token that arrives in `Authorization: Bearer` (the IPC upgrade).
    pub fn check_bearer(&self, agent: &AgentName, presented: &str) -> Result<(), Refusal> {
        self.why_not(agent, presented)
            .map_err(|why| unauthorized(&format!("Authorization: {why}")))
    }

    /// The agent whose own token `presented` is, if any: every file of `state/agents/` is
    /// compared in constant time, and none is skipped once one matched. A file the broker
    /// cannot trust (loose permissions, unreadable) matches nothing.
    pub fn owner_of(&self, presented: &str) -> Option<AgentName> {
        if let Some(book) = &self.cluster {
            return book.with(|t| t.owner_of(presented));
        }
        let entries = std::fs::read_dir(&self.dir).ok()?;
        let mut found = None;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".token"))
                .and_then(|n| AgentName::parse(n).ok())
            else {
                continue;
            };
            let Ok(own) = read_token_file(&path) else {
                continue;
            };
            if ct_eq(presented, &own) && found.is_none() {
                found = Some(name);
            }
        }
        found
    }

    /// The mode recorded with `agent`'s own token, if it has one with a mode. A mode file the
    /// broker cannot read or parse records nothing (the config's mode applies), with a warning.
    pub fn mode_of(&self, agent: &AgentName) -> Option<AgentMode> {
        let owned = match &self.cluster {
            Some(book) => book.with(|t| t.own_token(agent).is_some()),
            None => self.dir.join(format!("{agent}.token")).exists(),
        };
        if !owned {
            return None;
        }
        let path = self.dir.join(format!("{agent}.mode"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(%agent, path = %path.display(), error = %e, "cannot read the agent's mode");
                return None;
            }
        };
        AgentMode::parse(text.trim())
            .inspect_err(|e| tracing::warn!(%agent, path = %path.display(), "{e}"))
            .ok()
    }

    /// Why `presented` may not open a session under `agent`, if it may not.
    fn why_not(&self, agent: &AgentName, presented: &str) -> Result<(), String> {
        let path = self.dir.join(format!("{agent}.token"));
        let shared = self.is_shared(presented);
        let own = match self.own_matches(agent, presented) {
            Ok(Some(own)) => own,
            Ok(None) => {
                return if shared {
                    Ok(())
                } else {
                    Err("not the agent token".to_owned())
                };
            }
            Err(e) => {
                // Fail closed: a per-agent token the broker cannot trust opens nothing.
                tracing::warn!(%agent, error = %e, "cannot use the agent's own token");
                return Err(format!(
                    "agent {agent:?} has its own token, but the broker cannot use it: {e}"
                ));
            }
        };
        if own {
            Ok(())
        } else if shared {
            Err(format!(
                "agent {agent:?} has its own token ({}); the shared agent token cannot open its \
                 sessions. leo-mcp uses that file when it can read it, or give it with \
                 --token-file / LEO_AGENT_TOKEN_FILE",
                path.display()
            ))
        } else {
            Err(format!("not the token of agent {agent:?}"))
        }
    }
}

impl AgentKeys {
    /// The agent a token given on `/mcp` opens sessions for. The shared agent token opens the
    /// agent it names (`named`, from `Leo-Agent`), unless that agent has its own token; an
    /// agent's own token opens its agent, and a `named` agent that is another is refused. The
    /// folder of own tokens is read at each call, as at each `hello`, and every file is
    /// compared in constant time.
    pub fn identify(
        &self,
        presented: &str,
        named: Option<&AgentName>,
    ) -> Result<AgentName, Refusal> {
        if self.is_shared(presented) {
            // 401, as the token opens nothing by itself: the client is told to authenticate.
            let Some(agent) = named else {
                return Err(unauthorized(
                    "the shared agent token must name its agent in a Leo-Agent header",
                ));
            };
            self.check(agent, presented)?;
            return Ok(agent.clone());
        }
        let Some(owner) = self.owner_of(presented) else {
            return Err(Refusal::new(
                ErrorCode::Unauthorized,
                "not an agent token (give the shared agent token or an agent's own token)",
            ));
        };
        match named {
            Some(agent) if *agent != owner => Err(Refusal::new(
                ErrorCode::Forbidden,
                format!("this is agent {owner:?}'s own token; it cannot open {agent:?}"),
            )),
            _ => Ok(owner),
        }
    }
}

fn unauthorized(why: &str) -> Refusal {
    Refusal::new(ErrorCode::Unauthorized, why)
}

/// Constant-time comparison; tokens of a different length are unequal without a byte compared.
pub fn ct_eq(a: &str, b: &str) -> bool {
    ct_eq_bytes(a.as_bytes(), b.as_bytes())
}

/// [`ct_eq`] on bytes (a header's value).
pub fn ct_eq_bytes(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn name(text: &str) -> AgentName {
        AgentName::parse(text).unwrap()
    }

    #[test]
    fn an_own_token_binds_its_name_and_the_shared_one_opens_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let shared = "s".repeat(64);
        let scout = "a".repeat(64);
        let path = dir.path().join("scout.token");
        crate::home::write_secret_new(&path, &format!("{scout}\n")).unwrap();
        let keys = AgentKeys::new(shared.clone().into(), dir.path().to_owned());

        assert_eq!(keys.check(&name("scout"), &scout), Ok(()));
        assert_eq!(keys.check(&name("rocket"), &shared), Ok(()));
        let e = keys.check(&name("scout"), &shared).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert!(e.message.contains("has its own token"), "{}", e.message);
        assert!(e.message.contains("--token-file"), "{}", e.message);
        // Scout's token opens no other name, and a wrong token nothing.
        let e = keys.check(&name("rocket"), &scout).unwrap_err();
        assert_eq!(e.message, "at $.token: not the agent token");
        let e = keys.check(&name("scout"), &"x".repeat(64)).unwrap_err();
        assert_eq!(e.message, "at $.token: not the token of agent \"scout\"");

        // Scout's token names scout; the shared one and a stranger's name nobody.
        assert_eq!(keys.owner_of(&scout).as_deref(), Some("scout"));
        assert_eq!(keys.owner_of(&shared), None);
        assert_eq!(keys.owner_of(&"x".repeat(64)), None);
        let e = keys.check_bearer(&name("scout"), &shared).unwrap_err();
        assert!(
            e.message
                .starts_with("Authorization: agent \"scout\" has its own token")
        );

        // A file others can read opens nothing, and says why.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = keys.check(&name("scout"), &scout).unwrap_err();
        assert!(e.message.contains("chmod 600"), "{}", e.message);
        assert!(keys.check(&name("scout"), &shared).is_err());
        assert_eq!(keys.owner_of(&scout), None);
    }

    #[test]
    fn the_mode_is_an_own_tokens_and_a_bad_record_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let keys = AgentKeys::new("s".repeat(64).into(), dir.path().to_owned());
        let write = |file: &str, text: &str| std::fs::write(dir.path().join(file), text).unwrap();
        // A mode file without the token records nothing: the mode is the token's.
        write("scout.mode", "native\n");
        assert_eq!(keys.mode_of(&name("scout")), None);
        crate::home::write_secret_new(&dir.path().join("scout.token"), &"a".repeat(64)).unwrap();
        assert_eq!(keys.mode_of(&name("scout")), Some(AgentMode::Native));
        write("scout.mode", "auto");
        assert_eq!(keys.mode_of(&name("scout")), Some(AgentMode::Auto));
        write("scout.mode", "sometimes\n");
        assert_eq!(keys.mode_of(&name("scout")), None);
        assert_eq!(keys.mode_of(&name("rocket")), None);
    }

    #[test]
    fn a_token_on_mcp_names_its_agent() {
        let dir = tempfile::tempdir().unwrap();
        let shared = "s".repeat(64);
        let scout = "a".repeat(64);
        crate::home::write_secret_new(&dir.path().join("scout.token"), &format!("{scout}\n"))
            .unwrap();
        let keys = AgentKeys::new(shared.clone().into(), dir.path().to_owned());

        assert_eq!(keys.identify(&scout, None), Ok(name("scout")));
        assert_eq!(
            keys.identify(&scout, Some(&name("scout"))),
            Ok(name("scout"))
        );
        let e = keys.identify(&scout, Some(&name("rocket"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        assert_eq!(
            keys.identify(&shared, Some(&name("rocket"))),
            Ok(name("rocket"))
        );
        let e = keys.identify(&shared, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert!(e.message.contains("Leo-Agent"), "{}", e.message);
        // The shared token cannot open an agent that has its own.
        let e = keys.identify(&shared, Some(&name("scout"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        let e = keys.identify(&"x".repeat(64), None).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
    }

    #[test]
    fn a_cluster_swaps_its_tokens_in_place() {
        use crate::store::postgres::tokens::{Entry, Kind};
        let entry = |kind, name: &str, token: &str| Entry {
            kind,
            name: name.into(),
            token: token.into(),
            can_message: vec!["rocket".into()],
        };
        let shared = "s".repeat(64);
        let scout = "a".repeat(64);
        let mut rows = vec![
            entry(Kind::Operator, "", &"o".repeat(64)),
            entry(Kind::Agent, "", &shared),
        ];
        let book = TokenBook::live(crate::tokens::Tokens::from_entries(&rows));
        // The folder is empty: the cluster's set decides, not the files.
        let dir = tempfile::tempdir().unwrap();
        let keys = AgentKeys::cluster(book.clone(), dir.path().to_owned());
        assert_eq!(keys.check(&name("scout"), &shared), Ok(()));
        assert!(keys.check(&name("scout"), &scout).is_err());

        rows.push(entry(Kind::OwnAgent, "scout", &scout));
        rows.push(entry(Kind::Client, "ci", &"c".repeat(64)));
        book.replace(crate::tokens::Tokens::from_entries(&rows));
        assert_eq!(keys.check(&name("scout"), &scout), Ok(()));
        assert!(keys.check(&name("scout"), &shared).is_err());
        assert_eq!(keys.owner_of(&scout), Some(name("scout")));
        assert_eq!(
            book.lookup(&"c".repeat(64)),
            Some(Principal::ApiClient("ci".into()))
        );
        assert!(book.may_message("ci", "rocket") && !book.may_message("ci", "scout"));

        rows.retain(|e| e.kind != Kind::OwnAgent && e.kind != Kind::Client);
        book.replace(crate::tokens::Tokens::from_entries(&rows));
        assert_eq!(keys.check(&name("scout"), &shared), Ok(()));
        assert_eq!(keys.owner_of(&scout), None);
        assert_eq!(book.lookup(&"c".repeat(64)), None);
    }
}
