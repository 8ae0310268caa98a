//! Prompts, resources and resource templates: what an app offers agents besides tools.
//!
//! They are registered with a group's tools (`RegisterBody`'s `prompts`, `resources` and
//! `resource_templates`) and follow the group's scope (`agents`). A read (`prompts/get`,
//! `resources/read`, `completion/complete`) is not a call: it has no claim, no result on disk
//! and no history row. It is a short request over the serving app's stream
//! (`client_offer.request`) answered once with [`OfferAnswerBody`]; its `result` is MCP's
//! result object, which the broker relays to the agent verbatim.
//!
//! **Why not a call:** a call's durability (parked on disk, claimed, resumed after a restart)
//! exists so that work with effects is done once. A read has no effects and an agent asks it
//! again at will, so it needs none of that, and the agent waits at most [`OFFER_TIMEOUT_S`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::AppError;
use crate::limits::{MAX_DESCRIPTION, MAX_LABEL, MAX_TOOL_NAME};
use crate::names::ClientId;
use crate::tool::{ToolError, is_reserved_name, is_valid_tool_name};

/// At most this many prompts, resources and templates, each, per group.
pub const MAX_OFFERS_PER_GROUP: usize = 64;
/// The longest resource URI or URI template, in bytes.
pub const MAX_URI: usize = 2048;
/// At most this many arguments per prompt.
pub const MAX_PROMPT_ARGUMENTS: usize = 32;
/// How long the broker waits for an app's answer to a read.
pub const OFFER_TIMEOUT_S: u64 = 30;
/// The SSE event that asks an app for a read; its body is an [`OfferRequest`].
pub const OFFER_EVENT: &str = "client_offer.request";

/// A prompt as an app registers it and an agent lists it (MCP's `Prompt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<PromptArgument>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptArgument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
}

/// A resource at a fixed URI (MCP's `Resource`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceDef {
    pub uri: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// Resources whose URIs match an RFC 6570 template (MCP's `ResourceTemplate`); the broker
/// matches level-1 expressions (`{name}`), each standing for one or more characters but `/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceTemplateDef {
    pub uri_template: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// What one agent is offered: the `offers` frame's lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfferList {
    #[serde(default)]
    pub prompts: Vec<PromptDef>,
    #[serde(default)]
    pub resources: Vec<ResourceDef>,
    #[serde(default)]
    pub resource_templates: Vec<ResourceTemplateDef>,
}

/// The kind of read an agent asks for; its `params` are MCP's params of that method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OfferKind {
    /// `prompts/get`: params `{name, arguments}`; result `{description?, messages}`.
    Prompt,
    /// `resources/read`: params `{uri}`; result `{contents}`.
    Resource,
    /// `completion/complete`: params `{ref, argument, context?}`; result `{completion}`.
    Complete,
}

impl OfferKind {
    /// The MCP method this kind answers.
    pub fn method(self) -> &'static str {
        match self {
            OfferKind::Prompt => "prompts/get",
            OfferKind::Resource => "resources/read",
            OfferKind::Complete => "completion/complete",
        }
    }
}

/// `client_offer.request`: the broker asks the app `client_id` for a read. Only that app
/// answers; other apps' SDKs skip the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferRequest {
    pub id: String,
    pub client_id: ClientId,
    pub group: String,
    pub agent: String,
    pub kind: OfferKind,
    pub params: Value,
}

/// `POST /api/v1/client-offers/requests/{id}/answer`: MCP's result object, or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfferAnswerBody {
    pub client_id: ClientId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AppError>,
}

/// The answer route's reply: the read `id` was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferAck {
    pub id: String,
}

/// The updated route's reply: `sessions` agent sessions were told about `uri`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdatedAck {
    pub uri: String,
    pub sessions: usize,
}

/// How a read ended: MCP's result object, or why not (an error code and message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OfferOutcome {
    Result { result: Value },
    Error { error: AppError },
}

impl OfferAnswerBody {
    /// Exactly one of `result` (a JSON object) and `error`.
    pub fn into_outcome(self) -> Result<OfferOutcome, String> {
        match (self.result, self.error) {
            (Some(result), None) if result.is_object() => Ok(OfferOutcome::Result { result }),
            (Some(_), None) => Err("at $.result: must be an object (MCP's result)".into()),
            (None, Some(error)) => Ok(OfferOutcome::Error { error }),
            _ => Err("at $: give exactly one of result and error".into()),
        }
    }
}

