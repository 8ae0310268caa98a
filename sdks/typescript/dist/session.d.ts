import { type Offer } from "./offers.js";
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
    /** Prompts, resources and templates (`offers`). */
    offers: Offer[];
    setStatus: (s: Status, clientId?: string) => void;
}
/** The state that outlives sessions: the book of calls, the last event id, the resume key. */
export declare class Serving {
    private readonly name;
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
    /** A read of the pending list after a claim without a definite answer is on its way. */
    private rechecking;
    /** Counts the claims without a definite answer: one met during a read asks for another. */
    private unsettled;
    /** The delay before the next such read (doubling while claims fail, reset by one taken). */
    private recheckStep;
    constructor(name: string | undefined, tools: Map<string, ToolEntry>, signal: AbortSignal, s: Settings);
    /** Tells the agents offered `uri` that it changed (`POST /api/v1/client-offers/updated`);
     * resolves with how many agent sessions were told. */
    resourceUpdated(uri: string): Promise<number>;
    run(): Promise<void>;
    /** Each group's tool definitions, by group name. */
    private groups;
    /** The one line said on stderr once the tools are first served, as `leo serve-tool` says
     * it: which app, which tools by group, and where. */
    private announcement;
    private serves;
    /** One session: returns why it ended. */
    private serveSession;
    /** Opens the stream with the resume key, or without it when the broker refuses it. */
    private openStream;
    /** The first session served after `generation`. */
    private sessionAfter;
    /** The rule for the pending list, after a reconnect or a claim without a definite answer:
     * parked for our tools and not run here, offered again (claimed anew); claimed by this very
     * client (the answer to its claim was lost), run without claiming again. */
    private offerListed;
    /** The claim of `id` got no definite answer: it is forgotten, and the pending list read again
     * after a backoff says what became of it. */
    private claimUnsettled;
    /** Reads the pending list again after a backoff and offers what it lists for us; re-armed with
     * a doubling backoff while the list cannot be read. Between sessions it ends: the next
     * connect reads the list. */
    private recheck;
    /** Sleeps `ms`, or less when a new session starts or the app stops; false once it stops. */
    private pause;
    /** Starts every waiting request a free slot allows. */
    private start;
    /** At a deliberate stop, once the handlers are done and while the stream is still open:
     * withdraws every group (registers it with no tools), so the broker ends the calls still
     * parked for them at once (`tool_withdrawn`) instead of keeping them for the resume grace,
     * as it does for a stream that merely dropped. Best effort, within `WITHDRAW_TIMEOUT_MS`:
     * a failure is ignored (the broker may be going away too) and the stream closes anyway. */
    private withdraw;
    /** At shutdown: aborts every handler and waits for them (bounded). */
    private drain;
}
