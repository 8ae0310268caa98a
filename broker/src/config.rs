//! `$LEO_HOME/config.yaml`: optional, strict.
//!
//! An absent file means every default. The file grants API client scopes, so, like a token
//! file, it is refused when its group or others may write it. Unknown keys and wrong types are start-up errors that
//! name the key path (`web.port: invalid type…`), because a typo in a security setting such as
//! `allowed_hosts` must never be silently ignored.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

use crate::error::{BrokerError, Result};

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub web: Web,
    pub client_tools: ClientTools,
    pub agents: BTreeMap<String, Agent>,
    pub api_clients: BTreeMap<String, ApiClient>,
    pub console: Console,
    pub history: HistoryConfig,
    pub webhooks: WebhooksConfig,
    pub metrics: MetricsConfig,
    pub store: Store,
    pub telemetry: TelemetryConfig,
    pub cluster: ClusterConfig,
    pub approvals: ApprovalsConfig,
    pub auth: AuthConfig,
}

/// `approvals:`: which calls a person approves before any app sees them, who may approve, and
/// for how long a call waits (docs/approvals.md). An app's `approval: "required"` always holds;
/// these rules can only add to it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// Seconds a call waits for a decision before it ends with `approval_timeout`.
    pub expire_s: u64,
    /// Whether an approver may edit the arguments of a call that needs approval because its
    /// app requires it (a rule of `require` says so for the calls it holds).
    pub allow_edits: bool,
    /// Calls that need approval besides those of tools registered with `approval: required`.
    pub require: Vec<ApprovalRule>,
    /// Who may decide besides the operator.
    pub approvers: Approvers,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig {
            expire_s: 900,
            allow_edits: false,
            require: Vec::new(),
            approvers: Approvers::default(),
        }
    }
}

/// `approvals.require[i]`: the calls of `tools` by `agents` (globs; absent means every one).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalRule {
    pub tools: Option<Vec<String>>,
    pub agents: Option<Vec<String>>,
    /// Whether an approver may edit the arguments of the calls this rule holds.
    pub allow_edits: bool,
}

impl ApprovalRule {
    /// True when the rule holds `agent`'s calls of `tool`.
    pub fn holds(&self, agent: &str, tool: &str) -> bool {
        let matches = |list: &Option<Vec<String>>, name: &str| {
            list.as_deref()
                .is_none_or(|l| leo_protocol::glob::any_matches(l, name))
        };
        matches(&self.tools, tool) && matches(&self.agents, agent)
    }
}

/// `approvals.approvers`: paired devices (by name, globs) and API clients (by name) that may
/// approve and deny, besides the operator.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Approvers {
    pub devices: Vec<String>,
    pub api_clients: Vec<String>,
}

impl ApprovalsConfig {
    /// The longest `approvals.expire_s`: a week.
    pub const MAX_EXPIRE_S: u64 = 7 * 24 * 3600;

    /// Whether every call of `tool` waits for approval, whichever agent makes it: its app
    /// registered it `approval: "required"` (`app_requires`), or a rule without `agents` holds
    /// it. What `leo status`, the console and the tools listing show as `needs_approval`; a
    /// rule for some agents only is decided per call.
    pub fn needed_by_all(&self, tool: &str, app_requires: bool) -> bool {
        app_requires
            || self
                .require
                .iter()
                .any(|r| r.agents.is_none() && r.holds("", tool))
    }

    /// Whether the principal `who` (`operator`, `device:NAME`, `client:NAME`) may decide
    /// approvals at all; the core also refuses an approver the call's own agent.
    pub fn may_approve(&self, who: &str) -> bool {
        if who == "operator" {
            return true;
        }
        if let Some(name) = who.strip_prefix("device:") {
            return leo_protocol::glob::any_matches(&self.approvers.devices, name);
        }
        who.strip_prefix("client:")
            .is_some_and(|name| self.approvers.api_clients.iter().any(|c| c == name))
    }

    fn check(&self, api_clients: &BTreeMap<String, ApiClient>) -> std::result::Result<(), String> {
        if !(1..=Self::MAX_EXPIRE_S).contains(&self.expire_s) {
            return Err(format!(
                "approvals.expire_s: must be 1 to {}",
                Self::MAX_EXPIRE_S
            ));
        }
        for (i, rule) in self.require.iter().enumerate() {
            for (key, list) in [("tools", &rule.tools), ("agents", &rule.agents)] {
                if list.as_ref().is_some_and(Vec::is_empty) {
                    return Err(format!(
                        "approvals.require[{i}].{key}: an empty list holds nothing; leave it out to mean every one"
                    ));
                }
            }
        }
        for (i, name) in self.approvers.api_clients.iter().enumerate() {
            if !api_clients.contains_key(name) {
                return Err(format!(
                    "approvals.approvers.api_clients[{i}]: {name:?} is not in api_clients"
                ));
            }
        }
        Ok(())
    }
}

