//! `leo-bench-floor`: the floor of the relay benchmark.
//!
//! A tiny rmcp stdio server that answers the bench's tools itself, with the same payloads the
//! app sends through Leo, on the same kind of runtime as `leo-mcp` (one thread). Whatever
//! `leo-mcp` → broker → app costs on top of this is the relay's overhead. Like `leo-mcp`, it
//! reads and writes its pipes on the IO reactor, not through Tokio's blocking stdio.

use std::collections::HashMap;
use std::sync::Arc;

use leo_bench::payload::{self, PAYLOADS};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};

#[derive(Clone)]
struct Floor {
    tools: Arc<Vec<Tool>>,
    results: Arc<HashMap<&'static str, CallToolResult>>,
}

impl Floor {
    fn new() -> anyhow::Result<Floor> {
        let schema: JsonObject = match payload::input_schema() {
            serde_json::Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        let schema = Arc::new(schema);
        let mut tools = Vec::new();
        let mut results = HashMap::new();
        for p in PAYLOADS {
            tools.push(Tool::new(p.tool, p.description(), schema.clone()));
            let blocks: Vec<ContentBlock> = serde_json::from_value(p.content())?;
            results.insert(p.tool, CallToolResult::success(blocks));
        }
        Ok(Floor {
            tools: Arc::new(tools),
            results: Arc::new(results),
        })
    }
}

impl ServerHandler for Floor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("leo-bench-floor", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        match self.results.get(request.name.as_ref()) {
            Some(result) => Ok(result.clone().into()),
            None => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "unknown tool {:?}",
                request.name
            ))])
            .into()),
        }
    }
}

fn main() -> anyhow::Result<()> {
    let floor = Floor::new()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // rmcp's own non-blocking stdio (the bench launches it with pipes): leo-mcp drives its
        // pipes on the IO reactor too, so the floor must not pay a thread hand-off it does not.
        let service = floor.serve(rmcp::transport::stdio_pipes()).await?;
        service.waiting().await?;
        anyhow::Ok(())
    })
}
