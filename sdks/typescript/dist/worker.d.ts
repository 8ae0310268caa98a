import { type Request, type Running } from "./call.js";
import type { ToolEntry } from "./tool.js";
import { type Client } from "./transport.js";
/** What every call of one session posts with: the client, and its bodies prepared once. */
export interface Link {
    client: Client;
    clientId: string;
    claimBody: string;
    /** `{"client_id":…,"ok":true,"content":` as bytes: the content and `}` follow. */
    okPrefix: Buffer;
    claimOkPrefix: Buffer;
    okHead: string;
    claimOkHead: string;
}
/** What a worker needs of the session loop. */
export interface WorkerContext {
    tools: Map<string, ToolEntry>;
    graceMs: number;
    /** Counts the sessions served; a reply the broker could not take waits for the next. */
    generation(): number;
    /** The first session served after `generation`; `undefined` once the app stops. */
    sessionAfter(generation: number): Promise<Link | undefined>;
    /** The claim of request `id` got no definite answer: it is forgotten, and the pending list,
     * read again after a backoff, says what became of it. */
    claimUnsettled(id: string): void;
    /** A claim was taken: the backoff of the pending list's reads starts over. */
    claimTaken(): void;
    /** The retry backoff, in ms: first delay and cap. */
    backoffMs: [number, number];
    /** Sleeps `ms`, or less when a new session starts or the app stops; false once it stops. */
    pause(ms: number): Promise<boolean>;
    /** The session serving now, if any. */
    current(): Link | undefined;
}
/** Claims the call (unless `claimed`, or the tool answers at once), runs its handler, posts the
 * reply. */
export declare function work(ctx: WorkerContext, s: Link, r: Request, run: Running, claimed: boolean): Promise<void>;