/// `cluster:`: several instances on one PostgreSQL database (see `cluster`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// The URL other instances reach this one at when it leads (`https://leo-a.internal:8370`).
    /// Absent: from the TCP listener (`https` with `web.tls`, `web.bind`, or `127.0.0.1` when
    /// it binds every address, and the port it bound).
    pub advertise_url: Option<String>,
    /// The CA file this instance trusts the leader's certificate by (else `LEO_CA_FILE`, and
    /// the system store). A relative path is relative to `$LEO_HOME`.
    pub ca_file: Option<std::path::PathBuf>,
    /// Forward to a leader over plain `http` when its URL names a loopback address (instances
    /// on one host). Otherwise a follower forwards over `https` only: it sends the client's
    /// token and the cluster's key, and the `instances` row that names the leader's URL is
    /// only as safe as the database.
    pub plain_http_on_loopback: bool,
    /// How often the leader renews its lease, and a follower says it is alive.
    pub heartbeat_ms: u64,
    /// How long a lease lasts without renewal: how long a leader whose host vanished (or that
    /// froze) keeps its followers waiting.
    pub lease_ms: u64,
    /// How often a follower looks at the lease.
    pub poll_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> ClusterConfig {
        ClusterConfig {
            advertise_url: None,
            ca_file: None,
            plain_http_on_loopback: false,
            heartbeat_ms: 5_000,
            lease_ms: 15_000,
            poll_ms: 1_000,
        }
    }
}

/// The shortest interval `cluster.heartbeat_ms`, `cluster.lease_ms` and `cluster.poll_ms` may
/// name: each is a round trip to the database.
const MIN_CLUSTER_MS: u64 = 10;

impl ClusterConfig {
    /// The election's intervals make sense together: a leader renews before its lease lapses,
    /// and a follower looks at least once per lease.
    fn check(&self) -> std::result::Result<(), String> {
        for (key, ms) in [
            ("heartbeat_ms", self.heartbeat_ms),
            ("lease_ms", self.lease_ms),
            ("poll_ms", self.poll_ms),
        ] {
            if ms < MIN_CLUSTER_MS {
                return Err(format!("cluster.{key}: must be at least {MIN_CLUSTER_MS}"));
            }
        }
        if self.heartbeat_ms >= self.lease_ms {
            return Err(format!(
                "cluster.heartbeat_ms: must be shorter than cluster.lease_ms ({}), so that a \
                 leader renews its lease before it lapses",
                self.lease_ms
            ));
        }
        if self.poll_ms > self.lease_ms {
            return Err(format!(
                "cluster.poll_ms: must be at most cluster.lease_ms ({}), so that a follower \
                 looks at the lease at least once while it lasts",
                self.lease_ms
            ));
        }
        Ok(())
    }
}

/// `auth:`: OAuth 2.1 at `/mcp`, with the broker as its own authorization server
/// (docs/configuration.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Serve the OAuth endpoints and accept their access tokens at `/mcp`.
    pub oauth: bool,
    /// Accept Dynamic Client Registration (RFC 7591) from anyone who reaches the listener.
    pub dynamic_registration: bool,
    /// Accept clients known by a Client ID Metadata Document: a `client_id` that is an
    /// `https` URL, fetched by the broker.
    pub metadata_documents: bool,
    /// Let metadata documents be fetched from loopback and private addresses, and over `http`
    /// from a loopback host (for tests; a public client's document is on the internet).
    pub allow_private_fetch: bool,
    /// An outside authorization server: `/mcp` accepts the JWT access tokens it issues (by
    /// its JWKS), and Leo's own authorization server is off. Needs `public_url`.
    pub issuer: Option<String>,
    /// The JWKS of `issuer`; unset, the `jwks_uri` of its OpenID Provider metadata.
    pub jwks_uri: Option<String>,
    /// The claim of `issuer`'s tokens that names the agent.
    pub agent_claim: String,
    /// How long an access token opens `/mcp`.
    pub access_ttl_s: u64,
    /// How long a refresh token may be exchanged.
    pub refresh_ttl_s: u64,
    /// The broker's URL as clients reach it (`https://leo.example`): the issuer, and the base
    /// of `/mcp`'s resource URL. Unset, both are made of each request's Host.
    pub public_url: Option<String>,
    /// Paired devices (by name, globs, as `approvals.approvers.devices`) that may log in to
    /// the console with their device token to approve or deny an OAuth consent, and do
    /// nothing else there. The operator always may.
    pub consent_devices: Vec<String>,
}

