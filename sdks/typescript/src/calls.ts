// The app's own book of calls: which requests wait for a free slot, which run, which were
// already seen. Pure state, driven by the session loop (as the Rust SDK's `calls`):
// - a request is claimed only when a slot is free (`maxConcurrent`); until then it waits here
//   unclaimed, so another instance of the app can take it, and leaves the queue if the broker
//   cancels it;
// - a request is offered once, however many ways it arrives (the stream, a replay after
//   `Last-Event-ID`, the `pending=1` list);
// - when the stream is lost the broker keeps this client's claims for its resume key, so
//   running handlers go on; queued requests are forgotten: the `pending=1` list after the
//   reconnect says which still wait, which running calls ended meanwhile (`endStale`), and which
//   this client claimed without hearing so (the answer to its claim was lost with the broker):
//   those are run without claiming again (`offerOurs`);
// - a request whose claim got no definite answer (the broker is away, or its store is:
//   `503 store_unavailable`) is forgotten (`forget`), so that the pending list may offer it
//   again: the session reads that list again after a short backoff and applies to it the rule
//   it applies after a reconnect (`offerListed`).

import type { Request, Running } from "./call.js";

/** How many finished request ids are remembered to drop repeats. */
const SEEN = 4096;

export class Calls {
  private queue: Request[] = [];
  private queued = new Set<string>();
  /** Queued requests this client already holds the claim of. */
  private ours = new Set<string>();
  private seen = new Set<string>();
  readonly running = new Map<string, Running>();

  constructor(private readonly max: number) {}

  private remember(id: string): void {
    this.seen.add(id);
    if (this.seen.size > SEEN) this.seen.delete(this.seen.values().next().value as string);
  }

  /** Queues a request unless it was seen before; returns whether it was queued. */
  offer(r: Request): boolean {
    if (this.seen.has(r.id) || this.queued.has(r.id) || this.running.has(r.id)) return false;
    this.remember(r.id);
    this.queued.add(r.id);
    this.queue.push(r);
    return true;
  }

  /** Queues, first, a request the broker lists as claimed by this client, unless it runs or ran
   * here: the answer to its claim was lost. It is run without claiming again. */
  offerOurs(r: Request): boolean {
    if (this.queued.has(r.id) || this.running.has(r.id) || this.seen.has(r.id)) return false;
    this.remember(r.id);
    this.queued.add(r.id);
    this.ours.add(r.id);
    this.queue.unshift(r);
    return true;
  }

  /** The rule for the broker's `pending=1` list, after a reconnect or a claim without a definite
   * answer: a call listed parked for our tools that was not seen here is offered (claimed anew),
   * and one listed as claimed by this very client that does not run here (the answer to its
   * claim was lost) is queued first, to run without claiming again. Returns how many were
   * queued. */
  offerListed(pending: Request[], clientId: string, serves: (r: Request) => boolean): number {
    let queued = 0;
    for (const p of pending) {
      if (!serves(p)) continue;
      if (p.state === "claimed" && p.claimed_by === clientId) queued += this.offerOurs(p) ? 1 : 0;
      else if (p.state === "parked") queued += this.offer(p) ? 1 : 0;
    }
    return queued;
  }

  /** Request `id` got no definite answer to its claim: it may be offered again. */
  forget(id: string): void {
    this.seen.delete(id);
  }

  /** The broker ended request `id`: it leaves the queue, or its handler is aborted. */
  cancelled(id: string): void {
    this.remember(id);
    if (this.queued.delete(id)) {
      this.ours.delete(id);
      this.queue = this.queue.filter((r) => r.id !== id);
    }
    const running = this.running.get(id);
    if (running) {
      running.ended = true;
      running.abort.abort(new Error("the call was cancelled"));
    }
  }

  /** The next request to start if a slot is free, and whether this client holds its claim
   * already; it counts as running from now on. */
  nextToStart(): { request: Request; run: Running; claimed: boolean } | undefined {
    if (this.running.size >= this.max) return undefined;
    const request = this.queue.shift();
    if (!request) return undefined;
    this.queued.delete(request.id);
    const claimed = this.ours.delete(request.id);
    const run: Running = { abort: new AbortController(), ended: false };
    this.running.set(request.id, run);
    return { request, run, claimed };
  }

  /** Request `id` is done; its slot is free. */
  finished(id: string): void {
    this.running.delete(id);
  }

  /** The stream is gone: what runs goes on (its claim waits for the app to resume), what waits
   * is forgotten (the pending list after the reconnect says what still waits). */
  sessionLost(): void {
    for (const id of this.queued) this.seen.delete(id);
    this.queued.clear();
    this.ours.clear();
    this.queue = [];
  }

  /** After a reconnect: ends the running calls the broker no longer holds for us (ended, or
   * claimed by another client); a parked one may still be settled by a reply with its claim. */
  endStale(live: Map<string, string | null>, clientId: string): void {
    for (const [id, r] of this.running) {
      const by = live.get(id);
      if (by === undefined || (by !== null && by !== clientId)) {
        this.remember(id);
        r.ended = true;
        r.abort.abort(new Error("the call ended while the app was away"));
      }
    }
  }

  /** The app stops: abort what runs, drop what waits. */
  shutdown(): void {
    this.queue = [];
    this.queued.clear();
    this.ours.clear();
    for (const r of this.running.values()) r.abort.abort(new Error("the app is stopping"));
  }
}
