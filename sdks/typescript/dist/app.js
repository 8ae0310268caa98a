// The app: its settings and tools (as the Rust SDK's `app`); `serve` hands them to the
// connection loop (`session`).
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { Serving } from "./session.js";
import { resolveSchemas, toolEntry } from "./tool.js";
import { FatalError, endpointFromUrl } from "./transport.js";
/** `$LEO_HOME`, else `~/.leo`. */
export function defaultHome() {
    return process.env.LEO_HOME || join(homedir(), ".leo");
}
/** `BrokerOptions`, checked. */
export function where(o) {
    const home = o.home ?? defaultHome();
    if (o.url && o.socket)
        throw new Error("give a URL or a socket, not both");
    if (o.caFile !== undefined && !o.url)
        throw new Error("a CA file needs an https:// URL");
    const endpoint = o.url
        ? endpointFromUrl(o.url, o.caFile)
        : { socketPath: o.socket ?? join(home, "run", "leo.sock"), hostHeader: "localhost" };
    if ([o.token, o.tokenFile, o.device].filter((x) => x !== undefined).length > 1) {
        throw new Error("give one of a token, a token file or a device");
    }
    const token = o.token;
    const tokenFile = o.device !== undefined ? join(home, "state", "devices", `${o.device}.token`) : (o.tokenFile ?? join(home, "state", "operator.token"));
    return { endpoint, readToken: () => token ?? readFileSync(tokenFile, "utf8").trim() };
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
    where;
    maxConcurrent;
    graceMs;
    backoffMs;
    agents;
    tools = new Map();
    offers = [];
    serving;
    statusNow = "stopped";
    clientIdNow;
    listeners = new Set();
    stopper;
    running;
    constructor(o) {
        this.group = o.group;
        this.name = o.name;
        this.where = where(o);
        this.maxConcurrent = Math.max(1, o.maxConcurrent ?? 64);
        this.graceMs = o.cancelGraceMs ?? 5000;
        this.backoffMs = o.backoffMs ?? [100, 5000];
        this.agents = agentsByGroup(o.group, o.agents);
    }
    /** Declares a tool. */
    tool(t) {
        this.tools.set(t.name, toolEntry(t, this.group, this.tools.keys()));
        return this;
    }
    /** Offers a prompt: `get` returns MCP's `GetPromptResult` (`{messages}`); `complete`
     * answers `completion/complete` for its arguments (`{completion: {values}}`). */
    prompt(p) {
        const { group, get, complete, ...def } = p;
        return this.offer({ group: group ?? this.group, kind: "prompts", def, read: get, complete }, def.name);
    }
    /** Offers the resource at `uri`: `read` returns MCP's `ReadResourceResult` (`{contents}`). */
    resource(r) {
        const { group, read, mimeType, ...def } = r;
        return this.offer({ group: group ?? this.group, kind: "resources", def: { ...def, ...(mimeType ? { mime_type: mimeType } : {}) }, read }, def.uri);
    }
    /** Offers the resources whose URIs match `uriTemplate` (`test://items/{id}`). */
    resourceTemplate(t) {
        const { group, read, complete, mimeType, uriTemplate, ...rest } = t;
        const def = { uri_template: uriTemplate, ...rest, ...(mimeType ? { mime_type: mimeType } : {}) };
        return this.offer({ group: group ?? this.group, kind: "resource_templates", def, read, complete }, uriTemplate);
    }
    /** Tells the agents offered `uri` (one of this app's resources, or a URI one of its
     * templates matches) that it changed; those whose harness subscribed read it again.
     * Resolves with how many agent sessions were told. */
    resourceUpdated(uri) {
        if (!this.serving)
            return Promise.reject(new Error("the app is not running"));
        return this.serving.resourceUpdated(uri);
    }
    offer(o, key) {
        const same = (x) => x.kind === o.kind && (x.def.name === key || x.def.uri === key || x.def.uri_template === key);
        if (this.offers.some(same))
            throw new Error(`${o.kind} ${JSON.stringify(key)} is given twice`);
        this.offers.push(o);
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
    /** Stops a started app; handlers are aborted, replies given within the grace are posted,
     * then the app withdraws its groups (the calls still waiting for them end at once). */
    async stop() {
        this.stopper?.abort();
        await this.running;
    }
    /** Serves until `signal` aborts (then stops as `stop()` does) or a fatal error
     * (`FatalError`, thrown). */
    async serve(signal) {
        if (this.tools.size === 0 && this.offers.length === 0)
            throw new FatalError("an app needs at least one tool, prompt or resource");
        await resolveSchemas(this.tools.values());
        const s = (this.serving = new Serving(this.name, this.tools, signal ?? new AbortController().signal, {
            endpoint: this.where.endpoint,
            readToken: this.where.readToken,
            maxConcurrent: this.maxConcurrent,
            graceMs: this.graceMs,
            backoffMs: this.backoffMs,
            agents: this.agents,
            offers: this.offers,
            setStatus: (st, id) => this.setStatus(st, id),
        }));
        try {
            await s.run();
        }
        finally {
            this.setStatus("stopped");
        }
    }
}
