//! Prompts, resources, templates and completions (`leo_protocol::offers`): what apps offer
//! besides tools, listed and read through the broker for the harness.
//!
//! Lists are asked for when the harness lists (`list_offers`), not kept here: they change
//! rarely, and an `offers_changed` frame says when, which becomes `list_changed` for prompts
//! and resources. A read (`prompts/get`, `resources/read`, `completion/complete`) is an
//! `offer` frame answered by `offer_result`, whose result object is the app's, relayed as it
//! came. Subscriptions are the harness's own: the sidecar keeps the URIs it subscribed to
//! and passes on `resource_updated` for those only.
//!
//! Fallback harnesses, which see only `leo_app_tools` and `leo_app_call`, reach the same
//! reads through `leo_app_call` with the reserved tool names of [`FALLBACK_TOOLS`] (see
//! `fallback`), and `leo_app_tools` lists the prompts and resources after the tools.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use leo_protocol::ipc::{BrokerFrame, SidecarFrame};
use leo_protocol::offers::{OfferKind, OfferList, OfferOutcome};
use rmcp::ErrorData as McpError;
use rmcp::model::ErrorCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use tracing::debug;

use crate::link::{BrokerLink, CONNECTION_LOST};

/// What the broker said about offers, for the harness's notifications.
#[derive(Debug, Clone, PartialEq)]
pub enum OfferEvent {
    /// Prompts, resources or templates changed (or the broker connection came back).
    Changed,
    /// The resource at this URI changed.
    Updated(String),
}

/// The reads waiting for the broker, and the notifications it sent.
#[derive(Debug)]
pub struct LinkOffers {
    waiting: Mutex<HashMap<u64, oneshot::Sender<BrokerFrame>>>,
    events: broadcast::Sender<OfferEvent>,
}

impl Default for LinkOffers {
    fn default() -> LinkOffers {
        LinkOffers {
            waiting: Mutex::default(),
            events: broadcast::channel(64).0,
        }
    }
}

impl LinkOffers {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<BrokerFrame>>> {
        // One insert or remove per section: a poisoned lock is still consistent.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A frame of this module's kinds from the broker.
    pub fn apply(&self, frame: BrokerFrame) {
        let id = match &frame {
            BrokerFrame::Offers { id, .. } | BrokerFrame::OfferResult { id, .. } => *id,
            BrokerFrame::OffersChanged => return self.notify(OfferEvent::Changed),
            BrokerFrame::ResourceUpdated { uri } => {
                return self.notify(OfferEvent::Updated(uri.clone()));
            }
            _ => return,
        };
        match self.waiting().remove(&id) {
            Some(tx) => drop(tx.send(frame)),
            None => debug!(read = id, "an answer nobody waits for"),
        }
    }

    /// Every read in flight fails: the connection dropped.
    pub fn detached(&self) {
        self.waiting().clear();
    }

    pub fn notify(&self, event: OfferEvent) {
        // Nobody listening (no native harness) is normal.
        let _ = self.events.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<OfferEvent> {
        self.events.subscribe()
    }
}

/// Sends the frame `make(id)` and waits for the broker's answer.
async fn ask(
    link: &BrokerLink,
    make: impl FnOnce(u64) -> SidecarFrame,
) -> Result<BrokerFrame, McpError> {
    let id = link.next_id();
    let (tx, rx) = oneshot::channel();
    link.offers.waiting().insert(id, tx);
    if let Err(reason) = link.send(make(id)) {
        link.offers.waiting().remove(&id);
        return Err(unavailable(&reason));
    }
    rx.await.map_err(|_| unavailable(CONNECTION_LOST))
}

fn unavailable(reason: &str) -> McpError {
    McpError::new(
        ErrorCode::INTERNAL_ERROR,
        format!("no_client: {reason}"),
        None,
    )
}

/// What this agent is offered now (nothing while the broker is away).
pub async fn list(link: &BrokerLink) -> OfferList {
    if link.down_reason().is_some() {
        return OfferList::default();
    }
    match ask(link, |id| SidecarFrame::ListOffers { id }).await {
        Ok(BrokerFrame::Offers {
            prompts,
            resources,
            resource_templates,
            ..
        }) => OfferList {
            prompts,
            resources,
            resource_templates,
        },
        _ => OfferList::default(),
    }
}

/// A read, answered with the app's result object as MCP's result type `T`.
pub async fn read<T: DeserializeOwned>(
    link: &BrokerLink,
    kind: OfferKind,
    params: Value,
) -> Result<T, McpError> {
    let frame = ask(link, |id| SidecarFrame::Offer { id, kind, params }).await?;
    let BrokerFrame::OfferResult { outcome, .. } = frame else {
        return Err(unavailable("the broker answered another frame"));
    };
    match outcome {
        OfferOutcome::Result { result } => serde_json::from_value(complete(result)).map_err(|e| {
            McpError::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "invalid_result: the app's answer to {} is not MCP's result: {e}",
                    kind.method()
                ),
                None,
            )
        }),
        OfferOutcome::Error { error } => {
            // What the agent asked for that no app offers is its mistake; the rest is the app's.
            // MCP names its own code for a resource not found.
            let code = match (kind, error.code.as_str()) {
                (OfferKind::Resource, "not_found") => ErrorCode::RESOURCE_NOT_FOUND,
                (_, "not_found" | "invalid_parameter") => ErrorCode::INVALID_PARAMS,
                _ => ErrorCode::INTERNAL_ERROR,
            };
            let message = format!("{}: {}", error.code, error.message);
            Err(McpError::new(code, message, None))
        }
    }
}

