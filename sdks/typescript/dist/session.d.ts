import type { Status } from "./app.js";
import type { ToolEntry } from "./tool.js";
import { type Endpoint } from "./transport.js";
/** What the loop needs of the app. */
export interface Settings {
    endpoint: Endpoint;
    readToken: () => string;
    maxConcurrent: number;
    graceMs: number;
    backoffMs: [number, number];
    /** The agents each group is offered to (absent: every agent). */
    agents: Map<string, string[]>;
    setStatus: (s: Status, clientId?: string) => void;
}
/** The state that outlives sessions: the book of calls, the last event id, the resume key. */
export declare class Serving {
    private readonly tools;
    private readonly signal;
    private readonly s;
    private readonly calls;
    private lastEventId?;
    private session?;
    private eventsPath;
    private tasks;
    /** The key from the last `hello`: the next stream is the same client again. */
    private resume?;
    /** Counts the sessions served; a reply the broker could not take waits for the next. */
    private generation;
    private wakeReplies;
    private readonly worker;
    constructor(name: string | undefined, tools: Map<string, ToolEntry>, signal: AbortSignal, s: Settings);
    run(): Promise<void>;
    private serves;
    /** One session: returns why it ended. */
    private serveSession;
    /** Opens the stream with the resume key, or without it when the broker refuses it. */
    private openStream;
    /** The first session served after `generation`. */
    private sessionAfter;
    /** Starts every waiting request a free slot allows. */
    private start;
    /** At shutdown: aborts every handler and waits for them (bounded). */
    private drain;
}