/// `POST /api/v1/client-offers/updated`: the resource at `uri` changed; agents that
/// subscribed to it are told (`notifications/resources/updated`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceUpdatedBody {
    pub client_id: ClientId,
    pub uri: String,
}

fn fail(at: &str, message: String) -> ToolError {
    ToolError {
        message: format!("at {at}: {message}"),
    }
}

/// A name of the tool rules: 1 to 64 of `[A-Za-z0-9_-]`, not `leo_…`.
fn check_name(name: &str, at: &str) -> Result<(), ToolError> {
    if !is_valid_tool_name(name) {
        return Err(fail(
            at,
            format!("name {name:?} must be 1 to {MAX_TOOL_NAME} of [A-Za-z0-9_-]"),
        ));
    }
    if is_reserved_name(name) {
        return Err(fail(at, format!("name {name:?} uses the reserved prefix")));
    }
    Ok(())
}

/// Optional text shown to a person: 1 to `max` characters, no control characters.
fn check_text(text: Option<&str>, max: usize, at: &str) -> Result<(), ToolError> {
    let Some(text) = text else { return Ok(()) };
    let n = text.chars().count();
    if n == 0 || n > max || text.trim().is_empty() {
        return Err(fail(at, format!("must be 1 to {max} characters, got {n}")));
    }
    if !crate::sanitize::is_clean(text, crate::sanitize::Lines::Keep) {
        return Err(fail(at, "must not hold control characters".into()));
    }
    Ok(())
}

/// A URI or template: 1 to [`MAX_URI`] bytes with a scheme, no spaces or control characters.
fn check_uri(uri: &str, at: &str) -> Result<(), ToolError> {
    let scheme = uri.split_once(':').map(|(s, _)| s).unwrap_or("");
    let scheme_ok = !scheme.is_empty()
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if uri.is_empty() || uri.len() > MAX_URI || !scheme_ok {
        return Err(fail(
            at,
            format!("{uri:?} must be a URI with a scheme, at most {MAX_URI} bytes"),
        ));
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(fail(at, format!("{uri:?} must not hold spaces")));
    }
    Ok(())
}

impl PromptDef {
    /// Checks the prompt at `at` (such as `$.prompts[0]`).
    pub fn check(&self, at: &str) -> Result<(), ToolError> {
        check_name(&self.name, &format!("{at}.name"))?;
        check_text(self.title.as_deref(), MAX_LABEL, &format!("{at}.title"))?;
        let description = self.description.as_deref();
        check_text(description, MAX_DESCRIPTION, &format!("{at}.description"))?;
        if self.arguments.len() > MAX_PROMPT_ARGUMENTS {
            return Err(fail(
                &format!("{at}.arguments"),
                format!("at most {MAX_PROMPT_ARGUMENTS} arguments"),
            ));
        }
        for (i, a) in self.arguments.iter().enumerate() {
            let at = format!("{at}.arguments[{i}]");
            if !is_valid_tool_name(&a.name) {
                let m = format!("name {:?} must be 1 to 64 of [A-Za-z0-9_-]", a.name);
                return Err(fail(&format!("{at}.name"), m));
            }
            check_text(a.title.as_deref(), MAX_LABEL, &format!("{at}.title"))?;
            let description = a.description.as_deref();
            check_text(description, MAX_DESCRIPTION, &format!("{at}.description"))?;
        }
        Ok(())
    }
}

impl ResourceDef {
    /// Checks the resource at `at` (such as `$.resources[0]`).
    pub fn check(&self, at: &str) -> Result<(), ToolError> {
        check_uri(&self.uri, &format!("{at}.uri"))?;
        check_text(Some(&self.name), MAX_LABEL, &format!("{at}.name"))?;
        check_text(self.title.as_deref(), MAX_LABEL, &format!("{at}.title"))?;
        let description = self.description.as_deref();
        check_text(description, MAX_DESCRIPTION, &format!("{at}.description"))?;
        check_text(
            self.mime_type.as_deref(),
            MAX_LABEL,
            &format!("{at}.mime_type"),
        )
    }
}

