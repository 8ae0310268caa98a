//! The request rules that need no runtime: which route a request is, who may call it, how large
//! its body may be, whether the authority it names is ours, and which agent the message route
//! is aimed at.
//!
//! They are plain functions over strings and bytes, and this file uses nothing outside `std`,
//! so the fuzz target `fuzz/fuzz_targets/http_request.rs` compiles it alone (no axum, no tokio)
//! and drives every rule with arbitrary request heads. `auth` applies them to real requests.

use leo_protocol::names::AgentName;
use leo_protocol::oauth;
use std::collections::HashSet;

/// The routes, as the policy table names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Events,
    RegisterTools,
    ListTools,
    Pending,
    Claim,
    Result,
    Cancel,
    /// `POST …/definitions/{name}/approve`: the operator approves a changed definition.
    Approve,
    Status,
    Message,
    /// `GET /login`, the form.
    LoginPage,
    /// `POST /login`.
    Login,
    Logout,
    /// `GET /`, the console.
    ConsolePage,
    /// The console's script, stylesheet and icon.
    ConsoleAsset,
    ConsoleSession,
    ConsoleEvents,
    ConsoleCancel,
    ConsoleAnswer,
    AskHuman,
    /// The console's approve button.
    ConsoleApprove,
    /// `GET /console/approvals`: the calls awaiting approval, for the console's list.
    ConsoleApprovals,
    /// `POST /console/approvals/{id}/approve`: the console approves a call.
    ConsoleApproveCall,
    /// `POST /console/approvals/{id}/deny`: the console denies a call.
    ConsoleDenyCall,
    /// `POST …/requests/{id}/progress`: the claimant reports progress.
    Progress,
    /// `POST …/requests/{id}/input`: the claimant asks the agent's user.
    Input,
    /// `POST …/requests/{id}/log`: the claimant logs a message for the caller.
    Log,
    /// `POST …/requests/{id}/sample`: the claimant asks the caller's model for a completion.
    Sample,
    /// `POST /api/v1/client-offers/requests/{id}/answer`: an app answers a read of a prompt,
    /// a resource or a completion.
    OfferAnswer,
    /// `POST /api/v1/client-offers/updated`: an app says a resource changed.
    ResourceUpdated,
    /// `GET /api/v1/audit`: the trail of authenticated changes.
    Audit,
    /// `POST /api/v1/client-tools/webhooks`: create a webhook provider.
    CreateWebhook,
    /// `GET /api/v1/client-tools/webhooks`.
    ListWebhooks,
    /// `DELETE /api/v1/client-tools/webhooks/{name}`.
    RemoveWebhook,
    /// `GET /metrics`: Prometheus text.
    Metrics,
    /// `GET /console/history`: the console's history panel.
    ConsoleHistory,
    /// `GET /api/v1/ipc` with `Upgrade: leo-ipc`: the sidecar IPC over this listener.
    Ipc,
    /// `POST`, `GET` and `DELETE /mcp`: MCP over Streamable HTTP (TCP only).
    Mcp,
    /// `GET /healthz`: the process serves (no token).
    Health,
    /// `GET /readyz`: the instance takes work now (no token).
    Ready,
    /// `GET /api/v1/approvals`: the calls awaiting a person's approval.
    Approvals,
    /// `POST /api/v1/approvals/{id}/approve`.
    ApproveCall,
    /// `POST /api/v1/approvals/{id}/deny`.
    DenyCall,
    /// `POST /api/v1/approvals/webhooks`: an approver's webhook.
    CreateApprovalWebhook,
    /// `GET /api/v1/approvals/webhooks`.
    ListApprovalWebhooks,
    /// `DELETE /api/v1/approvals/webhooks/{name}`.
    RemoveApprovalWebhook,
    /// `GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728).
    ResourceMetadata,
    /// `GET /.well-known/oauth-authorization-server` (RFC 8414).
    ServerMetadata,
    /// `POST /oauth/register`: Dynamic Client Registration (RFC 7591).
    OAuthRegister,
    /// `GET /oauth/authorize`: sends the person to the consent page.
    OAuthAuthorize,
    /// `POST /oauth/token`.
    OAuthToken,
    /// `GET /console/oauth/consent/{id}`: the consent page.
    ConsentPage,
    /// `POST /console/oauth/consent/{id}`: approve or deny.
    ConsentDecide,
    /// `GET /api/v1/oauth/grants`.
    OAuthGrants,
    /// `DELETE /api/v1/oauth/grants/{id}`.
    RevokeGrant,
    /// `GET /console/oauth/grants`: the console's list of grants.
    ConsoleGrants,
    /// `POST /console/oauth/grants/{id}/revoke`: the console's revoke button.
    ConsoleRevokeGrant,
}

