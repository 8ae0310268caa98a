//! An agent played by an rmcp client driving the real `leo-mcp` binary over stdio, as a harness
//! would: start it, list tools, call them, and watch the notifications it sends. Shared by the
//! sidecar's tests, the SDK's, and the broker's (serve-tool, the console's `ask_human`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a call of [`Agent::spawn_call`] ends with.
pub use rmcp::model::CallToolResult;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CustomNotification,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, Implementation, ProgressNotificationParam, ProtocolVersion, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::process::Command;

use crate::{WAIT, bin};

/// What the rmcp client saw from the server besides responses.
#[derive(Debug, Default)]
pub struct Seen {
    pub list_changed: AtomicUsize,
    pub progress: AtomicUsize,
    /// The messages of progress notifications that carried one, in order.
    pub progress_messages: Mutex<Vec<String>>,
    /// The questions (`elicitation/create` messages) the harness was asked, in order.
    pub questions: Mutex<Vec<String>>,
    /// The forms of those questions (`requestedSchema`), as the harness received them.
    pub forms: Mutex<Vec<Value>>,
    /// Custom notifications (`notifications/claude/channel`…), as `(method, params)`.
    pub custom: Mutex<Vec<(String, Value)>>,
    /// Log messages (`notifications/message` params), in order.
    pub logs: Mutex<Vec<Value>>,
    /// Sampling requests (`sampling/createMessage` params), in order.
    pub samples: Mutex<Vec<Value>>,
    /// `notifications/prompts/list_changed` received.
    pub prompts_changed: AtomicUsize,
    /// The URIs of `notifications/resources/updated`, in order.
    pub resources_updated: Mutex<Vec<String>>,
}

impl Seen {
    pub fn prompts_changed(&self) -> usize {
        self.prompts_changed.load(Ordering::SeqCst)
    }
}

/// The harness side: an rmcp client that records notifications.
#[derive(Clone)]
pub struct Harness {
    name: String,
    seen: Arc<Seen>,
    /// What the user answers to every question; `None`: the harness declares no elicitation.
    answers: Option<Value>,
    /// What the model answers to every sampling request; `None`: no sampling declared.
    completes: Option<String>,
}