impl AuthConfig {
    /// Whether the paired device `name` may decide OAuth consents.
    pub fn device_may_consent(&self, name: &str) -> bool {
        self.oauth && leo_protocol::glob::any_matches(&self.consent_devices, name)
    }
}

impl Default for AuthConfig {
    fn default() -> AuthConfig {
        AuthConfig {
            oauth: true,
            dynamic_registration: true,
            metadata_documents: true,
            allow_private_fetch: false,
            issuer: None,
            jwks_uri: None,
            agent_claim: "sub".into(),
            access_ttl_s: 3600,
            refresh_ttl_s: 30 * 24 * 3600,
            public_url: None,
            consent_devices: Vec::new(),
        }
    }
}

impl AuthConfig {
    /// `issuer` and `jwks_uri` are `https`, or `http` to a loopback host (keys fetched over
    /// plain HTTP elsewhere could be anyone's), and the tokens' audience is fixed.
    fn check_issuer(&self) -> std::result::Result<(), String> {
        let Some(issuer) = &self.issuer else {
            return Ok(());
        };
        for (key, url) in [
            ("issuer", Some(issuer)),
            ("jwks_uri", self.jwks_uri.as_ref()),
        ] {
            let Some(url) = url else { continue };
            let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
                .iter()
                .any(|p| {
                    url.strip_prefix(p)
                        .is_some_and(|r| r.is_empty() || r.starts_with([':', '/']))
                });
            if !url.starts_with("https://") && !loopback {
                return Err(format!(
                    "auth.{key}: must be an https:// URL (or http:// to a loopback host)"
                ));
            }
        }
        if self.public_url.is_none() {
            return Err(
                "auth.public_url: must be set with auth.issuer: the tokens' audience \
                        is its /mcp"
                    .into(),
            );
        }
        if self.agent_claim.trim().is_empty() {
            return Err("auth.agent_claim: must name a claim".into());
        }
        Ok(())
    }
}

/// `telemetry:`: OpenTelemetry traces over OTLP/HTTP (see `telemetry`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://127.0.0.1:4318`); spans go to `/v1/traces` under it.
    /// Absent: no exporter (unless the standard `OTEL_EXPORTER_OTLP_*` variables name one).
    pub otlp_endpoint: Option<String>,
}

/// `metrics:`: `GET /metrics` without a token on a listener of its own.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// A loopback address and port (`127.0.0.1:9370`) that serves only `/metrics`, to anyone
    /// who can reach it.
    pub bind: Option<std::net::SocketAddr>,
}

/// `history:`: the history of ended calls and the audit trail, in `state/history.db`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Keep call arguments and results too (they may hold secrets; shown to the operator
    /// only).
    pub store_content: bool,
    /// Rows older than this many days are deleted.
    pub keep_days: u32,
    /// At most this many rows of each log are kept, the newest; `null` for no limit.
    pub max_rows: Option<u64>,
}

/// The longest `history.keep_days`: ten years.
pub const MAX_KEEP_DAYS: u32 = 3650;

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            store_content: false,
            keep_days: 30,
            max_rows: Some(1_000_000),
        }
    }
}

/// `webhooks:`: where webhook providers may be called.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Host names or IPs a webhook `url` may name besides loopback ones, compared without
    /// case; IPv6 without brackets.
    pub allowed_hosts: Vec<String>,
}

/// `store:`: the live state database, `state/leo.db`, or PostgreSQL.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Store {
    /// `normal` survives the broker being killed; `full` survives a power loss too, at the
    /// cost of an `fsync` per commit. SQLite only: PostgreSQL's durability is the server's.
    pub synchronous: crate::store::Synchronous,
    /// A `postgres://` (or `postgresql://`) URL: the live state lives in that database
    /// instead of `state/leo.db`. `LEO_STORE_URL` sets it too, and wins.
    pub url: Option<String>,
}

/// The `store:` section of the file at `path` alone (default when the file is absent), for
/// the commands that only need to know where the state lives: an error elsewhere in the file
/// is the broker's to report, not theirs.
pub fn store_of(path: &Path) -> Result<Store> {
    #[derive(Deserialize)]
    struct StoreOnly {
        #[serde(default)]
        store: Option<Store>,
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Store::default()),
        Err(e) => return Err(BrokerError::io("read", path, e)),
    };
    if text.trim().is_empty() {
        return Ok(Store::default());
    }
    let only: StoreOnly = parse_yaml(&text).map_err(|message| BrokerError::Config {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(only.store.unwrap_or_default())
}

pub use crate::store::{STORE_URL_VAR, store_key};

/// The variables of its environment the broker reads, besides `LEO_HOME`: what a service
/// that runs it must carry (`leo service install`), or it would start another broker than the
/// shell's.
pub const BROKER_ENVIRONMENT: [&str; 2] = [STORE_URL_VAR, leo_protocol::tls::CA_FILE_ENV];

/// The PostgreSQL store as its errors name it: by where its URL came from, the variable when
/// it is set (then there may be no `config.yaml` at all), else `store.url`.
pub fn store_label() -> &'static str {
    if store_key() == STORE_URL_VAR {
        "LEO_STORE_URL (PostgreSQL)"
    } else {
        "store.url (PostgreSQL)"
    }
}