/// Kinds of caller, for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Operator,
    Device,
    Agent,
    /// An agent's own token (`state/agents/NAME.token`), which opens that agent's sessions
    /// and nothing else.
    OwnAgent,
    ApiClient,
    /// A web-console login (the operator, through the session cookie).
    Session,
    /// A web-console login by a paired device's token (`auth.consent_devices`): it decides
    /// OAuth consents, and nothing else.
    DeviceSession,
    /// No credentials at all.
    Anonymous,
}

impl Kind {
    /// Every kind of caller, for the fuzz target that includes this file
    /// (`fuzz/fuzz_targets/http_request.rs`); the broker itself matches exhaustively.
    #[allow(
        dead_code,
        reason = "used by the fuzz target, which includes this file"
    )]
    pub const ALL: [Kind; 8] = [
        Kind::Operator,
        Kind::Device,
        Kind::Agent,
        Kind::OwnAgent,
        Kind::ApiClient,
        Kind::Session,
        Kind::DeviceSession,
        Kind::Anonymous,
    ];
}

/// Routes anyone may call: the login form and the console's assets. An API-client token is
/// still refused, by the API-client check that runs first.
const PUBLIC: &[Kind] = &[
    Kind::Anonymous,
    Kind::Session,
    Kind::DeviceSession,
    Kind::Operator,
    Kind::Device,
    Kind::Agent,
];

/// The probes' callers: anyone, since a load balancer sends no token (a token it sends is
/// still checked; an API client's is refused, as everywhere but its message route).
const PROBE: &[Kind] = &[Kind::Anonymous, Kind::Operator, Kind::Device, Kind::Agent];

/// The approve route's path, as the router and the policy table both name it.
pub const APPROVE_PATH: &str = "/api/v1/client-tools/definitions/{name}/approve";

/// The message route's path, as the router and the API-client check both name it.
pub const MESSAGE_PATH: &str = "/web/agent/{target}/message";

