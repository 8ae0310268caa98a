export { App, type AppOptions, type BrokerOptions, type Status, defaultHome } from "./app.js";
export { AlreadyDecided, type ApprovalRequest, Approver, type ApproverOptions, DigestMismatch } from "./approver.js";
export type { Answer, Call } from "./call.js";
export { LOG_LEVELS, type LogLevel } from "./call.js";
export { Reply, ToolError, content, type ContentBlock } from "./reply.js";
export { type Handler, type JsonSchema, type ToolAnnotations, type ToolOptions, type ZodLike, inlineRefs } from "./tool.js";
export { FatalError, InputUnsupported, Refused } from "./transport.js";
export { type Read, ReadError, type ReadHandler } from "./offers.js";