impl Store {
    /// The PostgreSQL URL to use, if any: `LEO_STORE_URL` when set and not empty, else
    /// `store.url` of the file at `config`. A URL that is not PostgreSQL's is refused naming
    /// where it came from: the variable, or the file's key.
    pub fn postgres_url(&self, config: &Path) -> Result<Option<String>> {
        const WANT: &str = "must be a postgres:// or postgresql:// URL";
        let postgres = |u: &str| u.starts_with("postgres://") || u.starts_with("postgresql://");
        let from_env = std::env::var(STORE_URL_VAR).ok().filter(|u| !u.is_empty());
        match (from_env, &self.url) {
            (Some(url), _) if !postgres(&url) => {
                Err(BrokerError::Usage(format!("{STORE_URL_VAR} {WANT}")))
            }
            (Some(url), _) => Ok(Some(url)),
            (None, Some(url)) if !postgres(url) => Err(BrokerError::Config {
                path: config.to_path_buf(),
                message: format!("store.url: {WANT} (or set {STORE_URL_VAR})"),
            }),
            (None, url) => Ok(url.clone()),
        }
    }
}

/// `console:`: the web console on the TCP listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Console {
    /// Offer the console's `ask_human` tool from start (the switch on the page still works).
    pub ask_human: bool,
    /// How long a console login lasts, in seconds, from the moment of login.
    pub session_ttl_s: u64,
}

/// The longest console session: one week.
pub const MAX_SESSION_TTL_S: u64 = 7 * 24 * 3600;

impl Default for Console {
    fn default() -> Self {
        Console {
            ask_human: false,
            session_ttl_s: 12 * 3600,
        }
    }
}

/// `web:`: the TCP listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Web {
    pub enabled: bool,
    pub port: u16,
    pub bind: IpAddr,
    /// Extra Host names or IPs accepted besides loopback.
    pub allowed_hosts: Vec<String>,
    /// Largest request body, in bytes (registrations and results; other routes take less).
    pub max_body_bytes: usize,
    /// Most TCP connections served at once; one more is answered `503` and closed.
    pub max_connections: usize,
    /// Most sidecar sessions open at once, over every carrier (the unix sockets, a follower's
    /// pipes, IPC upgrades, `/mcp`); a quarter is kept for the unix sockets (see `ipc`).
    pub max_sessions: usize,
    /// Most sessions one agent holds over the network at once (IPC upgrades and `/mcp`
    /// sessions together); one more is refused `403` (see `ipc::RemoteSlot`).
    pub max_sessions_per_agent: usize,
    /// Seconds a TCP connection has to send a request's head once it is ready for one.
    pub header_timeout_s: u64,
    /// Seconds a TCP connection may move no byte either way before it is closed.
    pub idle_timeout_s: u64,
    /// HTTPS on the TCP listener: a certificate chain and its key, PEM.
    pub tls: Option<WebTls>,
}

/// `web.tls:`: the TCP listener serves HTTPS only, with this pair (reloaded when the files
/// change or on `SIGHUP`). A relative path is relative to `$LEO_HOME`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebTls {
    /// The certificate chain, the server's own certificate first.
    pub cert: std::path::PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1), readable by its owner only.
    pub key: std::path::PathBuf,
}

impl WebTls {
    /// The two paths, relative ones taken under `home`.
    pub fn resolved(&self, home: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
        (home.join(&self.cert), home.join(&self.key))
    }
}

impl Default for Web {
    fn default() -> Self {
        Web {
            enabled: true,
            port: 8370,
            bind: IpAddr::from([127, 0, 0, 1]),
            allowed_hosts: Vec::new(),
            max_body_bytes: 2 * 1024 * 1024,
            max_connections: 1024,
            max_sessions: 1024,
            max_sessions_per_agent: 64,
            header_timeout_s: 10,
            idle_timeout_s: 60,
            tls: None,
        }
    }
}

