//! Prompts, resources and resource templates an app offers besides tools, and the reads that
//! ask for them (`leo_protocol::offers`).
//!
//! A read is not a call: it is not claimed and leaves no history. The broker asks one app
//! (`client_offer.request` names its `client_id`), the handler returns MCP's result object,
//! and the app posts it to `…/client-offers/requests/{id}/answer`. The broker waits
//! `OFFER_TIMEOUT_S` at most.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use leo_protocol::content::AppError;
use leo_protocol::offers::{
    OfferAnswerBody, OfferKind, OfferRequest, PromptArgument, PromptDef, ResourceDef,
    ResourceTemplateDef,
};
use serde_json::{Value, json};
use tracing::debug;

use crate::worker::Link;

/// What a read asks: its kind, the agent, and MCP's params of the method (for a prompt
/// `{name, arguments}`, for a resource `{uri}`, for a completion `{ref, argument, context}`).
#[derive(Debug, Clone)]
pub struct Read {
    pub kind: OfferKind,
    pub agent: String,
    pub params: Value,
}

impl Read {
    /// A prompt's argument, for `prompts/get`.
    pub fn argument(&self, name: &str) -> Option<&str> {
        self.params.get("arguments")?.get(name)?.as_str()
    }

    /// The URI read, for `resources/read`.
    pub fn uri(&self) -> Option<&str> {
        self.params.get("uri")?.as_str()
    }
}

type ReadFuture = Pin<Box<dyn Future<Output = Result<Value, AppError>> + Send>>;
pub(crate) type ReadHandler = Arc<dyn Fn(Read) -> ReadFuture + Send + Sync>;

fn handler<F, Fut>(f: F) -> ReadHandler
where
    F: Fn(Read) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, AppError>> + Send + 'static,
{
    Arc::new(move |read| Box::pin(f(read)) as ReadFuture)
}

/// A prompt and the handler that answers `prompts/get` with MCP's `GetPromptResult`
/// (`{"messages": [...]}`), and optionally completes its arguments.
#[derive(Clone)]
pub struct Prompt {
    pub(crate) def: PromptDef,
    pub(crate) get: ReadHandler,
    pub(crate) complete: Option<ReadHandler>,
}

impl Prompt {
    pub fn new<F, Fut>(name: impl Into<String>, get: F) -> Prompt
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AppError>> + Send + 'static,
    {
        Prompt {
            def: PromptDef {
                name: name.into(),
                title: None,
                description: None,
                arguments: Vec::new(),
            },
            get: handler(get),
            complete: None,
        }
    }

    pub fn title(mut self, title: impl Into<String>) -> Prompt {
        self.def.title = Some(title.into());
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Prompt {
        self.def.description = Some(description.into());
        self
    }

    /// Adds an argument.
    pub fn argument(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        required: bool,
    ) -> Prompt {
        self.def.arguments.push(PromptArgument {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            required: Some(required),
        });
        self
    }

    /// Answers `completion/complete` for this prompt's arguments with MCP's `CompleteResult`
    /// (`{"completion": {"values": [...]}}`); without, the answer has no values.
    pub fn complete<F, Fut>(mut self, complete: F) -> Prompt
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AppError>> + Send + 'static,
    {
        self.complete = Some(handler(complete));
        self
    }
}

/// A resource at a fixed URI and the handler that answers `resources/read` with MCP's
/// `ReadResourceResult` (`{"contents": [...]}`).
#[derive(Clone)]
pub struct Resource {
    pub(crate) def: ResourceDef,
    pub(crate) read: ReadHandler,
}

impl Resource {
    pub fn new<F, Fut>(uri: impl Into<String>, name: impl Into<String>, read: F) -> Resource
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AppError>> + Send + 'static,
    {
        Resource {
            def: ResourceDef {
                uri: uri.into(),
                name: name.into(),
                title: None,
                description: None,
                mime_type: None,
            },
            read: handler(read),
        }
    }