/// Method, path pattern (as the router matches it) and route: how a matched request is named.
pub const ROUTES: &[(&str, &str, Route)] = &[
    ("GET", "/api/v1/events", Route::Events),
    ("POST", "/api/v1/client-tools", Route::RegisterTools),
    ("GET", "/api/v1/client-tools", Route::ListTools),
    ("GET", "/api/v1/client-tools/requests", Route::Pending),
    (
        "POST",
        "/api/v1/client-tools/requests/{id}/claim",
        Route::Claim,
    ),
    (
        "POST",
        "/api/v1/client-tools/requests/{id}/result",
        Route::Result,
    ),
    (
        "POST",
        "/api/v1/client-tools/requests/{id}/cancel",
        Route::Cancel,
    ),
    ("POST", APPROVE_PATH, Route::Approve),
    ("GET", "/api/v1/status", Route::Status),
    ("POST", MESSAGE_PATH, Route::Message),
    ("GET", "/login", Route::LoginPage),
    ("POST", "/login", Route::Login),
    ("POST", "/logout", Route::Logout),
    ("GET", "/", Route::ConsolePage),
    ("GET", "/console/console.js", Route::ConsoleAsset),
    ("GET", "/console/console.css", Route::ConsoleAsset),
    ("GET", "/console/icon.svg", Route::ConsoleAsset),
    ("GET", "/console/session", Route::ConsoleSession),
    ("GET", "/console/events", Route::ConsoleEvents),
    (
        "POST",
        "/console/requests/{id}/cancel",
        Route::ConsoleCancel,
    ),
    (
        "POST",
        "/console/requests/{id}/answer",
        Route::ConsoleAnswer,
    ),
    ("POST", "/console/ask-human", Route::AskHuman),
    (
        "POST",
        "/console/tools/{name}/approve",
        Route::ConsoleApprove,
    ),
    ("POST", PROGRESS_PATH, Route::Progress),
    ("POST", INPUT_PATH, Route::Input),
    ("POST", LOG_PATH, Route::Log),
    ("POST", SAMPLE_PATH, Route::Sample),
    ("POST", OFFER_ANSWER_PATH, Route::OfferAnswer),
    ("POST", RESOURCE_UPDATED_PATH, Route::ResourceUpdated),
    ("GET", "/api/v1/audit", Route::Audit),
    ("POST", WEBHOOKS_PATH, Route::CreateWebhook),
    ("GET", WEBHOOKS_PATH, Route::ListWebhooks),
    (
        "DELETE",
        "/api/v1/client-tools/webhooks/{name}",
        Route::RemoveWebhook,
    ),
    ("GET", "/metrics", Route::Metrics),
    ("GET", "/console/history", Route::ConsoleHistory),
    ("GET", leo_protocol::ipc::UPGRADE_PATH, Route::Ipc),
    ("POST", MCP_PATH, Route::Mcp),
    ("GET", MCP_PATH, Route::Mcp),
    ("DELETE", MCP_PATH, Route::Mcp),
    ("GET", HEALTHZ_PATH, Route::Health),
    ("GET", READYZ_PATH, Route::Ready),
    ("GET", "/api/v1/approvals", Route::Approvals),
    ("POST", "/api/v1/approvals/{id}/approve", Route::ApproveCall),
    ("POST", "/api/v1/approvals/{id}/deny", Route::DenyCall),
    ("POST", APPROVAL_WEBHOOKS_PATH, Route::CreateApprovalWebhook),
    ("GET", APPROVAL_WEBHOOKS_PATH, Route::ListApprovalWebhooks),
    (
        "DELETE",
        "/api/v1/approvals/webhooks/{name}",
        Route::RemoveApprovalWebhook,
    ),
    ("GET", "/console/approvals", Route::ConsoleApprovals),
    (
        "POST",
        "/console/approvals/{id}/approve",
        Route::ConsoleApproveCall,
    ),
    (
        "POST",
        "/console/approvals/{id}/deny",
        Route::ConsoleDenyCall,
    ),
    (
        "GET",
        oauth::RESOURCE_METADATA_PATH,
        Route::ResourceMetadata,
    ),
    (
        "GET",
        oauth::MCP_RESOURCE_METADATA_PATH,
        Route::ResourceMetadata,
    ),
    ("GET", oauth::SERVER_METADATA_PATH, Route::ServerMetadata),
    ("POST", oauth::REGISTER_PATH, Route::OAuthRegister),
    ("GET", oauth::AUTHORIZE_PATH, Route::OAuthAuthorize),
    ("POST", oauth::TOKEN_PATH, Route::OAuthToken),
    ("GET", oauth::CONSENT_PATH, Route::ConsentPage),
    ("POST", oauth::CONSENT_PATH, Route::ConsentDecide),
    ("GET", "/console/consent.js", Route::ConsoleAsset),
    ("GET", "/console/grants.js", Route::ConsoleAsset),
    ("GET", oauth::GRANTS_PATH, Route::OAuthGrants),
    ("DELETE", "/api/v1/oauth/grants/{id}", Route::RevokeGrant),
    ("GET", oauth::CONSOLE_GRANTS_PATH, Route::ConsoleGrants),
    (
        "POST",
        oauth::CONSOLE_REVOKE_PATH,
        Route::ConsoleRevokeGrant,
    ),
];

/// MCP over Streamable HTTP: one path, three methods (a message, the notification stream, the
/// end of a session).
pub const MCP_PATH: &str = "/mcp";

/// The liveness probe's path.
pub const HEALTHZ_PATH: &str = "/healthz";
/// The readiness probe's path.
pub const READYZ_PATH: &str = "/readyz";

/// The approvers' webhooks' path.
pub const APPROVAL_WEBHOOKS_PATH: &str = "/api/v1/approvals/webhooks";

/// The webhook providers' path.
pub const WEBHOOKS_PATH: &str = "/api/v1/client-tools/webhooks";