/// `client_tools:`: broker-wide behaviour of client tools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTools {
    /// `timeout_s` for tools that give none.
    pub default_timeout_s: u64,
    /// How many events the broker keeps for `Last-Event-ID` replay.
    pub replay_events: usize,
    /// How many ended requests are remembered, so a late claim or result gets
    /// `already_settled` rather than `unknown_request`.
    pub remember_settled: usize,
    /// Hold a re-registered tool's changed definition until the operator approves it
    /// (`leo tools approve NAME`); until then agents keep the previous one.
    pub pin_definitions: bool,
    /// Seconds after start that an agent's `leo-mcp` and an app's stream have to come back
    /// for the calls and claims they had before a restart.
    pub resume_grace_s: u64,
}

impl Default for ClientTools {
    fn default() -> Self {
        ClientTools {
            default_timeout_s: leo_protocol::limits::DEFAULT_TIMEOUT_S,
            replay_events: 4096,
            remember_settled: 4096,
            pin_definitions: false,
            resume_grace_s: 60,
        }
    }
}

/// `agents.NAME:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Agent {
    pub deny_tools: Vec<String>,
    /// When present, the only client tools offered to this agent (Leo's own stay offered).
    pub allow_tools: Option<Vec<String>>,
    /// How this agent's harness is shown tools, whatever its name: `native`, `fallback`, or
    /// `auto` (the default: `leo-mcp`'s harness table decides). `leo-mcp --mode` still wins.
    pub mode: AgentMode,
}

/// `agents.NAME.mode`, or the mode recorded with an agent's own token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentMode {
    #[default]
    Auto,
    Native,
    Fallback,
}

impl AgentMode {
    /// The mode the `welcome` frame gives, `None` for `auto` (the harness table decides).
    pub fn chosen(self) -> Option<leo_protocol::ipc::Mode> {
        use leo_protocol::ipc::Mode;
        match self {
            AgentMode::Auto => None,
            AgentMode::Native => Some(Mode::Native),
            AgentMode::Fallback => Some(Mode::Fallback),
        }
    }

