//! The MCP face of the sidecar: what a harness sees on stdio.
//!
//! `initialize` records the harness and decides the mode; `tools/list` answers from the broker's
//! last view (native tools, or the two fallback tools), plus Leo's own `leo_messages` in either
//! mode; `tools/call` forwards to the broker. rmcp answers `ping` and the methods of MCP this server
//! does not offer (-32601, the bare method name) itself; a method MCP does not name at all is
//! answered here (-32601 `method not found: NAME`). rmcp cancels a request's context on
//! `notifications/cancelled`, which `call` turns into a `cancel` frame. With `--channels`, `initialized` also starts the channel pusher.
//!
//! **Architecture Invariant:** the broker decides every allow and deny (`deny_tools`,
//! `allow_tools`, scopes, `leo_messages`); the sidecar only leaves out of its listings what the
//! broker's `denied` list names, and offers its own built-in tools (`leo_messages` and the
//! fallback pair) by the same list, answering a call to one it does not list as denied.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leo_protocol::ipc::{AgentTool, Harness, Mode};
use leo_protocol::offers::OfferKind;
use leo_protocol::tool::Execution;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig,
};
use rmcp::model::{CancelTaskParams, GetTaskParams, GetTaskResult, SubscriptionFilter};
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::model::{CustomRequest, CustomResult, ErrorCode};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use tracing::info;

use crate::call::{self, Ended};
use crate::caps;
use crate::channel;
use crate::cli::Settings;
use crate::fallback::{self, APP_CALL, APP_TOOLS};
use crate::link::BrokerLink;
use crate::logging::LogFilter;
use crate::messages::{self, MESSAGES};
use crate::mode::SessionMode;
use crate::mrtr::Suspended;
use crate::native::{self, Shown};
use crate::offers;
use crate::offline;
use crate::outcome;
use crate::shape;
use crate::task::{self, Tasks};
use crate::view::View;

/// How long a request right after start waits for the first connection attempt to finish, so
/// that a harness that lists or calls at once (codex calls from a cached tool list) gets the
/// broker's answer rather than "not connected yet". Later requests never wait.
const FIRST_CONNECT_WAIT: Duration = Duration::from_millis(500);

/// What the harness reads about this server.
const INSTRUCTIONS: &str = "Tools offered by apps connected to Leo. They come and go as apps \
connect; a failed call says why as \"<code>: <message>\" (no_client: no app serves the tool \
right now).";

/// Added while `leo_messages` is not denied.
const MESSAGES_INSTRUCTIONS: &str = " leo_messages returns the messages API clients sent to this \
agent; each starts with [message from <sender>], the sender Leo authenticated.";

/// Added with `--channels`.
const CHANNEL_INSTRUCTIONS: &str = " New messages are also pushed into the session as channel \
events as they arrive; a pushed message stays unread, so leo_messages returns it once more and \
acknowledges it.";

/// The MCP server; cheap to clone.
#[derive(Clone)]
pub struct Sidecar {
    inner: Arc<Inner>,
    /// Dropped with the last clone of this server, which rmcp holds while the session lives:
    /// then the broker connection closes (see `http`). `None` on stdio, which ends with stdin.
    ended: Option<Arc<tokio::sync::watch::Sender<bool>>>,
}

struct Inner {
    settings: Settings,
    link: Arc<BrokerLink>,
    mode: SessionMode,
    fallback_listed: OnceLock<bool>,
    shown: Arc<Shown>,
    notifier: OnceLock<()>,
    pusher: OnceLock<()>,
    tasks: Tasks,
    suspended: Suspended,
    /// The session's `logging/setLevel`.
    log: LogFilter,
    /// The resource URIs the harness subscribed to (`offers`).
    subscriptions: Arc<offers::Subscriptions>,
    /// Set once the offers' notifier runs.
    offers_notifier: OnceLock<()>,
}

impl Sidecar {
    /// `tools/call`, within its span (see `trace`).
    async fn call_tool_traced(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = match request.arguments {
            Some(map) => Value::Object(map),
            None => Value::Object(Default::default()),
        };
        if let Some(state) = &request.request_state {
            let responses = request.input_responses.as_ref();
            return Ok(self.inner.resume(state, responses, &context).await);
        }
        if let Some((tool, args)) = self.inner.as_task(&request.name, &arguments, &context) {
            let inner = &self.inner;
            let task = inner.tasks.start(
                inner.link.clone(),
                tool,
                args,
                &context,
                inner.settings.progress_every,
                inner.log.clone(),
            );
            return Ok(CallToolResponse::Task(task));
        }
        Ok(self.inner.call(&request.name, arguments, &context).await)
    }