/// The progress route's path, as the router and the policy table both name it.
pub const PROGRESS_PATH: &str = "/api/v1/client-tools/requests/{id}/progress";
/// The input route's path, likewise.
pub const INPUT_PATH: &str = "/api/v1/client-tools/requests/{id}/input";
/// The route by which an app answers a read (`leo_protocol::offers`).
pub const OFFER_ANSWER_PATH: &str = "/api/v1/client-offers/requests/{id}/answer";
/// The route by which an app says a resource changed.
pub const RESOURCE_UPDATED_PATH: &str = "/api/v1/client-offers/updated";
/// A question for the user: its message and a form of at most 16 KiB, with room for escaping.
pub const INPUT_BODY: usize = 64 * 1024;
/// The log route's path.
pub const LOG_PATH: &str = "/api/v1/client-tools/requests/{id}/log";
/// The sampling route's path.
pub const SAMPLE_PATH: &str = "/api/v1/client-tools/requests/{id}/sample";
/// A sampling request: its params (images included) with room for escaping.
pub const SAMPLE_BODY: usize = 2 * leo_protocol::sampling::MAX_SAMPLE_BYTES;

/// The login form's body: `token=<64 hex digits>` with room for a browser's encoding.
pub const LOGIN_BODY: usize = 4 * 1024;
/// Bodies of a few small fields: a claim's `client_id`, a cancel, the console's switch.
pub const SMALL_BODY: usize = 16 * 1024;
/// A message: 16 KiB of text, each byte of which JSON may spell in six (`\u0000`), plus the
/// envelope and `from`.
pub const MESSAGE_BODY: usize = 6 * 16 * 1024 + 4 * 1024;

impl Route {
    /// The route of a request the router matched with `pattern`.
    pub fn of(method: &str, pattern: &str) -> Option<Route> {
        ROUTES
            .iter()
            .find(|(m, p, _)| *m == method && *p == pattern)
            .map(|(_, _, r)| *r)
    }

    /// The route the router sends a request for `method` and `path` to: what a follower,
    /// which forwards without routing, needs to know of it (its body limit).
    pub fn of_path(method: &str, path: &str) -> Option<Route> {
        ROUTES
            .iter()
            .find(|(m, pattern, _)| *m == method && path_matches(pattern, path))
            .map(|(_, _, r)| *r)
    }

