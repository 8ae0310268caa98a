// Offer tools to AI coding agents from a Node app, through the local Leo broker.
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
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { Client, FatalError, InputUnsupported, Refused, SseParser, data, describe, endpointFromUrl, refusal } from "./http.js";
import { Reply, ToolError } from "./reply.js";
export { Reply, ToolError, content } from "./reply.js";
export { FatalError, InputUnsupported, Refused } from "./http.js";
/** The closing brace of a result body, shared by every post. */
const CLOSE = Buffer.from("}");
const STREAM_IDLE_MS = 45_000;
const HELLO_TIMEOUT_MS = 10_000;
const LOST_RACE = new Set(["already_claimed", "owned_by_other", "already_settled", "unknown_request", "not_provider", "not_claimant"]);
const ANNOTATIONS = new Set(["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]);
const MAX_PROGRESS_MESSAGE = 4096;
const PROGRESS_FLUSH_MS = 10_000;
const FATAL = new Set(["unauthorized", "forbidden", "invalid_parameter", "unknown_parameter"]);
/** `$LEO_HOME`, else `~/.leo`. */
export function defaultHome() {
    return process.env.LEO_HOME || join(homedir(), ".leo");
}
function isZod(s) {
    return typeof s === "object" && s !== null && typeof s.safeParse === "function";
}
/** Replaces local `$ref`s with their definitions and drops `$defs`, for the broker's subset. */
export function inlineRefs(schema) {
    const defs = { ...schema.definitions, ...schema.$defs };
    const walk = (node, seen) => {
        if (Array.isArray(node))
            return node.map((n) => walk(n, seen));
        if (typeof node !== "object" || node === null)
            return node;
        const out = {};
        const ref = node.$ref;
        if (typeof ref === "string") {
            const name = ref.split("/").pop();
            if (seen.includes(name))
                throw new Error(`recursive schema ${name} cannot be inlined`);
            if (!(name in defs))
                throw new Error(`unresolvable $ref ${ref}`);
            Object.assign(out, walk(defs[name], [...seen, name]));
        }
        for (const [k, v] of Object.entries(node)) {
            if (k === "$ref" || k === "$defs" || k === "definitions" || k === "discriminator")
                continue;
            if (k === "properties")
                out[k] = Object.fromEntries(Object.entries(v).map(([p, s]) => [p, walk(s, seen)]));
            else if (k === "const" || k === "default" || k === "enum" || k === "examples")
                out[k] = v;
            else
                out[k] = walk(v, seen);
        }
        return out;
    };
    return walk(schema, []);
}
async function zodToJsonSchema(schema, io = "input") {
    let z;
    try {
        z = await import("zod");
    }
    catch {
        throw new FatalError("a zod schema was given but zod cannot be imported (npm install zod)");
    }
    if (typeof z.toJSONSchema !== "function") {
        throw new FatalError("zod ≥ 3.25 (with toJSONSchema) is needed for zod schemas");
    }
    const json = inlineRefs(z.toJSONSchema(schema, { io, unrepresentable: "any" }));
    delete json.$schema;
    return json;
}
/** `agents` as a map from group to its agents; the broker checks the patterns themselves. */
function agentsByGroup(group, agents) {
    if (agents === undefined)
        return new Map();
    const byGroup = new Map(Array.isArray(agents) ? [[group, agents]] : Object.entries(agents));
    for (const [g, patterns] of byGroup) {
        if (!Array.isArray(patterns) || patterns.length === 0 || !patterns.every((p) => typeof p === "string")) {
            throw new Error(`agents for group ${g} must be a non-empty list of agent names or globs`);
        }
    }
    return byGroup;
}
/** An app that serves tools through the Leo broker. */
export class App {
    group;
    name;
    endpoint;
    token;
    tokenFile;
    maxConcurrent;
    graceMs;
    backoffMs;
    agents;
    tools = new Map();
    statusNow = "stopped";
    clientIdNow;
    listeners = new Set();
    stopper;
    running;
    constructor(o) {
        this.group = o.group;
        this.name = o.name;
        const home = o.home ?? defaultHome();
        if (o.url && o.socket)
            throw new Error("give a URL or a socket, not both");
        this.endpoint = o.url
            ? endpointFromUrl(o.url)
            : { socketPath: o.socket ?? join(home, "run", "leo.sock"), hostHeader: "localhost" };
        if ([o.token, o.tokenFile, o.device].filter((x) => x !== undefined).length > 1) {
            throw new Error("give one of a token, a token file or a device");
        }
        this.token = o.token;
        this.tokenFile = o.device !== undefined ? join(home, "state", "devices", `${o.device}.token`) : (o.tokenFile ?? join(home, "state", "operator.token"));
        this.maxConcurrent = Math.max(1, o.maxConcurrent ?? 64);
        this.graceMs = o.cancelGraceMs ?? 5000;
        this.backoffMs = o.backoffMs ?? [100, 5000];
        this.agents = agentsByGroup(o.group, o.agents);
    }
    /** Declares a tool. */
    tool(t) {
        if (!t.description?.trim())
            throw new Error(`tool ${t.name} needs a description`);
        for (const name of this.tools.keys()) {
            if (name.toLowerCase() === t.name.toLowerCase())
                throw new Error(`tool ${t.name} is given twice`);
        }
        const def = { name: t.name, description: t.description };
        const zod = isZod(t.inputSchema) ? t.inputSchema : undefined;
        def.input_schema = zod ? undefined : (t.inputSchema ?? { type: "object" });
        if (t.timeoutS !== undefined)
            def.timeout_s = t.timeoutS;
        if (t.label !== undefined)
            def.label = t.label;
        if (t.title !== undefined)
            def.title = t.title;
        if (t.annotations !== undefined) {
            for (const [k, v] of Object.entries(t.annotations)) {
                if (!ANNOTATIONS.has(k))
                    throw new Error(`tool ${t.name}: unknown annotation ${k} (known: ${[...ANNOTATIONS].join(", ")})`);
                if (typeof v !== "boolean")
                    throw new Error(`tool ${t.name}: annotation ${k} must be true or false`);
            }
            def.annotations = { ...t.annotations };
        }
        const outputZod = isZod(t.outputSchema) ? t.outputSchema : undefined;
        if (t.outputSchema !== undefined && !outputZod)
            def.output_schema = t.outputSchema;
        if (t.execution !== undefined) {
            if (t.execution !== "sync" && t.execution !== "task")
                throw new Error(`tool ${t.name}: execution must be "sync" or "task"`);
            def.execution = t.execution;
        }
        this.tools.set(t.name, {
            def, group: t.group ?? this.group, handler: t.handler, zod, outputZod,
            atOnce: !!t.answersAtOnce, structured: t.outputSchema !== undefined,
        });
        return this;
    }
    get status() {
        return this.statusNow;
    }
    /** The broker's id for the current stream, while serving. */
    get clientId() {
        return this.clientIdNow;
    }
    setStatus(s, clientId) {
        this.statusNow = s;
        this.clientIdNow = clientId;
        for (const l of [...this.listeners])
            l();
    }
    /** Resolves when `pred` holds of the app (checked on every status change). */
    waitFor(pred, timeoutMs = 20_000) {
        return new Promise((resolve, reject) => {
            if (pred(this))
                return resolve();
            const timer = setTimeout(() => {
                this.listeners.delete(check);
                reject(new Error(`the app is ${this.statusNow}`));
            }, timeoutMs);
            const check = () => {
                if (pred(this)) {
                    clearTimeout(timer);
                    this.listeners.delete(check);
                    resolve();
                }
            };
            this.listeners.add(check);
        });
    }
    /** Starts serving; resolves once serving, rejects on a fatal error. `stop()` ends it. */
    async start() {
        this.stopper = new AbortController();
        let failed;
        this.running = this.serve(this.stopper.signal).catch((e) => {
            failed = e;
            this.setStatus("stopped");
        });
        await this.waitFor((a) => a.status === "serving" || failed !== undefined);
        if (failed !== undefined)
            throw failed;
        return this.clientIdNow;
    }
    /** Stops a started app; handlers are aborted, replies given within the grace are posted. */
    async stop() {
        this.stopper?.abort();
        await this.running;
    }
    /** Serves until `signal` aborts or a fatal error (`FatalError`, thrown). */
    async serve(signal) {
        if (this.tools.size === 0)
            throw new FatalError("an app needs at least one tool");
        for (const t of this.tools.values()) {
            if (t.zod && t.def.input_schema === undefined)
                t.def.input_schema = await zodToJsonSchema(t.zod);
            if (t.outputZod && t.def.output_schema === undefined)
                t.def.output_schema = await zodToJsonSchema(t.outputZod, "output");
        }
        const s = new Serving(this, this.tools, signal ?? new AbortController().signal, {
            endpoint: this.endpoint,
            readToken: () => this.readToken(),
            maxConcurrent: this.maxConcurrent,
            graceMs: this.graceMs,
            backoffMs: this.backoffMs,
            agents: this.agents,
            setStatus: (st, id) => this.setStatus(st, id),
        });
        try {
            await s.run();
        }
        finally {
            this.setStatus("stopped");
        }
    }
    readToken() {
        if (this.token !== undefined)
            return this.token;
        return readFileSync(this.tokenFile, "utf8").trim();
    }
}
/** A call as its handler sees it, with the means to report progress and ask the user on the
 * session that claimed it (methods on the prototype: nothing is made per call but the object). */
class LiveCall {
    run;
    s;
    atOnce;
    id;
    agent;
    session;
    group;
    tool;
    arguments;
    timeoutS;
    createdAt;
    deadline;
    signal;
    /** The last progress report on its way, if any. */
    tail;
    constructor(r, run, s, atOnce) {
        this.run = run;
        this.s = s;
        this.atOnce = atOnce;
        const created = Date.parse(r.created_at);
        this.id = r.id;
        this.agent = r.agent;
        this.session = r.session;
        this.group = r.group;
        this.tool = r.tool;
        this.arguments = r.arguments ?? {};
        this.timeoutS = r.timeout_s;
        this.createdAt = r.created_at;
        this.deadline = r.timeout_s == null || Number.isNaN(created) ? null : created + r.timeout_s * 1000;
        this.signal = run.abort.signal;
    }
    needClaim(what) {
        if (this.atOnce) {
            throw new Error(`tool ${this.tool} answers at once (its reply carries the claim), so it cannot ${what}: declare it without answersAtOnce`);
        }
    }
    progress(progress, total, message) {
        this.needClaim("report progress");
        const body = { client_id: this.s.clientId, progress: checkNumber("progress", progress) };
        if (total !== undefined)
            body.total = checkNumber("total", total);
        if (message !== undefined)
            body.message = String(message).slice(0, MAX_PROGRESS_MESSAGE);
        const json = JSON.stringify(body);
        const send = () => (this.run.ended || this.signal.aborted ? undefined : this.sendProgress(json));
        this.tail = (this.tail ?? Promise.resolve()).then(send);
        return this.tail;
    }
    async sendProgress(json) {
        try {
            const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/progress`, json);
            if (a.status === 200)
                return;
            const e = refusal(a);
            if (!(e instanceof Refused && LOST_RACE.has(e.code)))
                console.warn(`leo-app: the broker refused progress of ${this.id}: ${e.message}`);
        }
        catch {
            // the session is gone, and the call with it
        }
    }
    /** Waits (bounded) for the reports still on their way, before the reply is posted. */
    async flush() {
        let timer;
        await Promise.race([this.tail, new Promise((r) => (timer = setTimeout(r, PROGRESS_FLUSH_MS)))]);
        clearTimeout(timer);
    }
    async ask(message, requestedSchema) {
        this.needClaim("ask the user");
        const json = JSON.stringify({ client_id: this.s.clientId, message: String(message), requested_schema: requestedSchema });
        const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/input`, json, null);
        if (a.status === 200)
            return data(a);
        const e = refusal(a);
        if (e instanceof Refused && e.code === "input_unsupported")
            throw new InputUnsupported(e.brokerMessage, e.status);
        throw e;
    }
}
function checkNumber(name, n) {
    if (typeof n !== "number" || !Number.isFinite(n) || n < 0)
        throw new RangeError(`${name} must be a finite number of at least 0, not ${String(n)}`);
    return n;
}
const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
});
/** The state that outlives sessions: the book of calls, the last event id. */
class Serving {
    app;
    tools;
    signal;
    s;
    queue = [];
    queued = new Set();
    running = new Map();
    seen = new Set();
    lastEventId;
    session;
    eventsPath;
    tasks = new Set();
    /** The key from the last `hello`: the next stream is the same client again. */
    resume;
    /** Counts the sessions served; a reply the broker could not take waits for the next. */
    generation = 0;
    wakeReplies = [];
    constructor(app, tools, signal, s) {
        this.app = app;
        this.tools = tools;
        this.signal = signal;
        this.s = s;
        this.eventsPath = "/api/v1/events?client_tools=1" + (app.name !== undefined ? `&name=${encodeURIComponent(app.name)}` : "");
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
            this.sessionLost();
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
        const next = async (timeoutMs) => {
            while (frames.length === 0 && ended === undefined) {
                await new Promise((r) => {
                    wake = r;
                    if (timeoutMs)
                        setTimeout(r, timeoutMs);
                });
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
            const groups = new Map();
            for (const t of this.tools.values())
                groups.set(t.group, [...(groups.get(t.group) ?? []), t.def]);
            for (const [group, defs] of groups) {
                try {
                    const agents = this.s.agents.get(group);
                    data(await client.post("/api/v1/client-tools", JSON.stringify({ client_id: h.client_id, group, tools: defs, ...(agents ? { agents } : {}) })));
                }
                catch (e) {
                    if (e instanceof Refused && e.code !== "unknown_client")
                        throw new FatalError(`cannot register group ${group}: ${e.message}`);
                    throw e;
                }
            }
            const pending = data(await client.get("/api/v1/client-tools/requests?pending=1"));
            this.session = session;
            this.endStale(new Map(pending.map((p) => [p.id, p.claimed_by ?? null])), h.client_id);
            this.generation++;
            this.wakeReplies.splice(0).forEach((w) => w());
            this.s.setStatus("serving", h.client_id);
            for (const p of pending)
                if (p.state === "parked" && this.serves(p))
                    this.offer(p);
            for (;;) {
                const frame = await next(0);
                if (!frame) {
                    if (this.signal.aborted)
                        await this.drain();
                    return ended ?? "the event stream ended";
                }
                if (frame.id !== undefined)
                    this.lastEventId = frame.id;
                if (frame.event === "client_tool.request") {
                    const r = JSON.parse(frame.data);
                    if (this.serves(r))
                        this.offer(r);
                }
                else if (frame.event === "client_tool.cancelled") {
                    this.cancelled(JSON.parse(frame.data).id);
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
                return await client.openStream(`${this.eventsPath}&resume=${encodeURIComponent(this.resume)}`, this.lastEventId);
            }
            catch (e) {
                // 409 already_claimed: the broker has not seen the old stream go yet; retried later.
                if (!(e instanceof Refused && e.code === "invalid_parameter"))
                    throw e;
                console.warn(`leo-app: the broker refused the resume key (${e.message}); connecting as a new client`);
                this.resume = undefined;
            }
        }
        return client.openStream(this.eventsPath, this.lastEventId);
    }
    /** After a reconnect: ends the running calls the broker no longer holds for us (ended, or
     * claimed by another client); a parked one may still be settled by a reply with its claim. */
    endStale(live, clientId) {
        for (const [id, r] of this.running) {
            const by = live.get(id);
            if (by === undefined || (by !== null && by !== clientId)) {
                this.remember(id);
                r.ended = true;
                r.abort.abort(new Error("the call ended while the app was away"));
            }
        }
    }
    /** The first session served after `generation`. */
    async sessionAfter(generation) {
        while ((this.generation <= generation || !this.session) && !this.signal.aborted) {
            await new Promise((r) => this.wakeReplies.push(r));
        }
        return this.signal.aborted ? undefined : this.session;
    }
    remember(id) {
        this.seen.add(id);
        if (this.seen.size > 4096)
            this.seen.delete(this.seen.values().next().value);
    }
    offer(r) {
        if (this.seen.has(r.id) || this.queued.has(r.id) || this.running.has(r.id))
            return;
        this.remember(r.id);
        this.queued.add(r.id);
        this.queue.push(r);
        this.start();
    }
    cancelled(id) {
        this.remember(id);
        if (this.queued.delete(id))
            this.queue = this.queue.filter((r) => r.id !== id);
        const running = this.running.get(id);
        if (running) {
            running.ended = true;
            running.abort.abort(new Error("the call was cancelled"));
        }
        this.start();
    }
    /** The stream is gone: what runs goes on (its claim waits for the app to resume), what waits
     * is forgotten (the pending list after the reconnect says what still waits). */
    sessionLost() {
        for (const id of this.queued)
            this.seen.delete(id);
        this.queued.clear();
        this.queue = [];
    }
    start() {
        const session = this.session;
        while (session && this.running.size < this.s.maxConcurrent && this.queue.length) {
            const r = this.queue.shift();
            this.queued.delete(r.id);
            const run = { abort: new AbortController(), ended: false };
            this.running.set(r.id, run);
            const task = this.work(session, r, run).finally(() => {
                this.running.delete(r.id);
                this.tasks.delete(task);
                this.start();
            });
            this.tasks.add(task);
        }
    }
    async work(s, r, run) {
        const tool = this.tools.get(r.tool);
        if (!tool.atOnce && !(await this.claim(s, r.id)))
            return;
        if (run.ended)
            return;
        const call = new LiveCall(r, run, s, tool.atOnce);
        const outcome = this.runHandler(tool, call);
        // After a cancel, the handler has the grace to return; then it is abandoned.
        const abandoned = new Promise((resolve) => {
            run.abort.signal.addEventListener("abort", () => setTimeout(() => resolve(undefined), this.s.graceMs).unref(), { once: true });
        });
        const reply = await Promise.race([outcome, abandoned]);
        if (reply !== undefined && call.tail)
            await call.flush();
        if (reply === undefined || run.ended)
            return;
        await this.post(s, r.id, reply, tool.atOnce, run);
    }
    async runHandler(tool, call) {
        let args = call.arguments;
        if (tool.zod) {
            const parsed = tool.zod.safeParse(call.arguments);
            if (!parsed.success) {
                const issue = parsed.error.issues[0];
                const path = "$" + (issue?.path ?? []).map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
                return Reply.error("invalid_arguments", `at ${path}: ${issue?.message ?? "invalid"}`);
            }
            args = parsed.data;
        }
        try {
            return Reply.from(await tool.handler(args, call), tool.structured);
        }
        catch (e) {
            if (e instanceof ToolError)
                return Reply.error(e.code, e.message);
            const name = e instanceof Error ? e.name : typeof e;
            return Reply.error("internal", `the tool's handler threw ${name}: ${describe(e)}`);
        }
    }
    async claim(s, id) {
        try {
            const a = await s.client.post(`/api/v1/client-tools/requests/${id}/claim`, s.claimBody);
            if (a.status === 200)
                return true;
            const e = refusal(a);
            if (!(e instanceof Refused && LOST_RACE.has(e.code)))
                console.warn(`leo-app: claim of ${id} failed: ${e.message}`);
        }
        catch (e) {
            console.warn(`leo-app: claim of ${id} failed: ${describe(e)}`);
        }
        return false;
    }
    body(s, reply, claim) {
        if (!reply.error && reply.structuredJson !== undefined) {
            const content = reply.contentJson === undefined ? "" : `,"content":${reply.contentJson}`;
            return `${claim ? s.claimOkHead : s.okHead}"structured_content":${reply.structuredJson}${content}}`;
        }
        if (!reply.error)
            return [claim ? s.claimOkPrefix : s.okPrefix, reply.contentBuffer, CLOSE];
        return JSON.stringify({ client_id: s.clientId, ok: false, ...(claim ? { claim: true } : {}), error: reply.error });
    }
    /** Posts the reply; one the broker refuses becomes an app error with its message. One the
     * broker could not take (it is down, or this client's stream is gone) is posted again on the
     * next session, until the call ends. */
    async post(s, id, reply, claim, run) {
        const path = `/api/v1/client-tools/requests/${id}/result`;
        const claimant = s.clientId;
        let replaced = false;
        for (;;) {
            const generation = this.generation;
            let e;
            let away = false;
            try {
                const a = await s.client.post(path, this.body(s, reply, claim));
                if (a.status === 200)
                    return;
                e = refusal(a);
            }
            catch (thrown) {
                e = new Error(describe(thrown));
                away = true;
            }
            if (e instanceof Refused && (e.code === "invalid_result" || e.code === "result_too_large") && !replaced) {
                reply = Reply.error(e.code, e.brokerMessage);
                replaced = true;
                continue;
            }
            if (e instanceof Refused && LOST_RACE.has(e.code))
                return;
            if (!away && !(e instanceof Refused && e.code === "unknown_client")) {
                console.warn(`leo-app: cannot post the result of ${id}: ${e.message}`);
                return;
            }
            console.warn(`leo-app: the result of ${id} waits for the broker (${e.message})`);
            const next = await this.sessionAfter(generation);
            if (!next || run.ended)
                return;
            s = next;
            // A new client (the broker refused the key) takes the claim with the result.
            claim ||= s.clientId !== claimant;
        }
    }
    /** At shutdown: aborts every handler and waits for them (bounded). */
    async drain() {
        this.queue = [];
        this.queued.clear();
        for (const r of this.running.values())
            r.abort.abort(new Error("the app is stopping"));
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