impl ResourceTemplateDef {
    /// Checks the template at `at` (such as `$.resource_templates[0]`): its expressions are
    /// level 1 (`{name}`), balanced, and not side by side.
    pub fn check(&self, at: &str) -> Result<(), ToolError> {
        let uat = format!("{at}.uri_template");
        check_uri(&self.uri_template, &uat)?;
        if template_parts(&self.uri_template).is_none() {
            return Err(fail(
                &uat,
                format!(
                    "{:?}: expressions must be {{name}} of [A-Za-z0-9_], with text between them",
                    self.uri_template
                ),
            ));
        }
        check_text(Some(&self.name), MAX_LABEL, &format!("{at}.name"))?;
        check_text(self.title.as_deref(), MAX_LABEL, &format!("{at}.title"))?;
        let description = self.description.as_deref();
        check_text(description, MAX_DESCRIPTION, &format!("{at}.description"))?;
        check_text(
            self.mime_type.as_deref(),
            MAX_LABEL,
            &format!("{at}.mime_type"),
        )
    }

    /// True when `uri` is one of this template's URIs.
    pub fn matches(&self, uri: &str) -> bool {
        template_parts(&self.uri_template).is_some_and(|parts| matches_parts(&parts, uri))
    }
}

/// A template split into its literal texts: `a{x}b{y}` is `["a", "b", ""]`, each pair of
/// neighbours separated by one expression. `None` when the template is not level 1.
fn template_parts(template: &str) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}')? + open;
        let var = &rest[open + 1..close];
        let ok = !var.is_empty() && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok || rest[..open].contains('}') {
            return None;
        }
        if !parts.is_empty() && open == 0 {
            return None;
        }
        parts.push(&rest[..open]);
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return None;
    }
    parts.push(rest);
    Some(parts)
}

/// Whether `uri` is the literals of `parts` with one or more characters but `/` between each.
fn matches_parts(parts: &[&str], uri: &str) -> bool {
    let Some((first, others)) = parts.split_first() else {
        return false;
    };
    let Some(mut rest) = uri.strip_prefix(first) else {
        return false;
    };
    for (i, lit) in others.iter().enumerate() {
        let last = i + 1 == others.len();
        let end = if last {
            if lit.is_empty() {
                Some(rest.len())
            } else {
                rest.strip_suffix(lit).map(str::len)
            }
        } else {
            rest.find(lit).filter(|_| !lit.is_empty())
        };
        let Some(end) = end else { return false };
        let value = &rest[..end];
        if value.is_empty() || value.contains('/') {
            return false;
        }
        rest = &rest[end + lit.len()..];
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(t: &str) -> ResourceTemplateDef {
        ResourceTemplateDef {
            uri_template: t.into(),
            name: "t".into(),
            title: None,
            description: None,
            mime_type: None,
        }
    }

    #[test]
    fn templates_match_one_segment_per_expression() {
        let t = template("test://template/{id}/data");
        assert!(t.check("$.resource_templates[0]").is_ok());
        assert!(t.matches("test://template/123/data"));
        assert!(!t.matches("test://template//data"));
        assert!(!t.matches("test://template/1/2/data"));
        assert!(!t.matches("test://template/1/datax"));
        let tail = template("file:///{name}");
        assert!(tail.matches("file:///a.txt"));
        assert!(!tail.matches("file:///"));
        let fixed = template("test://fixed");
        assert!(fixed.matches("test://fixed"));
        assert!(!fixed.matches("test://fixed2"));
    }

    #[test]
    fn bad_templates_and_uris_are_refused_with_their_path() {
        for bad in [
            "test://{a}{b}",
            "test://{a",
            "test://a}",
            "test://{a-b}",
            "no scheme",
        ] {
            let e = template(bad).check("$.resource_templates[1]").unwrap_err();
            assert!(
                e.message
                    .starts_with("at $.resource_templates[1].uri_template: "),
                "{bad}: {}",
                e.message
            );
        }
        let p = PromptDef {
            name: "leo_x".into(),
            title: None,
            description: None,
            arguments: vec![],
        };
        let e = p.check("$.prompts[0]").unwrap_err();
        assert!(
            e.message.starts_with("at $.prompts[0].name: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_answer_is_a_result_object_or_an_error() {
        let body = |v: Value| serde_json::from_value::<OfferAnswerBody>(v).unwrap();
        let ok = body(serde_json::json!({"client_id": "c1", "result": {"contents": []}}));
        assert!(matches!(ok.into_outcome(), Ok(OfferOutcome::Result { .. })));
        let both = body(serde_json::json!({"client_id": "c1", "result": {},
            "error": {"code": "x", "message": "y"}}));
        assert!(both.into_outcome().is_err());
        let text = body(serde_json::json!({"client_id": "c1", "result": "hi"}));
        assert_eq!(
            text.into_outcome().unwrap_err(),
            "at $.result: must be an object (MCP's result)"
        );
    }
}
