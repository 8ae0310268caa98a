//! OAuth 2.1 at `/mcp`, as the MCP authorization specification asks of a server: the metadata
//! documents (RFC 9728 protected resource, RFC 8414 authorization server), Dynamic Client
//! Registration (RFC 7591), the token endpoint's answers and errors (RFC 6749 §5), and the
//! console's consent and grant bodies.

use serde::{Deserialize, Serialize};

/// The path of the protected resource metadata (RFC 9728 §3); `/mcp`'s own is this path with
/// `/mcp` appended.
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// The protected resource metadata of `/mcp` itself (RFC 9728 §3.1, the path-suffixed form).
pub const MCP_RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// The path of the authorization server metadata (RFC 8414 §3).
pub const SERVER_METADATA_PATH: &str = "/.well-known/oauth-authorization-server";
/// Dynamic Client Registration.
pub const REGISTER_PATH: &str = "/oauth/register";
/// The authorization endpoint.
pub const AUTHORIZE_PATH: &str = "/oauth/authorize";
/// The token endpoint.
pub const TOKEN_PATH: &str = "/oauth/token";
/// The console's consent page of one authorization request.
pub const CONSENT_PATH: &str = "/console/oauth/consent/{id}";
/// The operator's list of grants; a grant is this path and its id.
pub const GRANTS_PATH: &str = "/api/v1/oauth/grants";
/// The console's list of grants.
pub const CONSOLE_GRANTS_PATH: &str = "/console/oauth/grants";
/// The console's revocation of one grant.
pub const CONSOLE_REVOKE_PATH: &str = "/console/oauth/grants/{id}/revoke";
/// What an access token starts with, so a door can tell it from Leo's other tokens.
pub const ACCESS_PREFIX: &str = "leo_at_";
/// What a refresh token starts with.
pub const REFRESH_PREFIX: &str = "leo_rt_";

/// RFC 9728 §2: what `/mcp` is and who issues its tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResourceMetadata {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub bearer_methods_supported: Vec<String>,
    pub resource_name: String,
}

/// RFC 8414 §2: where the endpoints are and what they accept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration_endpoint: Option<String>,
    pub response_types_supported: Vec<String>,
    pub response_modes_supported: Vec<String>,
    pub grant_types_supported: Vec<String>,
    pub token_endpoint_auth_methods_supported: Vec<String>,
    pub code_challenge_methods_supported: Vec<String>,
    /// RFC 9207: the authorization response carries `iss`.
    pub authorization_response_iss_parameter_supported: bool,
    pub client_id_metadata_document_supported: bool,
}

/// RFC 7591 §2: the client metadata a registration sends (fields Leo reads; others ignored).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct ClientMetadata {
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// RFC 7591 §3.2.1: the registered client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Registered {
    pub client_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub client_id_issued_at: i64,
    /// 0: the secret does not expire (RFC 7591 §3.2.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_expires_at: Option<i64>,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub token_endpoint_auth_method: String,
    pub grant_types: Vec<String>,
    pub response_types: Vec<String>,
}

/// RFC 6749 §5.1: the tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tokens {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: u64,
    pub refresh_token: String,
}

/// RFC 6749 §5.2 (and RFC 7591 §3.2.2): an error, by its registered code.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OAuthError {
    pub error: String,
    pub error_description: String,
}

/// The console's answer to a consent page: approve (as `agent`) or deny.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub approve: bool,
    #[serde(default)]
    pub agent: Option<String>,
}

/// Where the approver's browser goes next: the client's redirect URI with the code, or the
/// error.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Decided {
    pub redirect: String,
}

/// A grant, as `leo agent grants` and the console list it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GrantInfo {
    pub id: String,
    pub agent: String,
    pub client_id: String,
    pub client_name: String,
    pub resource: String,
    pub approved_by: String,
    pub created_ms: i64,
    /// When one of its tokens last opened `/mcp` or was refreshed, as the deciding instance
    /// saw it since it started; absent when not since then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<i64>,
}

/// `GET /api/v1/oauth/grants`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Grants {
    pub grants: Vec<GrantInfo>,
}

/// `DELETE /api/v1/oauth/grants/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Revoked {
    pub revoked: String,
}
