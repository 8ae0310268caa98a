//! The numeric limits of the contract (docs/protocol.md, "Limits").
//!
//! They are constants rather than configuration because apps are written against them: a tool
//! accepted by one broker must be accepted by every other.

/// Longest tool name, in characters of `[A-Za-z0-9_-]`.
pub const MAX_TOOL_NAME: usize = 64;
/// Longest tool description, in characters.
pub const MAX_DESCRIPTION: usize = 1024;
/// Longest label, in characters.
pub const MAX_LABEL: usize = 80;
/// Largest input_schema, in bytes of compact JSON.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Most tools in one group.
pub const MAX_TOOLS_PER_GROUP: usize = 64;
/// Most distinct tools in the whole broker.
pub const MAX_TOOLS_PER_BROKER: usize = 64;
/// Longest group name, in characters of `[A-Za-z0-9_.-]`.
pub const MAX_GROUP_NAME: usize = 64;
/// Longest name an app gives itself (`GET /api/v1/events?name=…`), in characters.
pub const MAX_APP_NAME: usize = 64;
/// Largest result content, in bytes of its JSON as the app sent it.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Largest call arguments, in bytes of compact JSON.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;
/// Deepest nesting of arrays and objects in one result content block, and in call arguments
/// (the outermost counts as one). serde_json, which `leo-mcp` and `leo-app` read with, stops at
/// 128; the frames and events that carry the value add a few levels, and this leaves room.
pub const MAX_JSON_DEPTH: usize = 64;
/// `timeout_s` when a tool does not give one.
pub const DEFAULT_TIMEOUT_S: u64 = 600;
/// Largest `timeout_s` a tool may ask for (one week); `0` means never.
pub const MAX_TIMEOUT_S: u64 = 7 * 24 * 3600;
/// Longest app error code.
pub const MAX_ERROR_CODE: usize = 64;
/// Longest app error message, in characters.
pub const MAX_ERROR_MESSAGE: usize = 4096;
/// The prefix reserved for Leo's own tools, compared case-insensitively.
pub const RESERVED_PREFIX: &str = "leo_";
/// Largest IPC frame, in bytes (a 1 MiB result plus its envelope, with room for escaping).
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;
/// Version of the sidecar IPC protocol.
pub const IPC_VERSION: u32 = 1;