    pub fn description(mut self, description: impl Into<String>) -> Resource {
        self.def.description = Some(description.into());
        self
    }

    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Resource {
        self.def.mime_type = Some(mime_type.into());
        self
    }
}

/// Resources whose URIs match a template (`test://items/{id}`), one handler for them all, and
/// optionally the completion of the template's variables.
#[derive(Clone)]
pub struct ResourceTemplate {
    pub(crate) def: ResourceTemplateDef,
    pub(crate) read: ReadHandler,
    pub(crate) complete: Option<ReadHandler>,
}

impl ResourceTemplate {
    pub fn new<F, Fut>(
        uri_template: impl Into<String>,
        name: impl Into<String>,
        read: F,
    ) -> ResourceTemplate
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AppError>> + Send + 'static,
    {
        ResourceTemplate {
            def: ResourceTemplateDef {
                uri_template: uri_template.into(),
                name: name.into(),
                title: None,
                description: None,
                mime_type: None,
            },
            read: handler(read),
            complete: None,
        }
    }

    pub fn description(mut self, description: impl Into<String>) -> ResourceTemplate {
        self.def.description = Some(description.into());
        self
    }

    pub fn mime_type(mut self, mime_type: impl Into<String>) -> ResourceTemplate {
        self.def.mime_type = Some(mime_type.into());
        self
    }

    /// Answers `completion/complete` for the template's variables.
    pub fn complete<F, Fut>(mut self, complete: F) -> ResourceTemplate
    where
        F: Fn(Read) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AppError>> + Send + 'static,
    {
        self.complete = Some(handler(complete));
        self
    }
}

impl std::fmt::Debug for Offered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offered")
            .field("prompts", &self.prompts.len())
            .field("resources", &self.resources.len())
            .field("templates", &self.templates.len())
            .finish()
    }
}

/// Everything an app offers besides tools, and who answers what.
#[derive(Clone, Default)]
pub(crate) struct Offered {
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

impl Offered {
    /// The handler of `read`, if this app offers what it asks.
    fn handler_of(&self, read: &Read) -> Option<ReadHandler> {
        let p = &read.params;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        match read.kind {
            OfferKind::Prompt => {
                let name = text(p.get("name"))?;
                let prompt = self.prompts.iter().find(|x| x.def.name == name)?;
                Some(prompt.get.clone())
            }
            OfferKind::Resource => {
                let uri = text(p.get("uri"))?;
                if let Some(r) = self.resources.iter().find(|r| r.def.uri == uri) {
                    return Some(r.read.clone());
                }
                let template = self.templates.iter().find(|t| t.def.matches(&uri))?;
                Some(template.read.clone())
            }
            OfferKind::Complete => {
                let r = p.get("ref")?;
                let completion = match text(r.get("type"))?.as_str() {
                    "ref/prompt" => {
                        let name = text(r.get("name"))?;
                        let prompt = self.prompts.iter().find(|x| x.def.name == name)?;
                        prompt.complete.clone()
                    }
                    _ => {
                        let uri = text(r.get("uri"))?;
                        let matches = |t: &&ResourceTemplate| {
                            t.def.uri_template == uri || t.def.matches(&uri)
                        };
                        self.templates.iter().find(matches)?.complete.clone()
                    }
                };
                Some(completion.unwrap_or_else(|| handler(no_completion)))
            }
        }
    }
}

/// Tells agents that a resource changed; cheap to clone. Agents whose harness subscribed to
/// the URI get `notifications/resources/updated` and read it again.
#[derive(Clone, Default)]
pub struct Notifier {
    link: Arc<std::sync::Mutex<Option<Arc<Link>>>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

impl Notifier {
    /// The session now serves on `link`.
    pub(crate) fn serving(&self, link: &Arc<Link>) {
        *self.link.lock().unwrap_or_else(|p| p.into_inner()) = Some(link.clone());
    }

