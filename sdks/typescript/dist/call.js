// One call as its handler sees it: the request's fields, the cancel signal, and progress
// reports and questions posted on the session that claimed it.
import { LOST_RACE } from "./codes.js";
import { InputUnsupported, Refused, data, refusal } from "./transport.js";
const MAX_PROGRESS_MESSAGE = 4096;
const PROGRESS_FLUSH_MS = 10_000;
/** The levels of `call.log`, least severe first (RFC 5424, as MCP names them). */
export const LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
/** A call as its handler sees it, with the means to report progress and ask the user on the
 * session that claimed it (methods on the prototype: nothing is made per call but the object). */
export class LiveCall {
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
        return this.advise("progress", body);
    }
    log(level, data, logger) {
        this.needClaim("log");
        if (!LOG_LEVELS.includes(level))
            throw new RangeError(`level must be one of ${LOG_LEVELS.join(", ")}, not ${String(level)}`);
        const body = { client_id: this.s.clientId, level, data };
        if (logger !== undefined)
            body.logger = String(logger);
        return this.advise("log", body);
    }
    /** Queues a report or log message after the ones before it. */
    advise(route, body) {
        const json = JSON.stringify(body);
        const send = () => (this.run.ended || this.signal.aborted ? undefined : this.sendAdvice(route, json));
        this.tail = (this.tail ?? Promise.resolve()).then(send);
        return this.tail;
    }
    async sendAdvice(route, json) {
        try {
            const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/${route}`, json);
            if (a.status === 200)
                return;
            const e = refusal(a);
            if (!(e instanceof Refused && LOST_RACE.has(e.code)))
                console.warn(`leo-app: the broker refused ${route} of ${this.id}: ${e.message}`);
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
        return this.waitFor("input", { client_id: this.s.clientId, message: String(message), requested_schema: requestedSchema });
    }
    async sample(params) {
        this.needClaim("sample");
        return this.waitFor("sample", { client_id: this.s.clientId, params });
    }
    /** Posts a request for the harness and resolves with the answer's data (bounded by the call). */
    async waitFor(route, body) {
        const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/${route}`, JSON.stringify(body), null);
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
