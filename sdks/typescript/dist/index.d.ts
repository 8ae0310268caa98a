export { App, type AppOptions, type Status, defaultHome } from "./app.js";
export type { Answer, Call } from "./call.js";
export { LOG_LEVELS, type LogLevel } from "./call.js";
export { Reply, ToolError, content, type ContentBlock } from "./reply.js";
export { type Handler, type JsonSchema, type ToolAnnotations, type ToolOptions, type ZodLike, inlineRefs } from "./tool.js";
export { FatalError, InputUnsupported, Refused } from "./transport.js";
export { type Read, ReadError, type ReadHandler } from "./offers.js";
