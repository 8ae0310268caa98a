export { Reply, ToolError, content, type ContentBlock } from "./reply.js";
export { FatalError, InputUnsupported, Refused } from "./http.js";
/** A JSON Schema object (the broker accepts a keyword subset; see the docs). */
export type JsonSchema = {
    type: "object";
    [keyword: string]: unknown;
};
/** A zod schema (zod ≥ 3.25 with its v4 API): only what this package calls. */
export interface ZodLike<T> {
    safeParse(value: unknown): {
        success: true;
        data: T;
    } | {
        success: false;
        error: {
            issues: {
                path: PropertyKey[];
                message: string;
            }[];
        };
    };
}
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
}
/** The user's answer to `call.ask`: `content` holds the form's values with `accept`. */
export interface Answer {
    action: "accept" | "decline" | "cancel";
    content?: Record<string, unknown>;
}
/** MCP tool hints shown to the agent's harness. */
export interface ToolAnnotations {
    readOnlyHint?: boolean;
    destructiveHint?: boolean;
    idempotentHint?: boolean;
    openWorldHint?: boolean;
}
export type Handler<A> = (args: A, call: Call) => unknown | Promise<unknown>;
export interface ToolOptions<A> {
    name: string;
    description: string;
    /** A JSON Schema for the arguments, or a zod object schema (the arguments are parsed by it). */
    inputSchema?: JsonSchema | ZodLike<A>;
    handler: Handler<A>;
    /** Default: the app's group. */
    group?: string;
    timeoutS?: number;
    label?: string;
    /** A quick tool that may run on more than one instance: no claim, one request per call
     * (so it cannot report progress nor ask the user). */
    answersAtOnce?: boolean;
    /** The MCP tool's title (shown instead of `label`). */
    title?: string;
    annotations?: ToolAnnotations;
    /** The schema of the tool's structured content (JSON Schema, or a zod object schema);
     * a handler of such a tool returning an object answers with structured content. */
    outputSchema?: JsonSchema | ZodLike<unknown>;
    /** `"task"`: harnesses that run MCP tasks run the calls as tasks. */
    execution?: "sync" | "task";
}
export interface AppOptions {
    /** The default group of the app's tools. */
    group: string;
    /** The app's name, sent with the event stream when set. */
    name?: string;
    /** The broker's home (default `$LEO_HOME`, else `~/.leo`). */
    home?: string;
    /** A unix socket other than `$home/run/leo.sock`. */
    socket?: string;
    /** TCP instead, `http://host:port`. */
    url?: string;
    token?: string;
    tokenFile?: string;
    /** A paired device's token (`state/devices/NAME.token`). */
    device?: string;
    /** At most this many calls at once (default 64); the rest wait unclaimed. */
    maxConcurrent?: number;
    /** How long a cancelled handler may run on before it is abandoned (default 5000 ms). */
    cancelGraceMs?: number;
    /** The reconnect delay: first, doubling to cap (default 100 ms to 5 s), jittered. */
    backoffMs?: [number, number];
    /**
     * The agents the tools are offered to: exact names or `*`/`?` globs. A list applies to the
     * app's group, `{ deploy: ["ci-*"] }` to each group named. Other agents neither see nor can
     * call those tools. Left out, every agent gets them.
     */
    agents?: string[] | Record<string, string[]>;
}
export type Status = "connecting" | "serving" | "waiting" | "stopped";
/** `$LEO_HOME`, else `~/.leo`. */
export declare function defaultHome(): string;
/** Replaces local `$ref`s with their definitions and drops `$defs`, for the broker's subset. */
export declare function inlineRefs(schema: Record<string, unknown>): Record<string, unknown>;
/** An app that serves tools through the Leo broker. */
export declare class App {
    readonly group: string;
    readonly name?: string;
    private readonly endpoint;
    private readonly token?;
    private readonly tokenFile;
    private readonly maxConcurrent;
    private readonly graceMs;
    private readonly backoffMs;
    private readonly agents;
    private readonly tools;
    private statusNow;
    private clientIdNow?;
    private listeners;
    private stopper?;
    private running?;
    constructor(o: AppOptions);
    /** Declares a tool. */
    tool<A = Record<string, unknown>>(t: ToolOptions<A>): this;
    get status(): Status;
    /** The broker's id for the current stream, while serving. */
    get clientId(): string | undefined;
    private setStatus;
    /** Resolves when `pred` holds of the app (checked on every status change). */
    waitFor(pred: (app: App) => boolean, timeoutMs?: number): Promise<void>;
    /** Starts serving; resolves once serving, rejects on a fatal error. `stop()` ends it. */
    start(): Promise<string>;
    /** Stops a started app; handlers are aborted, replies given within the grace are posted. */
    stop(): Promise<void>;
    /** Serves until `signal` aborts or a fatal error (`FatalError`, thrown). */
    serve(signal?: AbortSignal): Promise<void>;
    private readToken;
}
