// The connection loop (as the Rust SDK's `session`): open the event stream (with
// `Last-Event-ID` after an outage, and the resume key of the last `hello`), register every
// group again, list `GET …/requests?pending=1` and serve what waits for us, then serve events
// until the stream ends, and start over after a jittered, doubling delay.
//
// Each provider stream's `hello` carries a resume key, and the next stream is opened with it
// (`&resume=KEY`): after a dropped stream or a broker restart the app is the same client again,
// with its `client_id`, its claims and its ownership. Handlers that run while the broker is away
// go on, and a reply the broker could not take then is posted again on the next session. A key
// the broker refuses (`RESUME_REFUSED` on an open that carried it: expired, or forgotten) is
// dropped and the stream opened without it, as a new client; replies still waiting are then
// posted with their claim. A stop request (the signal) is checked at every step, so it is never
// lost however it interleaves with the broker going away.

import type { Request } from "./call.js";
import { Calls } from "./calls.js";
import { FATAL, RESUME_REFUSED } from "./codes.js";
import type { Status } from "./app.js";
import type { ToolEntry } from "./tool.js";
import { Client, type Endpoint, FatalError, Refused, SseParser, data, describe } from "./transport.js";
import { type Link, type WorkerContext, work } from "./worker.js";

const STREAM_IDLE_MS = 45_000;
const HELLO_TIMEOUT_MS = 10_000;

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

/** Sleeps `ms`, or less when `signal` aborts (at once if it has). */
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

/** The state that outlives sessions: the book of calls, the last event id, the resume key. */
export class Serving {
  private readonly calls: Calls;
  private lastEventId?: number;
  private session?: Link;
  private eventsPath: string;
  private tasks = new Set<Promise<void>>();
  /** The key from the last `hello`: the next stream is the same client again. */
  private resume?: string;
  /** Counts the sessions served; a reply the broker could not take waits for the next. */
  private generation = 0;
  private wakeReplies: (() => void)[] = [];
  private readonly worker: WorkerContext;

  constructor(
    name: string | undefined,
    private readonly tools: Map<string, ToolEntry>,
    private readonly signal: AbortSignal,
    private readonly s: Settings,
  ) {
    this.calls = new Calls(s.maxConcurrent);
    this.eventsPath = "/api/v1/events?client_tools=1" + (name !== undefined ? `&name=${encodeURIComponent(name)}` : "");
    this.worker = {
      tools,
      graceMs: s.graceMs,
      generation: () => this.generation,
      sessionAfter: (generation) => this.sessionAfter(generation),
      forget: (id) => this.calls.forget(id),
    };
  }

  async run(): Promise<void> {
    const [first, cap] = this.s.backoffMs;
    let step = Math.max(first, 1);
    let lastError = "";
    while (!this.signal.aborted) {
      this.s.setStatus("connecting");
      let error: string;
      try {
        error = await this.serveSession();
        step = Math.max(first, 1);
      } catch (e) {
        if (e instanceof FatalError) throw e;
        error = describe(e);
      }
      this.calls.sessionLost();
      if (this.signal.aborted) break;
      if (error !== lastError) {
        console.warn(`leo-app: not connected to the broker (${error}); retrying`);
        lastError = error;
      }
      this.s.setStatus("waiting");
      await sleep(step / 2 + Math.random() * (step / 2), this.signal);
      step = Math.min(step * 2, cap);
    }
    await this.drain();
  }

  private serves(r: { group: string; tool: string }): boolean {
    return this.tools.get(r.tool)?.group === r.group;
  }

