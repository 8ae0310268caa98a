//! MCP tasks (`io.modelcontextprotocol/tasks`, as rmcp 3.11 implements it): a call that runs
//! as a task, so a handoff does not block the harness's conversation.
//!
//! Only a harness that declares the extension gets tasks, and only for tools whose
//! registration says `execution: "task"` (handoffs, `timeout_s: 0`, by default). `tools/call`
//! then answers at once with the task; `tasks/get` reports `working` until the broker's result
//! arrives and then carries the result (or the tool error) inline; `tasks/cancel` cancels the
//! broker's request, which the app sees as `client_tool.cancelled` with reason
//! `cancelled_by_agent`, exactly as for `notifications/cancelled`. Tasks are kept while the
//! sidecar runs (no expiry), since a handoff may wait for days.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CreateTaskResult, JsonObject, TASKS_EXTENSION_ID};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;
use tracing::debug;

use crate::call::{self, Ended, Harness};
use crate::link::BrokerLink;

/// How often a harness is asked to poll `tasks/get`, in milliseconds.
const POLL_MS: u64 = 2_000;

/// The tasks of this session.
#[derive(Default)]
pub struct Tasks {
    manager: TaskManager,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

/// Whether the client of this request declared the tasks extension.
pub fn supported(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// The extension as this server declares it.
pub fn declare(caps: &mut rmcp::model::ServerCapabilities) {
    caps.extensions
        .get_or_insert_with(Default::default)
        .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
}

impl Tasks {
    /// Starts `tool(arguments)` as a task and returns it for the `tools/call` answer.
    pub fn start(
        &self,
        link: Arc<BrokerLink>,
        tool: String,
        arguments: Value,
        ctx: &RequestContext<RoleServer>,
        progress_every: Duration,
        log: crate::logging::LogFilter,
    ) -> CreateTaskResult {
        let peer = ctx.peer.clone();
        let options = TaskOptions::new()
            .with_ttl_ms(None)
            .with_poll_interval_ms(POLL_MS)
            .with_status_message("waiting for the app to answer");
        let task = self.manager.spawn(options, move |tctx| {
            Box::pin(async move {
                let harness = Harness {
                    peer: &peer,
                    progress: None,
                    progress_every,
                    asks_by_result: false,
                    // A task's request has been answered: its questions have no stream but
                    // the standalone one.
                    origin: None,
                    log,
                };
                match call::run(&link, &tool, arguments, harness, tctx.cancelled()).await {
                    Ended::Result(result) => Ok(result),
                    Ended::Cancelled => Err(TaskExit::Cancelled),
                    // Not produced without `asks_by_result`.
                    Ended::Asks(asked) => {
                        link.cancel(asked.live.id);
                        Err(TaskExit::Cancelled)
                    }
                }
            })
        });
        debug!(task = %task.task_id, "call runs as a task");
        CreateTaskResult::new(task)
    }

    pub fn get(&self, id: &str) -> Result<rmcp::model::DetailedTask, McpError> {
        self.manager.get_task(id)
    }

    pub fn cancel(&self, id: &str) -> Result<(), McpError> {
        self.manager.cancel_task(id)
    }
}
