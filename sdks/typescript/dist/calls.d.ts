import type { Request, Running } from "./call.js";
export declare class Calls {
    private readonly max;
    private queue;
    private queued;
    /** Queued requests this client already holds the claim of. */
    private ours;
    private seen;
    readonly running: Map<string, Running>;
    constructor(max: number);
    private remember;
    /** Queues a request unless it was seen before; returns whether it was queued. */
    offer(r: Request): boolean;
    /** Queues, first, a request the broker lists as claimed by this client, unless it runs or ran
     * here: the answer to its claim was lost. It is run without claiming again. */
    offerOurs(r: Request): boolean;
    /** The rule for the broker's `pending=1` list, after a reconnect or a claim without a definite
     * answer: a call listed parked for our tools that was not seen here is offered (claimed anew),
     * and one listed as claimed by this very client that does not run here (the answer to its
     * claim was lost) is queued first, to run without claiming again. Returns how many were
     * queued. */
    offerListed(pending: Request[], clientId: string, serves: (r: Request) => boolean): number;
    /** Request `id` got no definite answer to its claim: it may be offered again. */
    forget(id: string): void;
    /** The broker ended request `id`: it leaves the queue, or its handler is aborted. */
    cancelled(id: string): void;
    /** The next request to start if a slot is free, and whether this client holds its claim
     * already; it counts as running from now on. */
    nextToStart(): {
        request: Request;
        run: Running;
        claimed: boolean;
    } | undefined;
    /** Request `id` is done; its slot is free. */
    finished(id: string): void;
    /** The stream is gone: what runs goes on (its claim waits for the app to resume), what waits
     * is forgotten (the pending list after the reconnect says what still waits). */
    sessionLost(): void;
    /** After a reconnect: ends the running calls the broker no longer holds for us (ended, or
     * claimed by another client); a parked one may still be settled by a reply with its claim. */
    endStale(live: Map<string, string | null>, clientId: string): void;
    /** The app stops: abort what runs, drop what waits. */
    shutdown(): void;
}