  /** One session: returns why it ended. */
  private async serveSession(): Promise<string> {
    let token: string;
    try {
      token = this.s.readToken();
    } catch (e) {
      return `cannot read the token: ${describe(e)}`;
    }
    const client = new Client(this.s.endpoint, token);
    let res;
    try {
      res = await this.openStream(client);
    } catch (e) {
      client.close();
      if (e instanceof Refused && FATAL.has(e.code)) throw new FatalError(`the broker refused the app: ${e.message}`);
      throw e;
    }
    res.setEncoding("utf8");
    const parser = new SseParser();
    const frames: ReturnType<SseParser["push"]> = [];
    let wake: (() => void) | undefined;
    let ended: string | undefined;
    const finish = (why: string) => {
      ended ??= why;
      wake?.();
    };
    let idle = setTimeout(() => finish("no event or keep-alive for 45 s"), STREAM_IDLE_MS);
    res.on("data", (chunk: string) => {
      clearTimeout(idle);
      idle = setTimeout(() => finish("no event or keep-alive for 45 s"), STREAM_IDLE_MS);
      try {
        frames.push(...parser.push(chunk));
      } catch (e) {
        finish(describe(e));
      }
      wake?.();
    });
    res.on("end", () => finish("the broker closed the event stream"));
    res.on("error", (e) => finish(describe(e)));
    res.on("close", () => finish("the event stream closed"));
    const onAbort = () => finish("stopped");
    this.signal.addEventListener("abort", onAbort, { once: true });
    // A stop asked for while the stream opened fired before the listener: never lose it.
    if (this.signal.aborted) onAbort();
    const next = async (timeoutMs: number) => {
      while (frames.length === 0 && ended === undefined) {
        // The wait's timer is cleared however it ends: a live one keeps node running after
        // `serve()` returned (the hello's held a stopped app for 10 s).
        let timer: NodeJS.Timeout | undefined;
        await new Promise<void>((r) => {
          wake = r;
          if (timeoutMs) timer = setTimeout(r, timeoutMs);
        });
        clearTimeout(timer);
        wake = undefined;
        if (timeoutMs && frames.length === 0) return undefined;
      }
      return frames.shift();
    };
    try {
      const hello = await next(HELLO_TIMEOUT_MS);
      if (!hello || hello.event !== "hello") return ended ?? "the first event is not hello";
      const h = JSON.parse(hello.data) as { client_id: string; seq: number; resume?: string };
      this.resume = h.resume;
      if (this.lastEventId !== undefined && this.lastEventId > h.seq) this.lastEventId = h.seq;
      const cid = JSON.stringify(h.client_id);
      const session: Link = {
        client,
        clientId: h.client_id,
        claimBody: `{"client_id":${cid}}`,
        okPrefix: Buffer.from(`{"client_id":${cid},"ok":true,"content":`),
        claimOkPrefix: Buffer.from(`{"client_id":${cid},"ok":true,"claim":true,"content":`),
        okHead: `{"client_id":${cid},"ok":true,`,
        claimOkHead: `{"client_id":${cid},"ok":true,"claim":true,`,
      };
      const groups = new Map<string, Record<string, unknown>[]>();
      for (const t of this.tools.values()) groups.set(t.group, [...(groups.get(t.group) ?? []), t.def]);
      for (const [group, defs] of groups) {
        try {
          const agents = this.s.agents.get(group);
          const body = JSON.stringify({ client_id: h.client_id, group, tools: defs, ...(agents ? { agents } : {}) });
          data(await client.post("/api/v1/client-tools", body, undefined, this.signal));
        } catch (e) {
          if (e instanceof Refused && e.code !== "unknown_client") throw new FatalError(`cannot register group ${group}: ${e.message}`);
          throw e;
        }
      }
      const pending = data<Request[]>(await client.get("/api/v1/client-tools/requests?pending=1", this.signal));
      if (this.signal.aborted) return ended ?? "stopped";
      this.session = session;
      this.calls.endStale(new Map(pending.map((p) => [p.id, p.claimed_by ?? null])), h.client_id);
      this.generation++;
      this.wakeReplies.splice(0).forEach((w) => w());
      this.s.setStatus("serving", h.client_id);
      const served = pending.filter((p) => this.serves(p));
      // Claimed by this very client without hearing so: the answer to the claim was lost when
      // the broker went away. They are run without claiming again.
      for (const p of served) if (p.state === "claimed" && p.claimed_by === h.client_id) this.calls.offerOurs(p);
      for (const p of served) if (p.state === "parked") this.calls.offer(p);
      this.start();
      for (;;) {
        const frame = await next(0);
        if (!frame) {
          if (this.signal.aborted) await this.drain();
          return ended ?? "the event stream ended";
        }
        if (frame.id !== undefined) this.lastEventId = frame.id;
        if (frame.event === "client_tool.request") {
          const r = JSON.parse(frame.data) as Request;
          if (this.serves(r) && this.calls.offer(r)) this.start();
        } else if (frame.event === "client_tool.cancelled") {
          this.calls.cancelled((JSON.parse(frame.data) as { id: string }).id);
          this.start();
        }
      }
    } finally {
      clearTimeout(idle);
      this.signal.removeEventListener("abort", onAbort);
      res.destroy();
      this.session = undefined;
      setTimeout(() => client.close(), this.s.graceMs + 5000).unref();
    }
  }

  /** Opens the stream with the resume key, or without it when the broker refuses it. */
  private async openStream(client: Client): Promise<Awaited<ReturnType<Client["openStream"]>>> {
    if (this.resume !== undefined) {
      try {
        return await client.openStream(`${this.eventsPath}&resume=${encodeURIComponent(this.resume)}`, this.lastEventId, this.signal);
      } catch (e) {
        // 409 already_claimed: the broker has not seen the old stream go yet; retried later.
        if (!(e instanceof Refused && e.code === RESUME_REFUSED)) throw e;
        console.warn(`leo-app: the broker refused the resume key (${e.message}); connecting as a new client`);
        this.resume = undefined;
      }
    }
    return client.openStream(this.eventsPath, this.lastEventId, this.signal);
  }

  /** The first session served after `generation`. */
  private async sessionAfter(generation: number): Promise<Link | undefined> {
    while ((this.generation <= generation || !this.session) && !this.signal.aborted) {
      await new Promise<void>((r) => this.wakeReplies.push(r));
    }
    return this.signal.aborted ? undefined : this.session;
  }

  /** Starts every waiting request a free slot allows. */
  private start(): void {
    const session = this.session;
    for (let next = session && this.calls.nextToStart(); session && next; next = this.calls.nextToStart()) {
      const { request, run, claimed } = next;
      const task = work(this.worker, session, request, run, claimed).finally(() => {
        this.calls.finished(request.id);
        this.tasks.delete(task);
        this.start();
      });
      this.tasks.add(task);
    }
  }

  /** At shutdown: aborts every handler and waits for them (bounded). */
  private async drain(): Promise<void> {
    this.calls.shutdown();
    // Replies waiting for a session that will not come give up.
    this.wakeReplies.splice(0).forEach((w) => w());
    if (this.tasks.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.tasks]),
      new Promise((r) => (timer = setTimeout(r, this.s.graceMs + 5000))),
    ]);
    clearTimeout(timer);
  }
}
