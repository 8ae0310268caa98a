import type { Link } from "./worker.js";
import type { JsonSchema } from "./tool.js";
/** One call of a tool, as its handler sees it. */
export interface Call {
    /** The request id (`r_…`). */
    id: string;
    /** The agent that called. */
    agent: string;
    session: string;
    group: string;
    tool: string;
    /** The arguments, as the broker checked them against the input schema. */
    arguments: Record<string, unknown>;
    /** The call's timeout in seconds; `null` for a handoff. */
    timeoutS: number | null;
    createdAt: string;
    /** When the broker times the call out (ms since the epoch); `null` for never. */
    deadline: number | null;
    /** Aborted when the call is cancelled (timeout, the agent cancelled, the app stops…). */
    signal: AbortSignal;
    /**
     * Reports progress to the agent's harness (MCP `notifications/progress`; a harness that sent
     * no progress token gets none). `progress` should grow with each report. Reports are posted
     * in order; the promise resolves once this one is sent, never rejects (a report for a call
     * that ended is dropped quietly) and need not be awaited: the reply waits for the reports.
     * Throws at once for a tool that `answersAtOnce` (it has no claim) or a negative number.
     */
    progress(progress: number, total?: number, message?: string): Promise<void>;
    /**
     * Asks the agent's user through the harness (MCP elicitation, form mode) and resolves with
     * the answer. `requestedSchema` is MCP's form subset (an object of string, number, integer
     * and boolean properties). Rejects with `InputUnsupported` when the harness cannot ask, with
     * `Refused` `already_settled` or `timeout` when the call ends first, `invalid_parameter` (with
     * the path) for a schema outside the subset, and an `Error` for a tool that answers at once.
     */
    ask(message: string, requestedSchema: JsonSchema): Promise<Answer>;
    /**
     * Logs `data` (a string, or any JSON) at `level` for the agent's harness (MCP
     * `notifications/message`, sent when it reaches the level the harness chose with
     * `logging/setLevel`; every level until it chooses). `logger` names the part of the app that
     * speaks. Like `progress`: posted in order with the reports, never rejects, need not be
     * awaited. Throws at once for a tool that `answersAtOnce` or an unknown level.
     */
    log(level: LogLevel, data: unknown, logger?: string): Promise<void>;
    /**
     * Asks the harness's model for a completion: `params` are MCP's `sampling/createMessage`
     * params (`messages`, `maxTokens`, and any of `systemPrompt`, `modelPreferences`, …).
     * Resolves with the harness's `CreateMessageResult` (`role`, `content`, `model`,
     * `stopReason`). Rejects as `ask` does: `InputUnsupported` when the harness cannot sample.
     */
    sample(params: Record<string, unknown>): Promise<Record<string, unknown>>;
}
/** The levels of `call.log`, least severe first (RFC 5424, as MCP names them). */
export declare const LOG_LEVELS: readonly ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
export type LogLevel = (typeof LOG_LEVELS)[number];
/** The user's answer to `call.ask`: `content` holds the form's values with `accept`. */
export interface Answer {
    action: "accept" | "decline" | "cancel";
    content?: Record<string, unknown>;
}
/** A call as the broker sends it (`client_tool.request`, or listed by `?pending=1`). */
export interface Request {
    id: string;
    agent: string;
    session: string;
    group: string;
    tool: string;
    arguments: Record<string, unknown> | null;
    timeout_s: number | null;
    created_at: string;
    state?: string;
    claimed_by?: string | null;
}
/** The cancellation of one running call. */
export interface Running {
    abort: AbortController;
    ended: boolean;
}
/** A call as its handler sees it, with the means to report progress and ask the user on the
 * session that claimed it (methods on the prototype: nothing is made per call but the object). */
export declare class LiveCall implements Call {
    private readonly run;
    private readonly s;
    private readonly atOnce;
    readonly id: string;
    readonly agent: string;
    readonly session: string;
    readonly group: string;
    readonly tool: string;
    readonly arguments: Record<string, unknown>;
    readonly timeoutS: number | null;
    readonly createdAt: string;
    readonly deadline: number | null;
    readonly signal: AbortSignal;
    /** The last progress report on its way, if any. */
    tail?: Promise<void>;
    constructor(r: Request, run: Running, s: Link, atOnce: boolean);
    private needClaim;
    progress(progress: number, total?: number, message?: string): Promise<void>;
    log(level: LogLevel, data: unknown, logger?: string): Promise<void>;
    /** Queues a report or log message after the ones before it. */
    private advise;
    private sendAdvice;
    /** Waits (bounded) for the reports still on their way, before the reply is posted. */
    flush(): Promise<void>;
    ask(message: string, requestedSchema: JsonSchema): Promise<Answer>;
    sample(params: Record<string, unknown>): Promise<Record<string, unknown>>;
    /** Posts a request for the harness and resolves with the answer's data (bounded by the call). */
    private waitFor;
}
