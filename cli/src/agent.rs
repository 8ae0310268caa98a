//! `leo agent add|rm|list`: the files `state/agents/NAME.token` that the broker's `AgentKeys`
//! reads at each `hello` (see `leo_broker`'s `agent_tokens` for the rule they feed). A change
//! applies to the next session at once, without a broker restart. With a PostgreSQL store the
//! token is the cluster's (`crate::cluster`): every instance applies it within seconds.

use clap::Subcommand;
use leo_broker::config::AgentMode;
use leo_broker::error::BrokerError;
use leo_broker::home::{Home, write_atomic, write_secret_new};
use leo_protocol::names::AgentName;

#[derive(Subcommand)]
pub enum AgentCommand {
    /// Give an agent its own token (state/agents/NAME.token); the shared agent token is then
    /// refused for that name.
    Add {
        #[arg(value_parser = parse_name)]
        name: AgentName,
        /// The URL (`https://HOST:PORT`, or `http://`) at which an agent on another host or in
        /// a container reaches this broker: print each harness's setup line for it.
        #[arg(long, value_name = "URL", value_parser = parse_remote)]
        remote: Option<String>,
        /// How this agent's harness is shown client tools, whatever its name: `native`,
        /// `fallback` or `auto` (state/agents/NAME.mode; wins over agents.NAME.mode).
        #[arg(long, value_name = "MODE", value_parser = AgentMode::parse)]
        mode: Option<AgentMode>,
    },
    /// Set the mode recorded with an agent's own token: `native`, `fallback` or `auto`; the
    /// agent's next session is shown client tools that way.
    Mode {
        #[arg(value_parser = parse_name)]
        name: AgentName,
        #[arg(value_parser = AgentMode::parse)]
        mode: AgentMode,
    },
    /// List the agents that have their own token.
    List,
    /// Remove an agent's own token; the shared agent token opens its sessions again.
    Rm {
        #[arg(value_parser = parse_name)]
        name: AgentName,
    },
    /// List the OAuth grants in force: which client acts as which agent, approved by whom.
    Grants,
    /// Revoke an OAuth grant (its id from `leo agent grants`): its tokens stop working at once.
    Revoke { grant: String },
}

/// Runs one `leo agent` command; what it says goes to stdout.
pub fn run(home: &Home, command: &AgentCommand) -> crate::error::Result<String> {
    Ok(match command {
        AgentCommand::Add { name, remote, mode } => {
            let mut out = add(home, name, remote.as_deref())?;
            if let Some(mode) = mode {
                out.push_str(&set_mode(home, name, *mode)?);
            }
            out
        }
        AgentCommand::Mode { name, mode } => {
            if !has_own_token(home, name)? {
                return Err(BrokerError::Usage(format!(
                    "agent {name:?} has no token of its own; give it one with leo agent add {name} --mode {}",
                    mode.as_str()
                ))
                .into());
            }
            set_mode(home, name, *mode)?
        }
        AgentCommand::List => list(home)?,
        AgentCommand::Rm { name } => rm(home, name)?,
        AgentCommand::Grants => grants(home)?,
        AgentCommand::Revoke { grant } => revoke(home, grant)?,
    })
}

/// `leo agent grants`: the broker's OAuth grants, one line each.
fn grants(home: &Home) -> crate::error::Result<String> {
    let api = crate::commands::api::Api::new(home);
    let list: leo_protocol::oauth::Grants = api.get(leo_protocol::oauth::GRANTS_PATH)?;
    if list.grants.is_empty() {
        return Ok("No OAuth grants.\n".to_owned());
    }
    let mut out = String::new();
    for g in list.grants {
        out.push_str(&format!(
            "{}  agent {}  client {:?} ({})  approved by {}\n",
            g.id, g.agent, g.client_name, g.client_id, g.approved_by
        ));
    }
    Ok(out)
}

/// `leo agent revoke GRANT`: the grant and its tokens end at once.
fn revoke(home: &Home, grant: &str) -> crate::error::Result<String> {
    let api = crate::commands::api::Api::new(home);
    let route = format!(
        "{}/{}",
        leo_protocol::oauth::GRANTS_PATH,
        form_urlencoded::byte_serialize(grant.as_bytes()).collect::<String>()
    );
    let done: leo_protocol::oauth::Revoked = api.delete(&route)?;
    Ok(format!(
        "Revoked grant {}: its client must ask for consent again.\n",
        done.revoked
    ))
}

/// `NAME` of `leo agent add|rm`, as clap's value parser: the name is checked where it comes in.
fn parse_name(text: &str) -> Result<AgentName, String> {
    AgentName::parse(text).map_err(|e| format!("agent name {text:?} {e}"))
}

