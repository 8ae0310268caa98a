// HTTP/1.1 to the broker over its unix socket or TCP, on `node:http` with a keep-alive agent.
//
// A quick tool costs one POST per call, so connections are kept open between calls (the
// agent's pool); the event stream gets a connection of its own (`agent: false`), read as it
// arrives.
import http from "node:http";
/** The broker answered with a documented error code. */
export class Refused extends Error {
    code;
    brokerMessage;
    status;
    constructor(code, brokerMessage, status) {
        super(`${code}: ${brokerMessage}`);
        this.code = code;
        this.brokerMessage = brokerMessage;
        this.status = status;
        this.name = "Refused";
    }
}
/** An error retrying cannot fix: a wrong setting, a refused token, a refused group. */
export class FatalError extends Error {
    constructor(message) {
        super(message);
        this.name = "FatalError";
    }
}
/** Parses `http://host:port` (the port is required). */
export function endpointFromUrl(url) {
    const m = /^http:\/\/(\[[^\]]+\]|[^:/?#@ ]+):(\d+)\/?$/.exec(url);
    const port = m ? Number(m[2]) : 0;
    if (!m || port <= 0 || port > 65535) {
        throw new Error(`invalid broker URL ${JSON.stringify(url)}: expected http://host:port`);
    }
    return { host: m[1].replace(/^\[|\]$/g, ""), port, hostHeader: `${m[1]}:${m[2]}` };
}
export function describe(e) {
    return e instanceof Error ? e.message : String(e);
}
/** The documented error of a failed answer. */
export function refusal(a) {
    try {
        const f = JSON.parse(a.body.toString("utf8"));
        if (typeof f.code === "string")
            return new Refused(f.code, String(f.error), a.status);
    }
    catch {
        // not JSON: the Host check answers a plain-text 403
    }
    const text = a.body.subarray(0, 200).toString("utf8").trim();
    if (a.status === 403)
        return new Refused("forbidden", text, 403);
    return new Error(`HTTP ${a.status}: ${text}`);
}
export function data(a) {
    if (a.status !== 200)
        throw refusal(a);
    return JSON.parse(a.body.toString("utf8")).data;
}
const REQUEST_TIMEOUT_MS = 30_000;
/** A client of one broker with one token. */
export class Client {
    endpoint;
    agent;
    headers;
    constructor(endpoint, token) {
        this.endpoint = endpoint;
        this.agent = new http.Agent({ keepAlive: true, maxFreeSockets: 32, timeout: 20_000 });
        this.headers = { host: endpoint.hostHeader, authorization: `Bearer ${token}` };
    }
    options(method, path) {
        const o = { method, path, headers: { ...this.headers } };
        if (this.endpoint.socketPath)
            o.socketPath = this.endpoint.socketPath;
        else {
            o.host = this.endpoint.host;
            o.port = this.endpoint.port;
        }
        return o;
    }
    send(method, path, body) {
        return new Promise((resolve, reject) => {
            const o = this.options(method, path);
            o.agent = this.agent;
            o.timeout = REQUEST_TIMEOUT_MS;
            const payload = body === undefined ? undefined : Buffer.from(body);
            if (payload) {
                o.headers["content-type"] = "application/json";
                o.headers["content-length"] = String(payload.length);
            }
            const req = http.request(o, (res) => {
                const parts = [];
                res.on("data", (c) => parts.push(c));
                res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts) }));
                res.on("error", reject);
            });
            req.on("timeout", () => req.destroy(new Error("the broker did not answer in time")));
            req.on("error", reject);
            req.setNoDelay(true);
            req.end(payload);
        });
    }
    get(path) {
        return this.send("GET", path);
    }
    post(path, body) {
        return this.send("POST", path, body);
    }
    /** Opens the event stream on its own connection; resolves once the broker answered 200. */
    openStream(path, lastEventId) {
        return new Promise((resolve, reject) => {
            const o = this.options("GET", path);
            o.agent = false;
            o.headers.accept = "text/event-stream";
            if (lastEventId !== undefined)
                o.headers["last-event-id"] = String(lastEventId);
            const req = http.request(o, (res) => {
                clearTimeout(timer);
                if (res.statusCode === 200)
                    return resolve(res);
                const parts = [];
                res.on("data", (c) => parts.push(c));
                res.on("end", () => reject(refusal({ status: res.statusCode ?? 0, body: Buffer.concat(parts) })));
            });
            const timer = setTimeout(() => req.destroy(new Error("no answer to the event stream")), REQUEST_TIMEOUT_MS);
            req.on("error", (e) => {
                clearTimeout(timer);
                reject(e);
            });
            req.end();
        });
    }
    close() {
        this.agent.destroy();
    }
}
/** The SSE line format: bytes in, frames out; comments (keep-alives) are skipped. */
export class SseParser {
    buf = "";
    frame = { event: "message", data: [] };
    push(chunk) {
        this.buf += chunk;
        const out = [];
        let start = 0;
        for (;;) {
            const end = this.buf.indexOf("\n", start);
            if (end < 0)
                break;
            let line = this.buf.slice(start, end);
            start = end + 1;
            if (line.endsWith("\r"))
                line = line.slice(0, -1);
            if (line === "") {
                if (this.frame.data.length) {
                    out.push({ id: this.frame.id, event: this.frame.event, data: this.frame.data.join("\n") });
                }
                this.frame = { event: "message", data: [] };
                continue;
            }
            if (line.startsWith(":"))
                continue;
            const colon = line.indexOf(":");
            const name = colon < 0 ? line : line.slice(0, colon);
            let value = colon < 0 ? "" : line.slice(colon + 1);
            if (value.startsWith(" "))
                value = value.slice(1);
            if (name === "data")
                this.frame.data.push(value);
            else if (name === "event")
                this.frame.event = value;
            else if (name === "id")
                this.frame.id = /^\d+$/.test(value) ? Number(value) : undefined;
        }
        this.buf = this.buf.slice(start);
        if (this.buf.length > 8 * 1024 * 1024)
            throw new Error("an event is larger than 8 MiB");
        return out;
    }
}