    /// Route × caller kind: the one place that says who may call what, as a `match` the
    /// compiler holds to every route. The provider stream (`?client_tools=1`) is refused to
    /// agents in its handler, since it shares a path with the plain stream; an API client is
    /// further limited to the targets of its `can_message`. Cancelling a call is the
    /// operator's alone: devices are apps, and an app must not end another app's calls.
    /// Console routes (TCP only) take the session cookie, not tokens.
    pub fn callers(self) -> &'static [Kind] {
        const APPS: &[Kind] = &[Kind::Operator, Kind::Device];
        match self {
            Route::Events => &[Kind::Operator, Kind::Device, Kind::Agent],
            Route::RegisterTools | Route::ListTools | Route::Pending => APPS,
            Route::Claim | Route::Result | Route::Status => APPS,
            Route::Progress | Route::Input | Route::Log | Route::Sample => APPS,
            Route::OfferAnswer | Route::ResourceUpdated => APPS,
            Route::CreateWebhook | Route::ListWebhooks | Route::RemoveWebhook => APPS,
            Route::Cancel | Route::Approve | Route::Audit | Route::Metrics => &[Kind::Operator],
            // Which devices and API clients decide is `approvals.approvers`, checked by the
            // core for every decision.
            Route::Approvals
            | Route::ApproveCall
            | Route::DenyCall
            | Route::CreateApprovalWebhook
            | Route::ListApprovalWebhooks
            | Route::RemoveApprovalWebhook => &[Kind::Operator, Kind::Device, Kind::ApiClient],
            Route::Message => &[Kind::Operator, Kind::ApiClient],
            Route::Ipc => &[Kind::Agent, Kind::OwnAgent],
            // The shared agent token, or an agent's own (which is not a principal of the
            // token table; `mcp::check` finds it).
            Route::Mcp => &[Kind::Agent],
            Route::LoginPage | Route::Login | Route::ConsoleAsset => PUBLIC,
            Route::Health | Route::Ready => PROBE,
            // The OAuth endpoints are public by their nature: they check what they are given
            // (the client, its code, its verifier) themselves.
            Route::ResourceMetadata
            | Route::ServerMetadata
            | Route::OAuthRegister
            | Route::OAuthAuthorize
            | Route::OAuthToken => &[Kind::Anonymous],
            Route::OAuthGrants | Route::RevokeGrant => &[Kind::Operator],
            // A paired device's login decides consents, and may log out.
            Route::Logout | Route::ConsentPage | Route::ConsentDecide => {
                &[Kind::Session, Kind::DeviceSession]
            }
            Route::ConsolePage
            | Route::ConsoleSession
            | Route::ConsoleEvents
            | Route::ConsoleCancel
            | Route::ConsoleAnswer
            | Route::AskHuman
            | Route::ConsoleApprove
            | Route::ConsoleGrants
            | Route::ConsoleRevokeGrant
            | Route::ConsoleApprovals
            | Route::ConsoleApproveCall
            | Route::ConsoleDenyCall
            | Route::ConsoleHistory => &[Kind::Session],
        }
    }

    pub fn allows(self, kind: Kind) -> bool {
        self.callers().contains(&kind)
    }

    /// Served on `metrics.bind` too, without a token (after its Host check): `GET /metrics`
    /// and the probes, nothing else.
    pub fn on_metrics_listener(self) -> bool {
        self == Route::Metrics || self.probe()
    }

    /// `GET /healthz` and `GET /readyz`: asked by load balancers, without a token, on every
    /// listener.
    pub fn probe(self) -> bool {
        matches!(self, Route::Health | Route::Ready)
    }

    /// A route that authorizes in its own handler, by this table: `/mcp` (see `mcp`), and the
    /// OAuth endpoints, which anyone may call and which read no token (a client's own
    /// credentials at the token endpoint are its `Authorization: Basic`).
    pub fn checks_itself(self) -> bool {
        self == Route::Mcp || self.oauth_public()
    }

    /// The OAuth endpoints a client calls without a token.
    pub fn oauth_public(self) -> bool {
        matches!(
            self,
            Route::ResourceMetadata
                | Route::ServerMetadata
                | Route::OAuthRegister
                | Route::OAuthAuthorize
                | Route::OAuthToken
        )
    }

    /// Served on the TCP listener only: the console, `/mcp` and its OAuth endpoints.
    pub fn tcp_only(self) -> bool {
        self.console() || self == Route::Mcp || self.oauth_public()
    }

    /// A web-console route: served on TCP only, authenticated by the session cookie.
    pub fn console(self) -> bool {
        matches!(
            self,
            Route::LoginPage
                | Route::Login
                | Route::Logout
                | Route::ConsolePage
                | Route::ConsoleAsset
                | Route::ConsoleSession
                | Route::ConsoleEvents
                | Route::ConsoleCancel
                | Route::ConsoleAnswer
                | Route::AskHuman
                | Route::ConsoleApprove
                | Route::ConsoleApprovals
                | Route::ConsoleApproveCall
                | Route::ConsoleDenyCall
                | Route::ConsoleHistory
                | Route::ConsentPage
                | Route::ConsentDecide
                | Route::ConsoleGrants
                | Route::ConsoleRevokeGrant
        )
    }

    /// A console route that changes state: it passes the Origin check, and the CSRF check
    /// when it has a session.
    pub fn changes_state(self) -> bool {
        matches!(
            self,
            Route::Login
                | Route::Logout
                | Route::ConsoleCancel
                | Route::ConsoleAnswer
                | Route::AskHuman
                | Route::ConsoleApprove
                | Route::ConsoleApproveCall
                | Route::ConsoleDenyCall
                | Route::ConsentDecide
                | Route::ConsoleRevokeGrant
        )
    }

    /// The largest body the route reads, in bytes. `max_body` (`web.max_body_bytes`) is for
    /// the routes that carry tools or results; the `GET` routes take no body.
    pub fn body_limit(self, max_body: usize) -> usize {
        match self {
            Route::RegisterTools | Route::Result | Route::ConsoleAnswer => max_body,
            // A prompt or a resource, which may hold an image or a blob.
            Route::OfferAnswer => max_body,
            Route::ResourceUpdated => SMALL_BODY,
            // A tool call's arguments, or an answer to a question.
            Route::Mcp => max_body,
            Route::CreateWebhook => max_body,
            Route::Message => MESSAGE_BODY,
            Route::Input | Route::Log => INPUT_BODY,
            Route::Sample => SAMPLE_BODY,
            Route::Progress => SMALL_BODY,
            Route::Login => LOGIN_BODY,
            Route::Claim
            | Route::Cancel
            | Route::Approve
            | Route::DenyCall
            | Route::CreateApprovalWebhook
            | Route::ConsoleDenyCall
            | Route::ConsoleCancel
            | Route::ConsoleApprove
            | Route::AskHuman
            | Route::ConsentDecide
            | Route::ConsoleRevokeGrant
            | Route::OAuthRegister
            | Route::OAuthToken
            | Route::Logout => SMALL_BODY,
            // An approval's edited arguments.
            Route::ApproveCall | Route::ConsoleApproveCall => max_body,
            Route::Events
            | Route::Approvals
            | Route::ListApprovalWebhooks
            | Route::RemoveApprovalWebhook
            | Route::ConsoleApprovals
            | Route::ListWebhooks
            | Route::RemoveWebhook
            | Route::ListTools
            | Route::Pending
            | Route::Status
            | Route::Audit
            | Route::Metrics
            | Route::ConsoleHistory
            | Route::LoginPage
            | Route::ConsolePage
            | Route::ConsoleAsset
            | Route::ConsoleSession
            | Route::ConsoleEvents
            | Route::Ipc
            | Route::Health
            | Route::Ready
            | Route::ResourceMetadata
            | Route::ServerMetadata
            | Route::OAuthAuthorize
            | Route::ConsentPage
            | Route::OAuthGrants
            | Route::RevokeGrant
            | Route::ConsoleGrants => 0,
        }
    }
}