/// `--remote URL`: an `http://` or `https://` URL of a host (and port), without a trailing `/`.
fn parse_remote(text: &str) -> Result<String, String> {
    let url = text.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("{text:?} is not an http:// or https:// URL"))?;
    if rest.is_empty() || rest.contains(['/', '@', '?', '#', ' ', '"']) {
        return Err(format!(
            "{text:?}: give the broker's address only (https://HOST:PORT), without a path"
        ));
    }
    Ok(url.to_owned())
}

/// The name every setup line gives the MCP server, as the README does.
const SERVER: &str = "leo";

/// The setup lines of an agent NAME on another host, for a broker at `url` and NAME's `token`:
/// each harness's line for MCP over HTTP at `/mcp` with its header or variable, and the
/// `leo-mcp --url` line for calls that must outlive a broker restart. For an `https://` URL
/// each line also says how that harness trusts `ca`, the broker's CA: every line fails
/// against a broker of `leo tls init` without it.
fn remote_lines(name: &str, url: &str, token: &str, ca: Option<&str>) -> String {
    let mcp = format!("{url}/mcp");
    let node = ca.map_or(String::new(), |ca| {
        format!("\n\x20              (and NODE_EXTRA_CA_CERTS={ca} in its environment)")
    });
    let codex_ca = ca.map_or(String::new(), |ca| format!(" and SSL_CERT_FILE={ca}"));
    let leo_mcp_ca = ca.map_or(String::new(), |ca| format!(" -e LEO_CA_FILE={ca}"));
    let mut out = format!(
        "An agent on another host or in a container reaches this broker at {url} (web.bind and \
         web.allowed_hosts must let it; see docs/remote-agents.md). Its harness's line:\n\
         \x20 Claude Code: claude mcp add --transport http --scope user {SERVER} {mcp} --header \"Authorization: Bearer {token}\"{node}\n\
         \x20 codex:       codex mcp add {SERVER} --url {mcp} --bearer-token-env-var LEO_AGENT_TOKEN\n\
         \x20              (and LEO_AGENT_TOKEN={token}{codex_ca} in codex's environment; for calls longer than 60 s,\n\
         \x20              tool_timeout_sec = 3600 under [mcp_servers.{SERVER}] in ~/.codex/config.toml)\n\
         \x20 opencode:    opencode mcp add {SERVER} --url {mcp} --header \"Authorization=Bearer {token}\"{node}\n\
         For calls that must outlive a broker restart (long handoffs), run leo-mcp beside the \
         harness instead, for example:\n\
         \x20 claude mcp add --transport stdio --scope user {SERVER} -e LEO_URL={url} -e LEO_AGENT_TOKEN={token}{leo_mcp_ca} -- leo-mcp --agent {name}\n"
    );
    out.push_str(&oauth_lines(&mcp));
    if let Some(ca) = ca {
        if ca == STAND_IN_CA {
            out.push_str(&format!(
                "{STAND_IN_CA} stands for the PEM file of the CA that signed the broker's \
                 certificate (or of the certificate itself, when it is self-signed); a CA the \
                 agent's host already trusts needs none of these variables. "
            ));
        } else {
            out.push_str(&format!(
                "{ca} is the CA of `leo tls init` that signed the broker's certificate: copy it \
                 to the agent's host and give its path there. "
            ));
        }
        out.push_str(
            "SSL_CERT_FILE makes codex trust that CA alone; add it to the host's store instead \
             to keep the others.\n",
        );
    }
    out
}

/// The setup lines without a token, for a harness that logs in by OAuth: it opens a browser
/// on the broker's consent page, where the operator approves it and names its agent. Each CLI
/// line is the one its login command follows (the pinned CLIs' logins are tested against a
/// broker in broker/tests/oauth_clients.rs).
fn oauth_lines(mcp: &str) -> String {
    format!(
        "Or with no token at all, by OAuth: the CLI will open a browser on this broker's consent \
         page, where you log in with the operator token (or a device that auth.consent_devices \
         names), name its agent and approve (docs/remote-agents.md):\n\
         \x20 Claude Code: claude mcp add --transport http --scope user {SERVER} {mcp}   (then: claude mcp login {SERVER})\n\
         \x20 codex:       codex mcp add {SERVER} --url {mcp}   (it logs in at once; again later: codex mcp login {SERVER})\n\
         \x20 opencode:    opencode mcp add {SERVER} --url {mcp}   (then: opencode mcp auth {SERVER})\n\
         \x20 Claude Desktop: Settings, Connectors, Add custom connector, URL {mcp}\n"
    )
}

/// The CA file the setup lines for `url` name: `leo tls init`'s when it made one, else a
/// stand-in for the CA the operator's own certificate comes from; none for `http://`.
fn remote_ca(home: &Home, url: &str) -> Option<String> {
    if !url.starts_with("https://") {
        return None;
    }
    let ca = home.tls_ca();
    Some(if ca.exists() {
        ca.display().to_string()
    } else {
        STAND_IN_CA.to_owned()
    })
}

/// The CA file of the setup lines when this home has none of `leo tls init`.
const STAND_IN_CA: &str = "CA.pem";