/// The URIs the harness subscribed to.
#[derive(Debug, Default)]
pub struct Subscriptions(Mutex<BTreeSet<String>>);

impl Subscriptions {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, uri: String) {
        self.lock().insert(uri);
    }

    pub fn remove(&self, uri: &str) {
        self.lock().remove(uri);
    }

    pub fn has(&self, uri: &str) -> bool {
        self.lock().contains(uri)
    }
}

/// Passes the broker's offer events to the harness: `list_changed` for prompts and resources,
/// and `resources/updated` for the URIs it subscribed to. Ends with the session.
pub async fn notify(
    peer: rmcp::Peer<rmcp::RoleServer>,
    mut events: broadcast::Receiver<OfferEvent>,
    subscriptions: std::sync::Arc<Subscriptions>,
) {
    use broadcast::error::RecvError;
    loop {
        let sent = match events.recv().await {
            Ok(OfferEvent::Changed) | Err(RecvError::Lagged(_)) => {
                let prompts = peer.notify_prompt_list_changed().await;
                prompts.and(peer.notify_resource_list_changed().await)
            }
            Ok(OfferEvent::Updated(uri)) if subscriptions.has(&uri) => {
                let params = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                peer.notify_resource_updated(params).await
            }
            Ok(OfferEvent::Updated(_)) => Ok(()),
            Err(RecvError::Closed) => return,
        };
        if sent.is_err() {
            return;
        }
    }
}

/// A result object with `resultType: "complete"` unless it says otherwise: 2026-07-28
/// requires it, and rmcp leaves it out for older sessions.
fn complete(mut result: Value) -> Value {
    if let Value::Object(map) = &mut result {
        map.entry("resultType")
            .or_insert_with(|| Value::String("complete".into()));
    }
    result
}

/// `value` with its snake_case keys in MCP's camelCase (`mime_type`, `uri_template`).
fn camel(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        for (from, to) in [("mime_type", "mimeType"), ("uri_template", "uriTemplate")] {
            if let Some(v) = map.remove(from) {
                map.insert(to.to_owned(), v);
            }
        }
    }
    value
}

/// MCP's list result `T` of `items` under `key`.
fn listed<T: DeserializeOwned, I: serde::Serialize>(key: &str, items: &[I]) -> Result<T, McpError> {
    let items: Vec<Value> = items
        .iter()
        .map(|i| camel(serde_json::to_value(i).unwrap_or_default()))
        .collect();
    serde_json::from_value(complete(serde_json::json!({ key: items })))
        .map_err(|e| McpError::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None))
}

/// `prompts/list`.
pub async fn prompts(link: &BrokerLink) -> Result<rmcp::model::ListPromptsResult, McpError> {
    listed("prompts", &list(link).await.prompts)
}

/// `resources/list`.
pub async fn resources(link: &BrokerLink) -> Result<rmcp::model::ListResourcesResult, McpError> {
    listed("resources", &list(link).await.resources)
}

/// `resources/templates/list`.
pub async fn templates(
    link: &BrokerLink,
) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
    listed("resourceTemplates", &list(link).await.resource_templates)
}

/// MCP's params of a read, as the app gets them: what the harness sent, less its `_meta`.
pub fn params_of<P: serde::Serialize>(params: &P) -> Value {
    let mut value = serde_json::to_value(params).unwrap_or_default();
    if let Value::Object(map) = &mut value {
        map.remove("_meta");
    }
    value
}

/// `leo_app_call`'s tool name that gets a prompt: args `{name, arguments?}`.
pub const PROMPT_TOOL: &str = "leo_prompt";
/// `leo_app_call`'s tool name that reads a resource: args `{uri}`.
pub const RESOURCE_TOOL: &str = "leo_resource";
/// What `leo_app_tools` says of them, beside the lists.
const FALLBACK_HOW: &str = "Get a prompt with leo_app_call {\"tool\": \"leo_prompt\", \"args\": \
{\"name\": NAME, \"arguments\": {…}}}; read a resource (or a URI a template matches) with \
leo_app_call {\"tool\": \"leo_resource\", \"args\": {\"uri\": URI}}.";

