// One call as its handler sees it: the request's fields, the cancel signal, and progress
// reports and questions posted on the session that claimed it.
import { LOST_RACE } from "./codes.js";
import { InputUnsupported, Refused, data, refusal } from "./transport.js";
const MAX_PROGRESS_MESSAGE = 4096;
const PROGRESS_FLUSH_MS = 10_000;
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