/// `leo agent add NAME`: gives NAME its own token, which alone opens its sessions from now on.
fn add(home: &Home, name: &AgentName, remote: Option<&str>) -> Result<String, BrokerError> {
    let name: &str = name;
    let path = home.own_agent_token(name);
    let cluster = crate::cluster::of(home)?;
    let token = match &cluster {
        Some(cluster) => crate::cluster::agent_add(home, cluster, name)?,
        None => {
            leo_broker::home::prepare(home)?;
            if path.exists() {
                return Err(BrokerError::Usage(format!(
                    "agent {name:?} already has its own token; remove it first with leo agent rm {name}"
                )));
            }
            let token = leo_broker::new_token()?;
            write_secret_new(&path, &format!("{token}\n"))?;
            token
        }
    };
    let mut out = format!(
        "Gave agent {name:?} its own token (shown once; also in {path}):\n{token}\n\
         From now on only this token opens sessions as {name:?}, and the shared agent token is \
         refused for it. New sessions need it at once; sessions already open keep running.\n\
         leo-mcp --agent {name} reads {path} when it can; an agent that cannot (a container, \
         another user) is given the file with --token-file PATH or LEO_AGENT_TOKEN_FILE.\n",
        path = path.display()
    );
    if cluster.is_some() {
        out.push_str(&crate::cluster::agent_note());
    }
    if let Some(url) = remote {
        out.push_str(&remote_lines(
            name,
            url,
            &token,
            remote_ca(home, url).as_deref(),
        ));
    }
    crate::admin::audited(home, "agent_add", name, None, &mut out);
    Ok(out)
}

/// Records `mode` with NAME's own token (`state/agents/NAME.mode`, this host's file even in a
/// cluster: the broker reads it at each `hello`).
fn set_mode(home: &Home, name: &AgentName, mode: AgentMode) -> Result<String, BrokerError> {
    let name: &str = name;
    let path = home.own_agent_mode(name);
    write_atomic(&path, format!("{}\n", mode.as_str()).as_bytes())?;
    let mut out = format!(
        "Agent {name:?}'s harness is shown client tools in mode {} from its next session on          ({}; it wins over agents.{name}.mode in config.yaml).\n",
        mode.as_str(),
        path.display()
    );
    let detail = Some(mode.as_str().to_owned());
    crate::admin::audited(home, "agent_mode", name, detail, &mut out);
    Ok(out)
}

/// Whether NAME has a token of its own.
fn has_own_token(home: &Home, name: &str) -> Result<bool, BrokerError> {
    Ok(match crate::cluster::of(home)? {
        Some(cluster) => cluster
            .list(leo_broker::cluster::tokens::Kind::OwnAgent)?
            .iter()
            .any(|e| e.name == name),
        None => home.own_agent_token(name).exists(),
    })
}

/// `leo agent rm NAME`: the shared agent token opens NAME's sessions again.
fn rm(home: &Home, name: &AgentName) -> Result<String, BrokerError> {
    let name: &str = name;
    let path = home.own_agent_token(name);
    let cluster = crate::cluster::of(home)?;
    let removed = match &cluster {
        Some(cluster) => crate::cluster::agent_rm(home, cluster, name)?,
        None => path.exists(),
    };
    if !removed {
        return Err(BrokerError::Usage(format!(
            "agent {name:?} has no token of its own"
        )));
    }
    if cluster.is_none() {
        std::fs::remove_file(&path).map_err(|e| BrokerError::io("remove", &path, e))?;
    }
    // The mode was the token's: it goes with it.
    let mode = home.own_agent_mode(name);
    match std::fs::remove_file(&mode) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(BrokerError::io("remove", &mode, e));
        }
        _ => {}
    }
    let mut out = format!(
        "Removed the own token of agent {name:?}: new sessions as {name:?} open with the shared \
         agent token again. Sessions already open keep running.\n"
    );
    if cluster.is_some() {
        out.push_str(&crate::cluster::agent_note());
    }
    crate::admin::audited(home, "agent_rm", name, None, &mut out);
    Ok(out)
}

const NONE: &str = "no agent has its own token: the shared agent token opens every session \
                    (give one its own with: leo agent add NAME)\n";

/// `leo agent list`: the agents with a token of their own.
fn list(home: &Home) -> Result<String, BrokerError> {
    if let Some(cluster) = crate::cluster::of(home)? {
        return crate::cluster::names(&cluster, leo_broker::cluster::tokens::Kind::OwnAgent, NONE);
    }
    let mut names: Vec<String> = match std::fs::read_dir(home.agents()) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".token"))
                    .map(str::to_owned)
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(BrokerError::io("read", home.agents(), e)),
    };
    names.sort();
    if names.is_empty() {
        return Ok(NONE.into());
    }
    Ok(names.iter().map(|n| format!("{n}\n")).collect())
}