#[allow(deprecated)] // logging and sampling (SEP-2577); MCP 2025-11-25 has them.
impl ClientHandler for Harness {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.completes.is_some() {
            capabilities.sampling = Some(Default::default());
        }
        if self.answers.is_some() {
            let mut elicitation = ElicitationCapability::default();
            elicitation.form = Some(FormElicitationCapability::default());
            capabilities.elicitation = Some(elicitation);
        }
        ClientConfig::new(
            capabilities,
            Implementation::new(self.name.clone(), "9.9.9"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        {
            self.seen.questions.lock().unwrap().push(message);
            let form = serde_json::to_value(requested_schema).unwrap_or_default();
            self.seen.forms.lock().unwrap().push(form);
        }
        Ok(match &self.answers {
            Some(content) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(content.clone())
            }
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.seen
            .samples
            .lock()
            .unwrap()
            .push(serde_json::to_value(&params).unwrap_or_default());
        let Some(text) = &self.completes else {
            return Err(rmcp::ErrorData::invalid_request("no sampling", None));
        };
        let message = rmcp::model::SamplingMessage::assistant_text(text.clone());
        Ok(rmcp::model::CreateMessageResult::new(
            message,
            "test-model".into(),
        ))
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let params = serde_json::to_value(&params).unwrap_or_default();
        self.seen.logs.lock().unwrap().push(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.seen.list_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.seen.prompts_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.resources_updated.lock().unwrap().push(params.uri);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(message) = params.message {
            self.seen.progress_messages.lock().unwrap().push(message);
        }
        self.seen.progress.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        let params = notification.params.unwrap_or(Value::Null);
        self.seen
            .custom
            .lock()
            .unwrap()
            .push((notification.method, params));
    }
}

/// How to start one `leo-mcp`.
#[derive(Debug, Clone)]
pub struct AgentOpts {
    pub agent: String,
    /// `--mode`; `None` means the default (`auto`).
    pub mode: Option<&'static str>,
    /// The harness's `clientInfo.name`.
    pub client_name: String,
    pub env: Vec<(String, String)>,
    /// Open with `server/discover` (rmcp's `ClientLifecycleMode::Auto`), as 2026-07-28 clients do.
    pub discover_first: bool,
    /// Declare form elicitation and accept every question with this content.
    pub answers: Option<Value>,
    /// Declare sampling and answer every request with this text.
    pub completes: Option<String>,
}

impl AgentOpts {
    pub fn native(agent: &str) -> AgentOpts {
        AgentOpts {
            agent: agent.to_owned(),
            mode: Some("native"),
            client_name: "leo-test-harness".into(),
            env: Vec::new(),
            discover_first: false,
            answers: None,
            completes: None,
        }
    }

    pub fn fallback(agent: &str) -> AgentOpts {
        AgentOpts {
            mode: Some("fallback"),
            ..AgentOpts::native(agent)
        }
    }

    /// `native`, reaching the broker at `url` over TCP (`leo-mcp --url`, through `LEO_URL`)
    /// with `token` (`LEO_AGENT_TOKEN`).
    pub fn remote(agent: &str, url: &str, token: &str) -> AgentOpts {
        AgentOpts::native(agent)
            .env("LEO_URL", url)
            .env("LEO_AGENT_TOKEN", token)
    }

    /// `--mode auto` with the given client name.
    pub fn auto(agent: &str, client_name: &str) -> AgentOpts {
        AgentOpts {
            mode: None,
            client_name: client_name.to_owned(),
            ..AgentOpts::native(agent)
        }
    }

    /// The harness asks its user every question and the user accepts with `content`.
    pub fn answering(mut self, content: Value) -> AgentOpts {
        self.answers = Some(content);
        self
    }

    /// The harness declares sampling and its model answers every request with `text`.
    pub fn completing(mut self, text: &str) -> AgentOpts {
        self.completes = Some(text.to_owned());
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> AgentOpts {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// A running `leo-mcp` with an rmcp client on its stdio.
pub struct Agent {
    pub client: RunningService<RoleClient, Harness>,
    pub seen: Arc<Seen>,
    pub pid: u32,
    pub stderr_path: PathBuf,
}

impl Agent {
    /// Starts `leo-mcp` on `home` and initializes it.
    pub async fn start(home: &Path, opts: AgentOpts) -> Agent {
        Agent::start_with(Command::new(bin("leo-mcp")), home, opts).await
    }

    /// `start` on `host` (a network namespace, see `netns`): with `AgentOpts::remote`, an
    /// agent on another machine than its broker.
    pub async fn start_on(host: &crate::netns::Host, home: &Path, opts: AgentOpts) -> Agent {
        Agent::start_with(host.command(bin("leo-mcp")), home, opts).await
    }

    async fn start_with(mut cmd: Command, home: &Path, opts: AgentOpts) -> Agent {
        let stderr_path = home.join(format!(
            "leo-mcp-{}-{}.stderr",
            opts.agent,
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        cmd.arg("--agent").arg(&opts.agent);
        if let Some(mode) = opts.mode {
            cmd.arg("--mode").arg(mode);
        }
        cmd.env("LEO_HOME", home)
            .env_remove("LEO_AGENT")
            .env("LEO_MCP_LOG", "leo_mcp=debug,rmcp=info");
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        Agent::launch(cmd, &opts, stderr_path).await
    }

    /// Starts a stdio MCP server from a command as a harness's config gives it (such as
    /// `leo-mcp --agent claude` from a `.mcp.json`), and initializes it as `opts.client_name`.
    pub async fn launch(cmd: Command, opts: &AgentOpts, stderr_path: PathBuf) -> Agent {
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn leo-mcp");
        let pid = transport.id().expect("leo-mcp pid");
        let seen = Arc::new(Seen::default());
        let harness = Harness {
            name: opts.client_name.clone(),
            seen: seen.clone(),
            answers: opts.answers.clone(),
            completes: opts.completes.clone(),
        };
        let started = if opts.discover_first {
            let lifecycle = ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            };
            tokio::time::timeout(WAIT, harness.serve_with_lifecycle(transport, lifecycle)).await
        } else {
            tokio::time::timeout(WAIT, harness.serve(transport)).await
        };
        let client = started
            .expect("initialize timed out")
            .expect("initialize failed");
        Agent {
            client,
            seen,
            pid,
            stderr_path,
        }
    }

    /// Every tool, as the harness lists them.
    pub async fn tools(&self) -> Vec<Tool> {
        tokio::time::timeout(WAIT, self.client.peer().list_all_tools())
            .await
            .expect("tools/list timed out")
            .expect("tools/list failed")
    }

    /// The listed tool names, sorted.
    pub async fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tools()
            .await
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        names
    }

    /// The listed tool names, sorted, but Leo's own `leo_messages` (listed in every mode unless
    /// denied; the `messages` tests check it), for tests about the app and fallback tools.
    pub async fn tool_names_without_messages(&self) -> Vec<String> {
        let mut names = self.tool_names().await;
        names.retain(|n| n != "leo_messages");
        names
    }

    /// Calls `name` and waits (bounded) for the result.
    pub async fn call(&self, name: &str, args: Value) -> CallToolResult {
        call(&self.client.peer().clone(), name, args).await
    }

    /// Calls `name` as a 2026-07-28 client does, answering each `input_required` round through
    /// the harness's elicitation handler and calling again, and waits (bounded) for the result.
    pub async fn call_answering_rounds(&self, name: &str, args: Value) -> CallToolResult {
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        tokio::time::timeout(WAIT, self.client.call_tool(params))
            .await
            .expect("tools/call timed out")
            .expect("tools/call failed")
    }

    /// Starts a call in the background.
    pub fn spawn_call(&self, name: &str, args: Value) -> tokio::task::JoinHandle<CallToolResult> {
        let peer = self.client.peer().clone();
        let name = name.to_owned();
        tokio::spawn(async move { call(&peer, &name, args).await })
    }

    pub fn list_changed(&self) -> usize {
        self.seen.list_changed.load(Ordering::SeqCst)
    }

    pub fn progress(&self) -> usize {
        self.seen.progress.load(Ordering::SeqCst)
    }

    /// The params of every custom notification with `method` seen so far.
    pub fn custom(&self, method: &str) -> Vec<Value> {
        self.seen
            .custom
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// SIGKILLs the process.
    pub fn kill(&self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .status();
    }

    /// What leo-mcp logged, for assertion messages.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

async fn call(peer: &rmcp::Peer<RoleClient>, name: &str, args: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(name.to_owned());
    if let Value::Object(map) = args {
        params = params.with_arguments(map);
    }
    tokio::time::timeout(WAIT, peer.call_tool(params))
        .await
        .expect("tools/call timed out")
        .expect("tools/call failed")
}

/// The result's content as JSON, as the harness received it.
pub fn content_json(result: &CallToolResult) -> Value {
    serde_json::to_value(&result.content).expect("content serializes")
}

/// The single text block of a result.
pub fn text_of(result: &CallToolResult) -> String {
    let content = content_json(result);
    assert_eq!(content.as_array().map(Vec::len), Some(1), "{content}");
    content[0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned()
}

/// The text of a tool error, asserting `isError: true`.
pub fn error_text(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    text_of(result)
}

/// Polls `cond` every 20 ms until it holds; panics after `WAIT`.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `tools/list` until `want` holds for the names besides `leo_messages`; panics after
/// `WAIT`.
pub async fn wait_for_tools(agent: &Agent, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let names = agent.tool_names_without_messages().await;
        if want(&names) {
            return names;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tools never matched; last {names:?}\n{}",
            agent.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