/// Why a request's authority was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRefusal {
    /// More than one Host header (RFC 9112 §3.2): `400`.
    Malformed,
    /// No Host, or one that is not ours: `403 forbidden host`.
    Forbidden,
}

/// Whether `path` is a route served on TCP only (the console, `/mcp`): a follower's API socket
/// refuses it as the leader's own socket would, rather than forward it to the leader's TCP.
pub fn tcp_only_path(path: &str) -> bool {
    ROUTES
        .iter()
        .any(|(_, pattern, route)| route.tcp_only() && path_matches(pattern, path))
}

/// Whether `path` is one the router matches with `pattern` (a `{…}` segment is any one).
fn path_matches(pattern: &str, path: &str) -> bool {
    let (mut p, mut q) = (pattern.split('/'), path.split('/'));
    loop {
        match (p.next(), q.next()) {
            (None, None) => return true,
            (Some(want), Some(got)) if want == got || want.starts_with('{') => {}
            _ => return false,
        }
    }
}

/// The names and port a TCP request's authority must carry.
#[derive(Debug, Clone)]
pub struct HostCheck {
    port: u16,
    hosts: HashSet<String>,
}

impl HostCheck {
    /// Loopback names, the bind address when it is specific, and `allowed_hosts`.
    pub fn new(port: u16, bind: std::net::IpAddr, allowed: &[String]) -> HostCheck {
        let mut hosts: HashSet<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        if !bind.is_unspecified() {
            hosts.insert(bind.to_string());
        }
        hosts.extend(allowed.iter().map(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase()
        }));
        HostCheck { port, hosts }
    }

    /// True when `host` (a Host header value or a target's authority) names an allowed host
    /// with our port.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        port == self.port && self.hosts.contains(&name.to_ascii_lowercase())
    }

    /// Checks a request's authorities: the request target's (absolute form), when it has
    /// one, and its Host header, which must be there exactly once. Every authority the
    /// request states must pass, so a good Host cannot carry a foreign target or a second,
    /// foreign Host.
    pub fn check<'a>(
        &self,
        target_authority: Option<&str>,
        host_headers: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), HostRefusal> {
        let mut hosts = host_headers.into_iter();
        let host = hosts.next();
        if hosts.next().is_some() {
            return Err(HostRefusal::Malformed);
        }
        let host = match host {
            Some(bytes) => Some(std::str::from_utf8(bytes).map_err(|_| HostRefusal::Forbidden)?),
            None => None,
        };
        if host.is_none() && target_authority.is_none() {
            return Err(HostRefusal::Forbidden);
        }
        for authority in [target_authority, host].into_iter().flatten() {
            if !self.allows(authority) {
                return Err(HostRefusal::Forbidden);
            }
        }
        Ok(())
    }
}

/// `name:port` or `[v6]:port` → (name, port). A missing port is `None`.
fn split_host(host: &str) -> Option<(&str, u16)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        (name, after.strip_prefix(':')?)
    } else {
        let (name, port) = host.rsplit_once(':')?;
        if name.contains(':') {
            return None;
        }
        (name, port)
    };
    if name.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, port.parse().ok()?))
}

