//! How a call's ending looks to the harness.
//!
//! Content from the app passes through as MCP content blocks, images and all; structured content
//! as `structuredContent`, with a text block of its JSON when the app sent no blocks. Every failure,
//! whether the broker's (`no_client`, `timeout`, `cancelled`, `denied`, `invalid_arguments`) or
//! the app's own code, is a tool result with `isError: true` and one text block
//! `"<code>: <message>"`: models read tool errors, while JSON-RPC errors are usually shown to
//! nobody.

use leo_protocol::ipc::Outcome;
use leo_protocol::sanitize::{Lines, sanitize};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

/// How a call ended, with the content already in rmcp's blocks.
pub type Ending = Outcome<Vec<ContentBlock>>;

/// The ending of an outcome read as JSON values.
pub fn ending(outcome: Outcome) -> Ending {
    match outcome {
        Outcome::Content {
            content,
            structured_content,
        } => Outcome::Content {
            content: content_blocks(content),
            structured_content,
        },
        Outcome::Error { error } => Outcome::Error { error },
    }
}

/// The tool result for an ending.
pub fn to_result(ending: Ending) -> CallToolResult {
    match ending {
        Outcome::Content {
            content,
            structured_content: None,
        } => CallToolResult::success(content),
        Outcome::Content {
            mut content,
            structured_content: Some(structured),
        } => {
            // Clients that read only `content` still get the data (MCP's advice).
            if content.is_empty() {
                content.push(ContentBlock::text(structured.to_string()));
            }
            let mut result = CallToolResult::success(content);
            result.structured_content = Some(structured);
            result
        }
        Outcome::Error { error } => tool_error(&error.code, &error.message),
    }
}

/// A tool error `"<code>: <message>"`. The message may be an app's, so it goes through the
/// one sanitizer (the broker applied it too; a second pass changes nothing).
pub fn tool_error(code: &str, message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        sanitize(code, Lines::Join),
        sanitize(message, Lines::Keep)
    ))])
}

/// A successful result of one text block.
pub fn text(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// Turns the app's blocks into rmcp's. The broker checked every block's shape already; a block
/// rmcp still cannot read (a field of an unexpected type in `annotations`, say) is passed as a
/// text block holding its JSON, so nothing the app sent is silently dropped.
pub fn content_blocks(content: Vec<Value>) -> Vec<ContentBlock> {
    content
        .into_iter()
        .map(|block| {
            serde_json::from_value::<ContentBlock>(block.clone()).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "content block not understood; passing it as text");
                ContentBlock::text(block.to_string())
            })
        })
        .collect()
}