    /// Reads `native`, `fallback` or `auto`.
    pub fn parse(text: &str) -> Result<AgentMode, String> {
        match text {
            "auto" => Ok(AgentMode::Auto),
            "native" => Ok(AgentMode::Native),
            "fallback" => Ok(AgentMode::Fallback),
            other => Err(format!(
                "mode {other:?} is not one of native, fallback, auto"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AgentMode::Auto => "auto",
            AgentMode::Native => "native",
            AgentMode::Fallback => "fallback",
        }
    }
}

/// `api_clients.NAME:`: a scoped token that may only message these agents.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiClient {
    pub can_message: Vec<String>,
}

impl Config {
    /// Reads `path`; a missing file is the default config. A file that its group or others
    /// may write is refused: it grants API client scopes, so whoever can write it can grant
    /// themselves one.
    pub fn load(path: &Path) -> Result<Config> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(BrokerError::io("read", path, e)),
        };
        check_not_writable_by_others(path)?;
        Config::parse(&text).map_err(|message| BrokerError::Config {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses YAML text, naming the key path on error.
    pub fn parse(text: &str) -> std::result::Result<Config, String> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let config: Config = parse_yaml(text)?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if self.client_tools.replay_events == 0 {
            return Err("client_tools.replay_events: must be at least 1".into());
        }
        if self.web.max_body_bytes < 1024 {
            return Err("web.max_body_bytes: must be at least 1024".into());
        }
        if self.web.max_connections == 0 || self.web.header_timeout_s == 0 {
            return Err("web.max_connections and web.header_timeout_s: must be at least 1".into());
        }
        if self.auth.access_ttl_s == 0 || self.auth.refresh_ttl_s == 0 {
            return Err("auth.access_ttl_s and auth.refresh_ttl_s: must be at least 1".into());
        }
        if let Some(url) = &self.auth.public_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err("auth.public_url: must be an http:// or https:// URL".into());
        }
        self.auth.check_issuer()?;
        if self.web.max_sessions < 4 {
            // A quarter is the unix sockets': at least one for the local leo-mcp.
            return Err("web.max_sessions: must be at least 4".into());
        }
        if self.web.max_sessions_per_agent == 0 {
            return Err("web.max_sessions_per_agent: must be at least 1".into());
        }
        if self.web.idle_timeout_s < 20 {
            // Event streams send a keep-alive every 15 s; a shorter idle limit would cut them.
            return Err("web.idle_timeout_s: must be at least 20".into());
        }
        if let Some(tls) = &self.web.tls {
            for (key, path) in [("cert", &tls.cert), ("key", &tls.key)] {
                if path.as_os_str().is_empty() {
                    return Err(format!("web.tls.{key}: must name a PEM file"));
                }
            }
        }
        if self.client_tools.default_timeout_s > leo_protocol::limits::MAX_TIMEOUT_S {
            return Err(format!(
                "client_tools.default_timeout_s: at most {}",
                leo_protocol::limits::MAX_TIMEOUT_S
            ));
        }
        if !(1..=MAX_SESSION_TTL_S).contains(&self.console.session_ttl_s) {
            return Err(format!(
                "console.session_ttl_s: must be 1 to {MAX_SESSION_TTL_S}"
            ));
        }
        if !(1..=MAX_KEEP_DAYS).contains(&self.history.keep_days) {
            return Err(format!("history.keep_days: must be 1 to {MAX_KEEP_DAYS}"));
        }
        if self.metrics.bind.is_some_and(|a| !a.ip().is_loopback()) {
            return Err(
                "metrics.bind: must be a loopback address (it serves without a token)".into(),
            );
        }
        if let Some(url) = &self.telemetry.otlp_endpoint {
            check_otlp_endpoint(url)?;
        }
        self.cluster.check()?;
        self.approvals.check(&self.api_clients)?;
        if self.history.max_rows == Some(0) {
            return Err("history.max_rows: must be at least 1 (null keeps every row)".into());
        }
        for (i, host) in self.webhooks.allowed_hosts.iter().enumerate() {
            let bad = host.is_empty()
                || host
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | '[' | ']' | '?' | '#'));
            if bad {
                return Err(format!(
                    "webhooks.allowed_hosts[{i}]: {host:?} is not a host name or IP (no scheme, port, path or brackets)"
                ));
            }
        }
        for (name, client) in &self.api_clients {
            if client.can_message.is_empty() {
                return Err(format!(
                    "api_clients.{name}.can_message: an empty list denies everything; name at least one target"
                ));
            }
        }
        Ok(())
    }

    /// Checks every `agents.NAME.deny_tools` and `allow_tools` entry against the tools that can
    /// exist: Leo's own and every name an app ever registered.
    pub fn check_deny_tools(
        &self,
        known: &std::collections::BTreeSet<String>,
    ) -> std::result::Result<(), String> {
        for (agent, a) in &self.agents {
            let lists = [
                ("deny_tools", Some(&a.deny_tools)),
                ("allow_tools", a.allow_tools.as_ref()),
            ];
            for (key, list) in lists {
                for (i, tool) in list.into_iter().flatten().enumerate() {
                    let builtin = crate::BUILTIN_TOOLS.contains(&tool.as_str());
                    if !builtin && !known.contains(tool) {
                        return Err(format!(
                            "agents.{agent}.{key}[{i}]: {tool:?} is neither a Leo tool nor a client tool any app has registered"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// `agents.NAME.allow_tools`: when present, the only client tools `agent` is offered.
    pub fn allowed_for(&self, agent: &str) -> Option<&[String]> {
        self.agents.get(agent)?.allow_tools.as_deref()
    }

    /// True when `agent`'s allow list (if any) lets `tool` through; Leo's own always pass.
    pub fn allows(&self, agent: &str, tool: &str) -> bool {
        self.allowed_for(agent).is_none_or(|list| {
            crate::BUILTIN_TOOLS.contains(&tool) || list.iter().any(|t| t == tool)
        })
    }

    /// The tools denied to `agent`.
    /// `agents.NAME.mode`, unless `auto` (then the sidecar's harness table decides).
    pub fn mode_for(&self, agent: &str) -> Option<leo_protocol::ipc::Mode> {
        self.agents.get(agent)?.mode.chosen()
    }

    pub fn denied_for(&self, agent: &str) -> Vec<String> {
        self.agents
            .get(agent)
            .map(|a| a.deny_tools.clone())
            .unwrap_or_default()
    }
}

/// Refuses a file whose group or others have write permission (`chmod go-w` fixes it).
/// `telemetry.otlp_endpoint`: an `http://` URL with a host (the export has no TLS stack; a
/// collector on loopback forwards anywhere else).
fn check_otlp_endpoint(url: &str) -> std::result::Result<(), String> {
    let bad = |why: &str| Err(format!("telemetry.otlp_endpoint: {why}"));
    match url.parse::<hyper::Uri>() {
        Err(e) => bad(&format!("{url:?} is not a URL ({e})")),
        Ok(u) if u.scheme_str() != Some("http") => bad(&format!(
            "{url:?}: only http:// is supported (run a local collector for https)"
        )),
        Ok(u) if u.host().is_none_or(str::is_empty) => bad(&format!("{url:?} has no host")),
        Ok(u) if u.query().is_some() => bad(&format!("{url:?} must not have a query")),
        Ok(_) => Ok(()),
    }
}

fn check_not_writable_by_others(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| BrokerError::io("read", path, e))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(BrokerError::WritableByOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Parses YAML (or JSON, which is YAML) into `T`, naming the key path on error
/// (`web.prot: unknown field …`, `tools[0].name: invalid type …`).
pub fn parse_yaml<T: serde::de::DeserializeOwned>(text: &str) -> std::result::Result<T, String> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let mut inner = e.into_inner().to_string();
        // serde_yaml_ng may lead with its own `path: `; ours is the full one.
        if let Some((lead, rest)) = inner.split_once(": ")
            && !lead.contains(' ')
        {
            inner = rest.to_owned();
        }
        let inner = in_words(&path, &inner);
        if path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        }
    })
}

/// `message` with the Rust type serde names after `expected` (`u16`, `struct Web`) said as
/// what the key at `path` wants ("a port number from 0 to 65535", "a mapping"): the one
/// wording of a file's expected types, for `config.yaml` and serve-tool's tools files alike.
fn in_words(path: &str, message: &str) -> String {
    let Some((head, rest)) = message.rsplit_once("expected ") else {
        return message.to_owned();
    };
    // serde_yaml_ng may end with where it was (` at line 2 column 9`).
    let (rust, tail) = rest.split_at(rest.find(" at line ").unwrap_or(rest.len()));
    let words = match rust {
        "u16" if path.ends_with("port") => "a port number from 0 to 65535",
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a sequence" => "a list",
        "a map" => "a mapping",
        "path string" => "a file path",
        struct_ if struct_.starts_with("struct ") => "a mapping",
        _ => return message.to_owned(),
    };
    format!("{head}expected {words}{tail}")
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::too_many_lines,
        reason = "a table of refused keys reads best as one list"
    )]
    use super::*;

    /// Each text is refused with a message that starts with its `want`.
    fn refused_saying(cases: &[(&str, &str)]) {
        for (text, want) in cases {
            match Config::parse(text) {
                Ok(_) => panic!("{text:?} parsed"),
                Err(e) => assert!(e.starts_with(want), "{text:?}: got {e:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn empty_is_default() {
        let c = Config::parse("").unwrap_or_default();
        assert_eq!(c.web.port, 8370);
        assert_eq!(c.client_tools.default_timeout_s, 600);
    }

    #[test]
    fn the_store_is_read_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        assert!(store_of(&path).unwrap().url.is_none(), "no file");
        std::fs::write(&path, "web:\n  prot: 1\nstore:\n  url: postgres://h/db\n").unwrap();
        let store = store_of(&path).unwrap();
        assert_eq!(store.url.as_deref(), Some("postgres://h/db"));
        std::fs::write(&path, "store:\n  ur: x\n").unwrap();
        let e = store_of(&path).unwrap_err().to_string();
        assert!(e.contains("store.ur: unknown field"), "{e}");
    }

    #[test]
    fn the_elections_intervals_default_to_5_15_1_s_and_are_checked_together() {
        let c = Config::parse("").unwrap();
        let ms = (
            c.cluster.heartbeat_ms,
            c.cluster.lease_ms,
            c.cluster.poll_ms,
        );
        assert_eq!(ms, (5_000, 15_000, 1_000));
        let c = Config::parse("cluster:\n  heartbeat_ms: 200\n  lease_ms: 900\n  poll_ms: 50\n");
        assert_eq!(c.map(|c| c.cluster.lease_ms), Ok(900));
        refused_saying(&[
            (
                "cluster:\n  lease_ms: 5000\n",
                "cluster.heartbeat_ms: must be shorter than cluster.lease_ms (5000)",
            ),
            (
                "cluster:\n  heartbeat_ms: 20000\n",
                "cluster.heartbeat_ms: must be shorter",
            ),
            (
                "cluster:\n  poll_ms: 16000\n",
                "cluster.poll_ms: must be at most cluster.lease_ms (15000)",
            ),
            (
                "cluster:\n  poll_ms: 0\n",
                "cluster.poll_ms: must be at least 10",
            ),
            ("cluster:\n  lease_ms: -1\n", "cluster.lease_ms: "),
        ]);
    }

    #[test]
    fn the_session_limit_defaults_to_1024_and_is_at_least_4() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.web.max_sessions, 1024);
        let c = Config::parse("web:\n  max_sessions: 4\n");
        assert_eq!(c.map(|c| c.web.max_sessions), Ok(4));
        refused_saying(&[
            (
                "web:\n  max_sessions: 3\n",
                "web.max_sessions: must be at least 4",
            ),
            ("web:\n  max_sessions: -1\n", "web.max_sessions: "),
        ]);
    }

    #[test]
    fn errors_name_the_key_path() {
        let cases = [
            ("web:\n  port: nope\n", "web.port: "),
            ("web:\n  prot: 1\n", "web.prot: unknown field `prot`"),
            ("bogus: 1\n", "bogus: unknown field `bogus`"),
            (
                "cluster:\n  advertise: x\n",
                "cluster.advertise: unknown field `advertise`",
            ),
            (
                "agents:\n  a:\n    deny_tools: 3\n",
                "agents.a.deny_tools: invalid type",
            ),
            (
                "api_clients:\n  scout:\n    can_message: []\n",
                "api_clients.scout.can_message: an empty list",
            ),
            ("web:\n  bind: not-an-ip\n", "web.bind: "),
            (
                "agents:\n  a:\n    allow_tools: tool\n",
                "agents.a.allow_tools: invalid type",
            ),
            (
                "client_tools:\n  pin_definitions: 1\n",
                "client_tools.pin_definitions: invalid type",
            ),
            (
                "console:\n  ask_humans: true\n",
                "console.ask_humans: unknown field `ask_humans`",
            ),
            (
                "console:\n  ask_human: 1\n",
                "console.ask_human: invalid type",
            ),
            (
                "webhooks:\n  allowed_host: [a]\n",
                "webhooks.allowed_host: unknown field `allowed_host`",
            ),
            (
                "webhooks:\n  allowed_hosts: [\"http://a\"]\n",
                "webhooks.allowed_hosts[0]: ",
            ),
            (
                "console:\n  session_ttl_s: 0\n",
                "console.session_ttl_s: must be 1 to",
            ),
            (
                "metrics:\n  bind: 0.0.0.0:9370\n",
                "metrics.bind: must be a loopback",
            ),
            ("metrics:\n  bind: nowhere\n", "metrics.bind: "),
            ("metrics:\n  port: 1\n", "metrics.port: unknown field"),
            (
                "telemetry:\n  otlp_endpoint: https://c:4318\n",
                "telemetry.otlp_endpoint: \"https://c:4318\": only http://",
            ),
            (
                "telemetry:\n  otlp_endpoint: not a url\n",
                "telemetry.otlp_endpoint: \"not a url\" is not a URL",
            ),
            (
                "telemetry:\n  endpoint: http://c:4318\n",
                "telemetry.endpoint: unknown field",
            ),
            (
                "web:\n  tls:\n    cert: c.pem\n",
                "web.tls: missing field `key`",
            ),
            (
                "web:\n  tls:\n    cert: c.pem\n    key: k.pem\n    ca: x\n",
                "web.tls.ca: unknown field `ca`",
            ),
            (
                "web:\n  tls:\n    cert: \"\"\n    key: k.pem\n",
                "web.tls.cert: must name a PEM file",
            ),
            ("web:\n  tls: yes\n", "web.tls: invalid type"),
            (
                "history:\n  keep_day: 3\n",
                "history.keep_day: unknown field",
            ),
            (
                "history:\n  keep_days: 0\n",
                "history.keep_days: must be 1 to",
            ),
            (
                "history:\n  max_rows: 0\n",
                "history.max_rows: must be at least 1",
            ),
            (
                "history:\n  store_content: yes please\n",
                "history.store_content: invalid type",
            ),
        ];
        refused_saying(&cases);
    }

    #[test]
    fn errors_say_what_a_key_wants_not_a_rust_type() {
        let cases = [
            (
                "web:\n  port: nope\n",
                "web.port: invalid type: string \"nope\", expected a port number from 0 to 65535",
            ),
            (
                "web:\n  port: 70000\n",
                "web.port: invalid value: integer `70000`, expected a port number from 0 to 65535",
            ),
            (
                "web: 3\n",
                "web: invalid type: integer `3`, expected a mapping",
            ),
            (
                "web:\n  tls: yes\n",
                "web.tls: invalid type: string \"yes\", expected a mapping",
            ),
            (
                "client_tools:\n  replay_events: -1\n",
                "client_tools.replay_events: invalid type: integer `-1`, expected a whole number, 0 or more",
            ),
            (
                "history:\n  keep_days: many\n",
                "history.keep_days: invalid type: string \"many\", expected a whole number from 0 to",
            ),
            (
                "console:\n  ask_human: 1\n",
                "console.ask_human: invalid type: integer `1`, expected true or false",
            ),
            (
                "web:\n  allowed_hosts: {a: 1}\n",
                "web.allowed_hosts: invalid type: map, expected a list",
            ),
            (
                "agents: []\n",
                "agents: invalid type: sequence, expected a mapping",
            ),
        ];
        refused_saying(&cases);
    }
}