/// `leo_app_tools`'s text with the prompts, resources and templates added, when there are any.
pub fn describe(tools_text: String, offers: &OfferList) -> String {
    if offers.prompts.is_empty()
        && offers.resources.is_empty()
        && offers.resource_templates.is_empty()
    {
        return tools_text;
    }
    let Ok(Value::Object(mut all)) = serde_json::from_str::<Value>(&tools_text) else {
        return tools_text;
    };
    all.insert("prompts".into(), serde_json::json!(offers.prompts));
    all.insert("resources".into(), serde_json::json!(offers.resources));
    let templates = serde_json::json!(offers.resource_templates);
    all.insert("resource_templates".into(), templates);
    all.insert("reads".into(), Value::String(FALLBACK_HOW.into()));
    serde_json::to_string_pretty(&all).unwrap_or(tools_text)
}

/// The read `leo_app_call`'s `tool` names, if it is [`PROMPT_TOOL`] or [`RESOURCE_TOOL`].
pub fn fallback_kind(tool: &str) -> Option<OfferKind> {
    match tool {
        PROMPT_TOOL => Some(OfferKind::Prompt),
        RESOURCE_TOOL => Some(OfferKind::Resource),
        _ => None,
    }
}

/// A fallback read through `leo_app_call`: the prompt's messages' contents, or the resource's
/// contents as embedded resource blocks, as the tool's content.
pub async fn fallback_read(
    link: &BrokerLink,
    kind: OfferKind,
    args: Value,
) -> rmcp::model::CallToolResult {
    let result = match read::<Value>(link, kind, args).await {
        Ok(result) => result,
        Err(e) => return crate::outcome::tool_error("failed", &e.message),
    };
    let list = |key: &str| result.get(key).and_then(Value::as_array).cloned();
    let content: Vec<Value> = match kind {
        OfferKind::Prompt => list("messages")
            .unwrap_or_default()
            .into_iter()
            .map(|m| m["content"].clone())
            .collect(),
        _ => list("contents")
            .unwrap_or_default()
            .into_iter()
            .map(|c| serde_json::json!({"type": "resource", "resource": c}))
            .collect(),
    };
    let answer = serde_json::json!({"content": content, "isError": false});
    serde_json::from_value(answer)
        .unwrap_or_else(|e| crate::outcome::tool_error("invalid_result", &e.to_string()))
}

/// 2026-07-28: the offers' notifications on a `subscriptions/listen` stream, as far as its
/// accepted filter asks for them (`list_changed` of prompts and resources, and `updated` of the
/// URIs it names). Ends with the stream.
pub async fn listen(
    context: &rmcp::service::SubscriptionContext,
    mut events: broadcast::Receiver<OfferEvent>,
) {
    use broadcast::error::RecvError;
    let sink = context.sink();
    let accepted = sink.accepted().clone();
    loop {
        let event = tokio::select! {
            () = context.cancelled() => return,
            event = events.recv() => event,
        };
        let sent = match event {
            Ok(OfferEvent::Changed) | Err(RecvError::Lagged(_)) => {
                let mut sent = Ok(());
                if accepted.prompts_list_changed == Some(true) {
                    sent = sink.notify_prompt_list_changed().await;
                }
                if sent.is_ok() && accepted.resources_list_changed == Some(true) {
                    sent = sink.notify_resource_list_changed().await;
                }
                sent
            }
            Ok(OfferEvent::Updated(uri)) => {
                let wanted = accepted.resource_subscriptions.as_ref();
                if wanted.is_some_and(|uris| uris.contains(&uri)) {
                    sink.notify_resource_updated(uri).await
                } else {
                    Ok(())
                }
            }
            Err(RecvError::Closed) => return,
        };
        if sent.is_err() {
            debug!("the listen stream is closed");
            return;
        }
    }
}

/// The part of a 2026-07-28 `subscriptions/listen` filter this server honours: tool, prompt
/// and resource list changes, and updates of the resources named; `None` when none is asked.
pub fn accepted_filter(
    requested: &rmcp::model::SubscriptionFilter,
) -> Option<rmcp::model::SubscriptionFilter> {
    let mut accepted = rmcp::model::SubscriptionFilter::new();
    accepted.tools_list_changed = requested.tools_list_changed.filter(|on| *on);
    accepted.prompts_list_changed = requested.prompts_list_changed.filter(|on| *on);
    accepted.resources_list_changed = requested.resources_list_changed.filter(|on| *on);
    accepted.resource_subscriptions = requested.resource_subscriptions.clone();
    let any = accepted.tools_list_changed.is_some()
        || accepted.prompts_list_changed.is_some()
        || accepted.resources_list_changed.is_some()
        || accepted.resource_subscriptions.is_some();
    any.then_some(accepted)
}
