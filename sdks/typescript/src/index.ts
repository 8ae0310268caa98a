// Offer tools to AI coding agents from a Node app, through the local Leo broker.
//
// The package is split as the Rust SDK is: `app` (settings, tools), `session` (the connection
// loop), `calls` (the book of calls), `worker` (one call from claim to answer), `call` (a call
// as its handler sees it), `tool`, `reply`, `transport` (HTTP and SSE) and `codes` (how a
// refusal is read, the table every SDK shares). This file is the public API.
//
// The connection loop mirrors the Rust and Python SDKs: open the event stream (with
// `Last-Event-ID` after an outage), register every group again, list
// `GET …/requests?pending=1` and serve the unclaimed calls that waited, then serve events until
// the stream ends, and start over after a jittered, doubling delay. A call is claimed, handed to
// its handler, and the reply posted; a tool that `answersAtOnce` posts its reply with
// `"claim": true` in one request. Progress reports and questions go out on the session that
// claimed the call (only the claimant may send them); a reply waits for the reports still on
// their way, so none arrives after it.
//
// Each provider stream's `hello` carries a resume key, and the next stream is opened with it
// (`&resume=KEY`): after a dropped stream or a broker restart the app is the same client again,
// with its `client_id`, its claims and its ownership. Handlers that run while the broker is away
// go on, and a reply the broker could not take then is posted again on the next session
// (`already_settled` means the broker had it already). A key the broker refuses (`400
// invalid_parameter`: expired, or the broker forgot it) is dropped and the stream opened
// without it, as a new client; replies still waiting are then posted with their claim.

export { App, type AppOptions, type BrokerOptions, type Status, defaultHome } from "./app.js";
export { AlreadyDecided, type ApprovalRequest, Approver, type ApproverOptions, DigestMismatch } from "./approver.js";
export type { Answer, Call } from "./call.js";
export { LOG_LEVELS, type LogLevel } from "./call.js";
export { Reply, ToolError, content, type ContentBlock } from "./reply.js";
export { type Handler, type JsonSchema, type ToolAnnotations, type ToolOptions, type ZodLike, inlineRefs } from "./tool.js";
export { FatalError, InputUnsupported, Refused } from "./transport.js";
export { type Read, ReadError, type ReadHandler } from "./offers.js";