    /// Says the resource at `uri` (one of this app's resources, or matching one of its
    /// templates) changed. `Err` while the app is not connected, or when the broker refuses
    /// (`not_found`: no agent is offered it by this app; nobody is told).
    pub async fn resource_updated(&self, uri: &str) -> crate::Result<usize> {
        let link = self.link.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(link) = link else {
            return Err(crate::Error::Config("the app is not connected yet".into()));
        };
        let body = leo_protocol::offers::ResourceUpdatedBody {
            client_id: link.client_id.clone(),
            uri: uri.to_owned(),
        };
        let bytes = serde_json::to_vec(&body).map_err(|e| crate::Error::Config(e.to_string()))?;
        let answer = link
            .client
            .post_json("/api/v1/client-offers/updated", bytes)
            .await?;
        let ack: leo_protocol::offers::UpdatedAck = answer.data()?;
        Ok(ack.sessions)
    }
}

/// Puts each group's offered definitions into its registration, checked; an offer for a
/// group the app does not declare is a configuration error.
pub(crate) fn attach(
    groups: &mut [crate::app::Group],
    offered: &HashMap<String, Offered>,
) -> crate::Result<()> {
    let config = |group: &str, e: leo_protocol::tool::ToolError| {
        crate::Error::Config(format!("group {group:?}: {e}"))
    };
    for (name, o) in offered {
        let Some(group) = groups.iter_mut().find(|g| g.name == *name) else {
            return Err(crate::Error::Config(format!(
                "prompts or resources offered in group {name:?}, which is not declared"
            )));
        };
        for (i, p) in o.prompts.iter().enumerate() {
            p.def
                .check(&format!("$.prompts[{i}]"))
                .map_err(|e| config(name, e))?;
            group.prompts.push(p.def.clone());
        }
        for (i, r) in o.resources.iter().enumerate() {
            r.def
                .check(&format!("$.resources[{i}]"))
                .map_err(|e| config(name, e))?;
            group.resources.push(r.def.clone());
        }
        for (i, t) in o.templates.iter().enumerate() {
            let at = format!("$.resource_templates[{i}]");
            t.def.check(&at).map_err(|e| config(name, e))?;
            group.templates.push(t.def.clone());
        }
    }
    Ok(())
}

async fn no_completion(_: Read) -> Result<Value, AppError> {
    Ok(json!({"completion": {"values": [], "hasMore": false}}))
}

/// Answers a `client_offer.request` for this client in a task of its own.
pub(crate) fn serve(
    offered: &Arc<HashMap<String, Offered>>,
    link: &Arc<Link>,
    request: OfferRequest,
) {
    if request.client_id != link.client_id {
        return;
    }
    let read = Read {
        kind: request.kind,
        agent: request.agent,
        params: request.params,
    };
    let handler = offered
        .get(&request.group)
        .and_then(|o| o.handler_of(&read));
    let link = link.clone();
    let id = request.id;
    tokio::spawn(async move {
        let outcome = match handler {
            Some(h) => h(read).await,
            None => Err(AppError {
                code: "not_found".into(),
                message: "this app does not offer it".into(),
            }),
        };
        let (result, error) = match outcome {
            Ok(result) => (Some(result), None),
            Err(error) => (None, Some(error)),
        };
        let body = OfferAnswerBody {
            client_id: link.client_id.clone(),
            result,
            error,
        };
        let path = format!("/api/v1/client-offers/requests/{id}/answer");
        let posted = match serde_json::to_vec(&body) {
            Ok(bytes) => link
                .client
                .post_json(&path, bytes)
                .await
                .and_then(|answer| answer.data::<Value>())
                .map(drop),
            Err(e) => return debug!(read = %id, error = %e, "cannot write the answer"),
        };
        if let Err(e) = posted {
            debug!(read = %id, error = %e, "the answer was not taken");
        }
    });
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompt")
            .field("def", &self.def)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("def", &self.def)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ResourceTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceTemplate")
            .field("def", &self.def)
            .finish_non_exhaustive()
    }
}