    /// This server, whose broker connection closes once rmcp has let go of it: `ended` is
    /// the sender of the reconnect task's "the harness is gone".
    pub fn ending_with(mut self, ended: tokio::sync::watch::Sender<bool>) -> Sidecar {
        self.ended = Some(Arc::new(ended));
        self
    }

    pub fn new(settings: Settings, link: Arc<BrokerLink>) -> Sidecar {
        Sidecar {
            ended: None,
            inner: Arc::new(Inner {
                settings,
                link,
                mode: SessionMode::default(),
                fallback_listed: OnceLock::new(),
                shown: Arc::new(Shown::default()),
                notifier: OnceLock::new(),
                pusher: OnceLock::new(),
                tasks: Tasks::default(),
                suspended: Suspended::default(),
                log: LogFilter::default(),
                subscriptions: Arc::default(),
                offers_notifier: OnceLock::new(),
            }),
        }
    }
}

impl Inner {
    /// Who request `ctx`'s call reports to.
    fn harness<'a>(&self, ctx: &'a RequestContext<RoleServer>) -> call::Harness<'a> {
        call::Harness::of(ctx, self.settings.progress_every).logging(&self.log, ctx)
    }

    /// Records the harness and decides the mode (once).
    fn harness_seen(&self, client: &Implementation) -> Mode {
        let operator = self.link.view().mode;
        let mode = self
            .mode
            .decide(self.settings.mode, operator, Some(client.name.as_str()));
        let harness = Harness {
            name: client.name.clone(),
            version: client.version.clone(),
        };
        info!(harness = %harness.name, version = %harness.version, mode = ?mode, "harness initialized");
        self.link.set_harness(harness, mode);
        mode
    }

    /// The mode, deciding it from the request's client info if `initialize` was never seen.
    fn mode_for(&self, ctx: &RequestContext<RoleServer>) -> Mode {
        match self.mode.get() {
            Some(m) => m,
            None => match ctx.client_info() {
                Some(client) => self.harness_seen(&client),
                None => self
                    .mode
                    .decide(self.settings.mode, self.link.view().mode, None),
            },
        }
    }

    /// `deny_tools` for this agent: the broker's word, or `config.yaml` before any welcome.
    fn denied(&self, view: &View) -> BTreeSet<String> {
        match &view.denied {
            Some(d) => d.clone(),
            None => self
                .settings
                .local_home()
                .map(|home| offline::denied(home, &self.settings.agent))
                .unwrap_or_default(),
        }
    }

    /// Whether `leo_messages` may be listed, called and pushed for.
    fn messages_allowed(&self, view: &View) -> bool {
        self.offers_builtin(view, MESSAGES)
    }

    fn native_visible(&self, view: &View) -> Vec<AgentTool> {
        view.visible_tools(&self.denied(view))
    }

    /// Whether the fallback pair is listed, sampled at the first `tools/list`.
    fn fallback_listed(&self, view: &View) -> bool {
        *self.fallback_listed.get_or_init(|| {
            let ever = view
                .ever_registered
                // With `--url` no file can tell before the welcome: list the pair, since a
                // session sampled without it would never get it.
                .unwrap_or_else(|| {
                    self.settings
                        .local_home()
                        .is_none_or(offline::ever_registered)
                });
            info!(ever_registered = ever, "fallback tools sampled");
            ever
        })
    }

    /// Whether this sidecar offers its own tool `name` (`leo_messages`, `leo_app_tools`,
    /// `leo_app_call`): not when the broker's `denied` list (or `config.yaml` before any
    /// welcome) names it. The same rule decides what is listed and what is answered, so a
    /// built-in tool is refused exactly when it is not listed, with the broker up or down;
    /// every app tool is the broker's to allow or refuse, and so is the mailbox itself.
    fn offers_builtin(&self, view: &View, name: &str) -> bool {
        !self.denied(view).contains(name)
    }

    /// The call to run as a task, if the harness declared tasks and the tool asks for it:
    /// the app tool's name and arguments (through `leo_app_call` too). A tool the agent is
    /// not offered is not run as a task; the broker refuses the plain call.
    fn as_task(
        &self,
        name: &str,
        arguments: &Value,
        ctx: &RequestContext<RoleServer>,
    ) -> Option<(String, Value)> {
        if !task::supported(ctx) {
            return None;
        }
        let (tool, args) = match name {
            MESSAGES | APP_TOOLS => return None,
            APP_CALL => fallback::parse_call(arguments)
                .ok()
                .map(|c| (c.tool, c.args))?,
            _ => (name.to_owned(), arguments.clone()),
        };
        let view = self.link.view();
        if self.denied(&view).contains(&tool) {
            return None;
        }
        view.tools
            .iter()
            .any(|t| t.name == tool && t.execution == Execution::Task)
            .then_some((tool, args))
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        self.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let view = self.link.view();
        match name {
            MESSAGES | APP_TOOLS | APP_CALL if !self.offers_builtin(&view, name) => {
                outcome::tool_error(
                    "denied",
                    &format!("tool {name:?} is denied to agent {:?}", self.settings.agent),
                )
                .into()
            }
            MESSAGES => messages::fetch(&self.link, ctx).await.into(),
            APP_TOOLS => match self.link.down_reason() {
                Some(reason) => outcome::tool_error("no_client", &reason).into(),
                None => {
                    let tools = fallback::describe(view.revision, &self.native_visible(&view));
                    let offers = offers::list(&self.link).await;
                    outcome::text(offers::describe(tools, &offers)).into()
                }
            },
            APP_CALL => match fallback::parse_call(&arguments) {
                Err(message) => outcome::tool_error("invalid_arguments", &message).into(),
                Ok(c) => match offers::fallback_kind(&c.tool) {
                    Some(kind) => offers::fallback_read(&self.link, kind, c.args).await.into(),
                    None => {
                        let harness = self.harness(ctx);
                        let ended =
                            call::run(&self.link, &c.tool, c.args, harness, ctx.ct.cancelled());
                        self.finish(ended.await, ctx).await
                    }
                },
            },
            _ => {
                let harness = self.harness(ctx);
                let ended = call::run(&self.link, name, arguments, harness, ctx.ct.cancelled());
                self.finish(ended.await, ctx).await
            }
        }
    }

    /// The answer for a call that ended, or stopped to ask in a 2026-07-28 request (then the
    /// request ends with `input_required`; see `mrtr`).
    async fn finish(&self, mut ended: Ended, ctx: &RequestContext<RoleServer>) -> CallToolResponse {
        loop {
            match ended {
                Ended::Result(result) => {
                    let client = ctx.client_info().map(|c| c.name);
                    let features = client.as_deref().and_then(caps::features_for);
                    return shape::for_harness(result, features).into();
                }
                // rmcp does not answer a cancelled request; this result is never sent.
                Ended::Cancelled => {
                    return outcome::tool_error("cancelled", "the harness cancelled the call")
                        .into();
                }
                Ended::Asks(asked) => match self.suspended.suspend(&self.link, *asked) {
                    Ok(response) => return response,
                    Err(live) => {
                        let harness = self.harness(ctx);
                        ended = call::wait(&self.link, live, harness, ctx.ct.cancelled()).await;
                    }
                },
            }
        }
    }

    /// A 2026-07-28 retry with `request_state`: the answer goes to the app and the call goes on.
    async fn resume(
        &self,
        state: &str,
        responses: Option<&rmcp::model::InputResponses>,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        match self.suspended.resume(&self.link, state, responses) {
            Some(live) => {
                let harness = self.harness(ctx);
                let ended = call::wait(&self.link, live, harness, ctx.ct.cancelled()).await;
                self.finish(ended, ctx).await
            }
            None => outcome::tool_error(
                "invalid_arguments",
                "requestState names no call waiting for an answer (it ended, or was answered)",
            )
            .into(),
        }
    }
}

