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
// lost however it interleaves with the broker going away. A stop while serving drains the
// handlers and withdraws the groups before the stream closes (see `withdraw`).
//
// A claim without a definite answer (no answer, a 5xx such as `503 store_unavailable` while the
// broker's store is away) may or may not have been taken: after a short backoff the session
// reads the pending list again and applies the rule it applies after a reconnect
// (`offerListed`), re-armed with backoff while the list cannot be read.
import { answerRead, definitions } from "./offers.js";
import { Calls } from "./calls.js";
import { FATAL, REGISTER_AGAIN, RESUME_REFUSED } from "./codes.js";
import { Client, FatalError, Refused, SseParser, data, describe, endpointText } from "./transport.js";
import { work } from "./worker.js";
const STREAM_IDLE_MS = 45_000;
const HELLO_TIMEOUT_MS = 10_000;
/** Bound on withdrawing the groups at a stop; the stream closes after it regardless. */
const WITHDRAW_TIMEOUT_MS = 2_000;
/** Sleeps `ms`, or less when `signal` aborts (at once if it has). Its listener goes with it:
 * an app retrying through a long outage or a cluster's takeover sleeps many times on one signal. */
const sleep = (ms, signal) => new Promise((resolve) => {
    if (signal.aborted)
        return resolve();
    const done = () => {
        clearTimeout(t);
        signal.removeEventListener("abort", done);
        resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
});
/** The state that outlives sessions: the book of calls, the last event id, the resume key. */
export class Serving {
    name;
    tools;
    signal;
    s;
    calls;
    lastEventId;
    session;
    eventsPath;
    tasks = new Set();
    /** The key from the last `hello`: the next stream is the same client again. */
    resume;
    /** Counts the sessions served; a reply the broker could not take waits for the next. */
    generation = 0;
    wakeReplies = [];
    worker;
    /** A read of the pending list after a claim without a definite answer is on its way. */
    rechecking = false;
    /** Counts the claims without a definite answer: one met during a read asks for another. */
    unsettled = 0;
    /** The delay before the next such read (doubling while claims fail, reset by one taken). */
    recheckStep;
    constructor(name, tools, signal, s) {
        this.name = name;
        this.tools = tools;
        this.signal = signal;
        this.s = s;
        this.calls = new Calls(s.maxConcurrent);
        this.eventsPath = "/api/v1/events?client_tools=1" + (name !== undefined ? `&name=${encodeURIComponent(name)}` : "");
        this.worker = {
            tools,
            graceMs: s.graceMs,
            generation: () => this.generation,
            sessionAfter: (generation) => this.sessionAfter(generation),
            claimUnsettled: (id) => this.claimUnsettled(id),
            claimTaken: () => (this.recheckStep = Math.max(s.backoffMs[0], 1)),
            backoffMs: s.backoffMs,
            pause: (ms) => this.pause(ms),
            current: () => this.session,
        };
        this.recheckStep = Math.max(s.backoffMs[0], 1);
    }
    /** Tells the agents offered `uri` that it changed (`POST /api/v1/client-offers/updated`);
     * resolves with how many agent sessions were told. */
    async resourceUpdated(uri) {
        const session = this.session;
        if (!session)
            throw new Error("the app is not connected yet");
        const body = JSON.stringify({ client_id: session.clientId, uri });
        return data(await session.client.post("/api/v1/client-offers/updated", body)).sessions;
    }
    async run() {
        const [first, cap] = this.s.backoffMs;
        let step = Math.max(first, 1);
        let lastError = "";
        while (!this.signal.aborted) {
            this.s.setStatus("connecting");
            let error;
            try {
                error = await this.serveSession();
                step = Math.max(first, 1);
            }
            catch (e) {
                if (e instanceof FatalError)
                    throw e;
                error = describe(e);
            }
            this.calls.sessionLost();
            if (this.signal.aborted)
                break;
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
    /** Each group's tool definitions, by group name. */
    groups() {
        const groups = new Map();
        for (const t of this.tools.values())
            groups.set(t.group, [...(groups.get(t.group) ?? []), t.def]);
        for (const o of this.s.offers)
            if (!groups.has(o.group))
                groups.set(o.group, []);
        return groups;
    }
    /** The one line said on stderr once the tools are first served, as `leo serve-tool` says
     * it: which app, which tools by group, and where. */
    announcement() {
        const app = this.name !== undefined ? `app ${JSON.stringify(this.name)}` : "an unnamed app (the name option names it)";
        const groups = [...this.groups()].map(([group, defs]) => `${defs.map((d) => d.name).join(", ")} (group ${group})`);
        return `leo-app: ${app} serving ${groups.join("; ")} on ${endpointText(this.s.endpoint)}`;
    }
    serves(r) {
        return this.tools.get(r.tool)?.group === r.group;
    }
    /** One session: returns why it ended. */
    async serveSession() {
        let token;
        try {
            token = this.s.readToken();
        }
        catch (e) {
            return `cannot read the token: ${describe(e)}`;
        }
        const client = new Client(this.s.endpoint, token);
        let res;
        try {
            res = await this.openStream(client);
        }
        catch (e) {
            client.close();
            if (e instanceof Refused && FATAL.has(e.code))
                throw new FatalError(`the broker refused the app: ${e.message}`);
            throw e;
        }
        res.setEncoding("utf8");
        const parser = new SseParser();
        const frames = [];
        let wake;
        let ended;
        const finish = (why) => {
            ended ??= why;
            wake?.();
        };
        let idle = setTimeout(() => finish("no event or keep-alive for 45 s"), STREAM_IDLE_MS);
        res.on("data", (chunk) => {
            clearTimeout(idle);
            idle = setTimeout(() => finish("no event or keep-alive for 45 s"), STREAM_IDLE_MS);
            try {
                frames.push(...parser.push(chunk));
            }
            catch (e) {
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
        if (this.signal.aborted)
            onAbort();
        const next = async (timeoutMs) => {
            while (frames.length === 0 && ended === undefined) {
                // The wait's timer is cleared however it ends: a live one keeps node running after
                // `serve()` returned (the hello's held a stopped app for 10 s).
                let timer;
                await new Promise((r) => {
                    wake = r;
                    if (timeoutMs)
                        timer = setTimeout(r, timeoutMs);
                });
                clearTimeout(timer);
                wake = undefined;
                if (timeoutMs && frames.length === 0)
                    return undefined;
            }
            return frames.shift();
        };
        try {
            const hello = await next(HELLO_TIMEOUT_MS);
            if (!hello || hello.event !== "hello")
                return ended ?? "the first event is not hello";
            const h = JSON.parse(hello.data);
            this.resume = h.resume;
            if (this.lastEventId !== undefined && this.lastEventId > h.seq)
                this.lastEventId = h.seq;
            const cid = JSON.stringify(h.client_id);
            const session = {
                client,
                clientId: h.client_id,
                claimBody: `{"client_id":${cid}}`,
                okPrefix: Buffer.from(`{"client_id":${cid},"ok":true,"content":`),
                claimOkPrefix: Buffer.from(`{"client_id":${cid},"ok":true,"claim":true,"content":`),
                okHead: `{"client_id":${cid},"ok":true,`,
                claimOkHead: `{"client_id":${cid},"ok":true,"claim":true,`,
            };
            for (const [group, defs] of this.groups()) {
                try {
                    const agents = this.s.agents.get(group);
                    const body = JSON.stringify({ client_id: h.client_id, group, tools: defs, ...(agents ? { agents } : {}), ...definitions(this.s.offers, group) });
                    data(await client.post("/api/v1/client-tools", body, undefined, this.signal));
                }
                catch (e) {
                    // The stream closed since hello, or the store is away: reconnect. Any other refusal
                    // is the app's own.
                    if (e instanceof Refused && !REGISTER_AGAIN.has(e.code))
                        throw new FatalError(`cannot register group ${group}: ${e.message}`);
                    throw e;
                }
            }
            const pending = data(await client.get("/api/v1/client-tools/requests?pending=1", this.signal));
            if (this.signal.aborted)
                return ended ?? "stopped";
            this.session = session;
            this.calls.endStale(new Map(pending.map((p) => [p.id, p.claimed_by ?? null])), h.client_id);
            this.generation++;
            this.wakeReplies.splice(0).forEach((w) => w());
            this.s.setStatus("serving", h.client_id);
            if (this.generation === 1)
                console.error(this.announcement());
            this.offerListed(pending, h.client_id);
            this.start();
            for (;;) {
                const frame = await next(0);
                if (!frame) {
                    if (this.signal.aborted) {
                        await this.drain();
                        await this.withdraw(session);
                    }
                    return ended ?? "the event stream ended";
                }
                if (frame.id !== undefined)
                    this.lastEventId = frame.id;
                if (frame.event === "client_tool.request") {
                    const r = JSON.parse(frame.data);
                    if (this.serves(r) && this.calls.offer(r))
                        this.start();
                }
                else if (frame.event === "client_tool.cancelled") {
                    this.calls.cancelled(JSON.parse(frame.data).id);
                    this.start();
                }
                else if (frame.event === "client_offer.request") {
                    const r = JSON.parse(frame.data);
                    if (r.client_id === h.client_id)
                        void answerRead(this.s.offers, r, client, h.client_id);
                }
            }
        }
        finally {
            clearTimeout(idle);
            this.signal.removeEventListener("abort", onAbort);
            res.destroy();
            this.session = undefined;
            setTimeout(() => client.close(), this.s.graceMs + 5000).unref();
        }
    }
    /** Opens the stream with the resume key, or without it when the broker refuses it. */
    async openStream(client) {
        if (this.resume !== undefined) {
            try {
                return await client.openStream(`${this.eventsPath}&resume=${encodeURIComponent(this.resume)}`, this.lastEventId, this.signal);
            }
            catch (e) {
                // 409 already_claimed: the broker has not seen the old stream go yet; retried later.
                if (!(e instanceof Refused && e.code === RESUME_REFUSED))
                    throw e;
                console.warn(`leo-app: the broker refused the resume key (${e.message}); connecting as a new client`);
                this.resume = undefined;
            }
        }
        return client.openStream(this.eventsPath, this.lastEventId, this.signal);
    }
    /** The first session served after `generation`. */
    async sessionAfter(generation) {
        while ((this.generation <= generation || !this.session) && !this.signal.aborted) {
            await new Promise((r) => this.wakeReplies.push(r));
        }
        return this.signal.aborted ? undefined : this.session;
    }
    /** The rule for the pending list, after a reconnect or a claim without a definite answer:
     * parked for our tools and not run here, offered again (claimed anew); claimed by this very
     * client (the answer to its claim was lost), run without claiming again. */
    offerListed(pending, clientId) {
        this.calls.offerListed(pending, clientId, (p) => this.serves(p));
    }
    /** The claim of `id` got no definite answer: it is forgotten, and the pending list read again
     * after a backoff says what became of it. */
    claimUnsettled(id) {
        this.calls.forget(id);
        this.unsettled++;
        if (this.rechecking)
            return;
        this.rechecking = true;
        void this.recheck().finally(() => (this.rechecking = false));
    }
    /** Reads the pending list again after a backoff and offers what it lists for us; re-armed with
     * a doubling backoff while the list cannot be read. Between sessions it ends: the next
     * connect reads the list. */
    async recheck() {
        for (;;) {
            const step = this.recheckStep;
            this.recheckStep = Math.min(step * 2, this.s.backoffMs[1]);
            if (!(await this.pause(step / 2 + Math.random() * (step / 2))))
                return;
            const s = this.session;
            if (!s)
                return;
            const unsettled = this.unsettled;
            let pending;
            try {
                pending = data(await s.client.get("/api/v1/client-tools/requests?pending=1", this.signal));
            }
            catch (e) {
                console.warn(`leo-app: cannot read the pending requests again (${describe(e)}); retrying`);
                continue;
            }
            if (this.signal.aborted || !Array.isArray(pending))
                return;
            this.offerListed(pending, s.clientId);
            this.start();
            if (this.unsettled === unsettled)
                return;
        }
    }
    /** Sleeps `ms`, or less when a new session starts or the app stops; false once it stops. */
    async pause(ms) {
        let wake;
        await Promise.race([sleep(ms, this.signal), new Promise((r) => this.wakeReplies.push((wake = r)))]);
        const i = wake ? this.wakeReplies.indexOf(wake) : -1;
        if (i >= 0)
            this.wakeReplies.splice(i, 1);
        return !this.signal.aborted;
    }
    /** Starts every waiting request a free slot allows. */
    start() {
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
    /** At a deliberate stop, once the handlers are done and while the stream is still open:
     * withdraws every group (registers it with no tools), so the broker ends the calls still
     * parked for them at once (`tool_withdrawn`) instead of keeping them for the resume grace,
     * as it does for a stream that merely dropped. Best effort, within `WITHDRAW_TIMEOUT_MS`:
     * a failure is ignored (the broker may be going away too) and the stream closes anyway. */
    async withdraw(session) {
        const deadline = Date.now() + WITHDRAW_TIMEOUT_MS;
        try {
            for (const group of this.groups().keys()) {
                const body = JSON.stringify({ client_id: session.clientId, group, tools: [] });
                data(await session.client.post("/api/v1/client-tools", body, Math.max(deadline - Date.now(), 1)));
            }
        }
        catch {
            // Best effort: the calls then wait out the broker's grace, as after a dropped stream.
        }
    }
    /** At shutdown: aborts every handler and waits for them (bounded). */
    async drain() {
        this.calls.shutdown();
        // Replies waiting for a session that will not come give up.
        this.wakeReplies.splice(0).forEach((w) => w());
        if (this.tasks.size === 0)
            return;
        let timer;
        await Promise.race([
            Promise.allSettled([...this.tasks]),
            new Promise((r) => (timer = setTimeout(r, this.s.graceMs + 5000))),
        ]);
        clearTimeout(timer);
    }
}