/// The target segment of `/web/agent/<target>/message`, as it appears in the raw path. An
/// empty segment is one too (the router matches it), and `decode_target` refuses it.
pub fn message_segment(path: &str) -> Option<&str> {
    path.strip_prefix("/web/agent/")?
        .strip_suffix("/message")
        .filter(|t| !t.contains('/'))
}

/// The agent a raw target segment names: percent-decoded exactly once, then held to the
/// agent-name rule, so `%2F`, `%00` and a second layer of encoding are refused rather than
/// matched against a scope in one spelling and delivered in another.
pub fn decode_target(segment: &str) -> Result<AgentName, String> {
    let refuse = || {
        format!(
            "the target {segment:?} is not an agent name (1 to 64 of A-Z a-z 0-9 _ . - after \
             percent-decoding)"
        )
    };
    let raw = segment.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw.get(i + 1..i + 3).ok_or_else(refuse)?;
            let hex = std::str::from_utf8(hex).map_err(|_| refuse())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| refuse())?);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    let name = String::from_utf8(out).map_err(|_| refuse())?;
    AgentName::try_from(name).map_err(|_| refuse())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_only_paths_are_the_console_and_mcp() {
        for path in [
            "/",
            "/login",
            "/mcp",
            "/console/requests/r_1/answer",
            "/console/events",
        ] {
            assert!(tcp_only_path(path), "{path}");
        }
        for path in [
            "/api/v1/status",
            "/api/v1/client-tools/requests/r_1/claim",
            "/web/agent/rocket/message",
            "/console/requests/r_1",
            "/mcp/x",
        ] {
            assert!(!tcp_only_path(path), "{path}");
        }
    }

    #[test]
    fn host_header_variants() {
        let c = HostCheck::new(
            8370,
            [127, 0, 0, 1].into(),
            &["leo".into(), "[fd00::1]".into()],
        );
        for (host, ok) in [
            ("127.0.0.1:8370", true),
            ("localhost:8370", true),
            ("LOCALHOST:8370", true),
            ("[::1]:8370", true),
            ("leo:8370", true),
            ("[fd00::1]:8370", true),
            ("127.0.0.1", false),
            ("leo", false),
            ("127.0.0.1:8371", false),
            ("evil.example:8370", false),
            ("::1:8370", false),
            ("[::1]", false),
            ("[::1]8370", false),
            ("127.0.0.1:", false),
            ("127.0.0.1:99999", false),
            (":8370", false),
            ("user@localhost:8370", false),
        ] {
            assert_eq!(c.allows(host), ok, "{host}");
        }
    }

    #[test]
    fn every_authority_of_a_request_counts() {
        let c = HostCheck::new(8370, [127, 0, 0, 1].into(), &[]);
        let good: &[u8] = b"localhost:8370";
        let evil: &[u8] = b"evil.example:8370";
        assert_eq!(c.check(None, [good]), Ok(()));
        assert_eq!(c.check(Some("127.0.0.1:8370"), [good]), Ok(()));
        assert_eq!(c.check(Some("127.0.0.1:8370"), []), Ok(()));
        assert_eq!(c.check(None, [good, evil]), Err(HostRefusal::Malformed));
        assert_eq!(c.check(None, [good, good]), Err(HostRefusal::Malformed));
        assert_eq!(
            c.check(Some("evil.example:8370"), [good]),
            Err(HostRefusal::Forbidden)
        );
        assert_eq!(
            c.check(Some("localhost:8370"), [evil]),
            Err(HostRefusal::Forbidden)
        );
        assert_eq!(c.check(None, []), Err(HostRefusal::Forbidden));
        assert_eq!(
            c.check(None, [&b"localhost:8370\xff"[..]]),
            Err(HostRefusal::Forbidden)
        );
    }

    #[test]
    fn targets_are_decoded_once_and_must_be_agent_names() {
        assert_eq!(message_segment("/web/agent/rocket/message"), Some("rocket"));
        assert_eq!(message_segment("/web/agent//message"), Some(""));
        assert_eq!(message_segment("/web/agent/a/b/message"), None);
        assert_eq!(decode_target("scout-%31").as_deref(), Ok("scout-1"));
        assert_eq!(decode_target("rocket").as_deref(), Ok("rocket"));
        assert_eq!(decode_target("a.b_c-D").as_deref(), Ok("a.b_c-D"));
        for bad in [
            "scout-%2F1",
            "scout-%2f1",
            "scout-%001",
            "scout-%252",
            "scout-%2531",
            "scout-%",
            "scout-%3",
            "scout-%zz",
            "scout-%C3%A9",
            "%20",
            "a%3Fb",
            "",
        ] {
            assert!(decode_target(bad).is_err(), "{bad}");
        }
        assert!(decode_target(&"a".repeat(65)).is_err());
        assert!(decode_target(&"a".repeat(64)).is_ok());
    }

    /// Every route has a policy and a handler by the compiler's exhaustive matches; what is
    /// left to check is what the policy means.
    #[test]
    fn the_policy_keeps_its_invariants() {
        for (_, _, r) in ROUTES {
            let public = r.allows(Kind::Anonymous);
            assert_eq!(
                r.allows(Kind::Session),
                r.console(),
                "{r:?}: sessions open console routes only"
            );
            // A paired device's login opens the login, the assets and the consent pages.
            assert!(
                !r.allows(Kind::DeviceSession)
                    || matches!(
                        r,
                        Route::LoginPage
                            | Route::Login
                            | Route::Logout
                            | Route::ConsoleAsset
                            | Route::ConsentPage
                            | Route::ConsentDecide
                    ),
                "{r:?}: a device's login decides consents only"
            );
            // An API client messages its targets, and decides approvals if it is an approver
            // (`approvals.approvers.api_clients`, the core's check).
            let approval = matches!(
                r,
                Route::Approvals
                    | Route::ApproveCall
                    | Route::DenyCall
                    | Route::CreateApprovalWebhook
                    | Route::ListApprovalWebhooks
                    | Route::RemoveApprovalWebhook
            );
            assert!(
                !r.allows(Kind::ApiClient) || *r == Route::Message || approval,
                "{r:?}"
            );
            // Public: console reads, the login, the probes, and the OAuth endpoints, which
            // check the client, its code and its verifier themselves.
            assert!(
                !public
                    || r.console() && !r.changes_state()
                    || *r == Route::Login
                    || r.probe()
                    || r.oauth_public(),
                "{r:?}"
            );
            assert!(!r.probe() || r.body_limit(1 << 20) == 0 && r.on_metrics_listener());
        }
        assert!(!Route::Claim.allows(Kind::Agent));
        assert!(Route::Events.allows(Kind::Agent));
        assert!(!Route::Events.allows(Kind::ApiClient));
        assert!(Route::Message.allows(Kind::ApiClient));
        assert!(Route::Cancel.allows(Kind::Operator));
        // An agent's own token opens its sessions and nothing else.
        for (_, _, r) in ROUTES {
            assert_eq!(r.allows(Kind::OwnAgent), *r == Route::Ipc, "{r:?}");
        }
        assert!(Route::Ipc.allows(Kind::Agent));
        assert!(!Route::Ipc.allows(Kind::Operator) && !Route::Ipc.allows(Kind::Device));
        assert!(!Route::Cancel.allows(Kind::Device));
        assert_eq!(Route::of("POST", MESSAGE_PATH), Some(Route::Message));
        assert_eq!(Route::of("GET", MESSAGE_PATH), None);
        for method in ["POST", "GET", "DELETE"] {
            assert_eq!(Route::of(method, MCP_PATH), Some(Route::Mcp));
        }
        assert!(Route::Mcp.allows(Kind::Agent) && Route::Mcp.tcp_only());
        for kind in [
            Kind::Operator,
            Kind::Device,
            Kind::ApiClient,
            Kind::Anonymous,
        ] {
            assert!(!Route::Mcp.allows(kind), "{kind:?}");
        }
    }

    #[test]
    fn bodies_fit_their_routes() {
        let max = 2 * 1024 * 1024;
        assert!(Route::Login.body_limit(max) <= 4096);
        assert_eq!(Route::Result.body_limit(max), max);
        assert_eq!(Route::RegisterTools.body_limit(max), max);
        assert!(Route::Message.body_limit(max) < 128 * 1024);
        assert_eq!(Route::Status.body_limit(max), 0);
    }
}