impl ServerHandler for Sidecar {
    #[allow(deprecated)] // `logging` (SEP-2577); MCP 2025-11-25 has it.
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .build();
        task::declare(&mut capabilities);
        let mut instructions = INSTRUCTIONS.to_owned();
        if self.inner.messages_allowed(&self.inner.link.view()) {
            instructions.push_str(MESSAGES_INSTRUCTIONS);
        }
        if self.inner.settings.channels {
            // Opt-in only: see `channel` for why this is not declared by default.
            capabilities.experimental = Some(channel::declare(capabilities.experimental.take()));
            instructions.push_str(CHANNEL_INSTRUCTIONS);
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("leo-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    /// Every version that has an `initialize` handshake, and 2026-07-28 with `--discover`
    /// (see `discover`).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        let newest = if self.inner.settings.discover {
            ProtocolVersion::LATEST
        } else {
            ProtocolVersion::LATEST_WITH_INITIALIZE
        };
        Cow::Borrowed(ProtocolVersion::known_up_to(&newest))
    }

    /// 2026-07-28: tool, prompt and resource list changes, and resource updates (`offers`).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        offers::accepted_filter(requested)
    }

    /// 2026-07-28: a native session's tool `list_changed`, and the offers' notifications, go
    /// out on the listen stream.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let inner = self.inner.clone();
        let offers = offers::listen(&context, inner.link.offers.subscribe());
        inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let client = context.request_context().client_info();
        let operator = inner.link.view().mode;
        let name = client.as_ref().map(|c| c.name.as_str());
        if context.accepted().tools_list_changed == Some(true) {
            inner.mode.subscribed(inner.settings.mode, operator, name);
        }
        if inner.mode_for(context.request_context()) != Mode::Native {
            offers.await;
            return Ok(());
        }
        let views = inner.link.subscribe();
        let tools = native::listen(&context, views, move |view| inner.native_visible(view));
        tokio::join!(tools, offers);
        Ok(())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        // The broker's welcome may carry the operator's mode for this agent.
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        self.inner.harness_seen(&request.client_info);
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.inner.offers_notifier.set(()).is_ok() {
            tokio::spawn(offers::notify(
                context.peer.clone(),
                self.inner.link.offers.subscribe(),
                self.inner.subscriptions.clone(),
            ));
        }
        if self.inner.settings.channels && self.inner.pusher.set(()).is_ok() {
            let inner = self.inner.clone();
            tokio::spawn(channel::push_arrivals(
                context.peer.clone(),
                self.inner.link.subscribe_arrivals(),
                move || inner.messages_allowed(&inner.link.view()),
            ));
        }
        if self.inner.mode.get() != Some(Mode::Native) || self.inner.notifier.set(()).is_err() {
            return;
        }
        let inner = self.inner.clone();
        let views = self.inner.link.subscribe();
        let shown = self.inner.shown.clone();
        tokio::spawn(native::notify_changes(
            context.peer.clone(),
            views,
            shown,
            move |view| inner.native_visible(view),
        ));
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let inner = &self.inner;
        inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let view = inner.link.view();
        let mut tools: Vec<_> = match inner.mode_for(&context) {
            Mode::Native => {
                let visible = inner.native_visible(&view);
                inner.shown.listed(&visible);
                visible.iter().map(native::to_mcp_tool).collect()
            }
            Mode::Fallback => {
                if inner.fallback_listed(&view) {
                    fallback::tools(&inner.denied(&view))
                } else {
                    Vec::new()
                }
            }
        };
        // Leo's own tool, in either mode: it needs no app, only the broker.
        if inner.messages_allowed(&view) {
            tools.push(messages::tool());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        use opentelemetry::context::FutureExt as _;
        // The first connection's welcome may name the exporter: the span starts after it.
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let cx = crate::trace::start_call(&request.name, &context);
        let response = self
            .call_tool_traced(request, context)
            .with_context(cx.clone());
        let response = response.await;
        if let Ok(r) = &response {
            crate::trace::end_call(&cx, r);
        }
        response
    }

    /// `logging/setLevel`: the level the app's log messages must reach to be sent (`logging`).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.log.set(request.level);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        offers::prompts(&self.inner.link).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let params = offers::params_of(&request);
        let read = offers::read::<GetPromptResult>(&self.inner.link, OfferKind::Prompt, params);
        read.await.map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        offers::resources(&self.inner.link).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        offers::templates(&self.inner.link).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let params = offers::params_of(&request);
        let read =
            offers::read::<ReadResourceResult>(&self.inner.link, OfferKind::Resource, params);
        read.await.map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.subscriptions.add(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.subscriptions.remove(&request.uri);
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.inner.link.wait_settled(FIRST_CONNECT_WAIT).await;
        let params = offers::params_of(&request);
        offers::read(&self.inner.link, OfferKind::Complete, params).await
    }

    /// A method rmcp does not know: -32601 saying so, where rmcp's own answer is the bare name.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {}", request.method),
            None,
        ))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.inner
            .tasks
            .get(&request.task_id)
            .map(GetTaskResult::new)
    }

    /// `tasks/cancel`: the broker's request ends `cancelled_by_agent`.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.tasks.cancel(&request.task_id)
    }
}
