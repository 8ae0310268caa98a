// HTTP/1.1 to the broker over its unix socket, TCP, or TLS over TCP (`https://`).
//
// A quick tool costs one POST per call, so that POST is written by hand on a pooled keep-alive
// socket (`node:net`): a request is one write of a prepared head and the body, a response a
// status line, a few headers and a Content-Length body. The event stream, opened once per
// session, uses `node:http` on a connection of its own (`agent: false`), read as it arrives.
//
// Nothing here keeps a stopped app running: a pooled socket is `unref`ed while it idles (it is
// the process's only link to a broker that may take seconds to close it), and a request given
// the app's stop signal is torn down when the signal fires, instead of waiting for a broker
// that is shutting down to answer.
//
// TLS trusts Node's roots (with NODE_EXTRA_CA_CERTS) and, when given, a CA file (`caFile`, else
// the file LEO_CA_FILE names), such as the `tls/ca.pem` of `leo tls init`: the rule of every Leo
// client. The certificate is checked, names and expiry included; a refused one says why
// (`tlsFailure`).
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import tls from "node:tls";
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
/** `call.ask` cannot reach the user: the agent's harness did not declare MCP elicitation (the
 * broker answers `409 input_unsupported` at once). Fall back to a default or the app's own
 * window. */
export class InputUnsupported extends Refused {
    constructor(brokerMessage, status) {
        super("input_unsupported", brokerMessage, status);
        this.name = "InputUnsupported";
    }
}
/** An error retrying cannot fix: a wrong setting, a refused token, a refused group. */
export class FatalError extends Error {
    constructor(message) {
        super(message);
        this.name = "FatalError";
    }
}
/** Where `endpoint` is, as a URL: `unix:PATH`, `http://HOST:PORT` or `https://HOST:PORT`. */
export function endpointText(endpoint) {
    if (endpoint.socketPath !== undefined)
        return `unix:${endpoint.socketPath}`;
    return `${endpoint.tls ? "https" : "http"}://${endpoint.hostHeader}`;
}
/** The variable naming a CA file (PEM) trusted besides the default roots. */
export const CA_FILE_ENV = "LEO_CA_FILE";
/** Parses `http://host:port` or `https://host:port` (the port is required); an https URL
 * trusts `caFile` (else the file LEO_CA_FILE names) besides Node's roots. */
export function endpointFromUrl(url, caFile) {
    const m = /^(https?):\/\/(\[[^\]]+\]|[^:/?#@ ]+):(\d+)\/?$/.exec(url);
    const port = m ? Number(m[3]) : 0;
    if (!m || port <= 0 || port > 65535) {
        throw new Error(`invalid broker URL ${JSON.stringify(url)}: expected http://host:port or https://host:port`);
    }
    if (caFile !== undefined && m[1] !== "https")
        throw new Error("a CA file needs an https:// URL");
    const endpoint = { host: m[2].replace(/^\[|\]$/g, ""), port, hostHeader: `${m[2]}:${m[3]}` };
    if (m[1] === "https")
        endpoint.tls = trust(caFile ?? (process.env[CA_FILE_ENV] || undefined));
    return endpoint;
}
/** Node's roots plus the certificates of `file`, read once. */
function trust(file) {
    if (file === undefined)
        return {};
    let pem;
    try {
        pem = readFileSync(file, "utf8");
    }
    catch (e) {
        throw new Error(`cannot read the CA file ${file}: ${describe(e)}`);
    }
    if (!pem.includes("-----BEGIN CERTIFICATE-----"))
        throw new Error(`${file} holds no PEM certificate`);
    return { ca: [...tls.rootCertificates, pem] };
}
/** A refused TLS handshake with `host`, said so that its reader knows what to fix. */
function tlsFailure(host, e) {
    let why;
    switch (e.code) {
        case "CERT_HAS_EXPIRED":
            why = "its certificate has expired; renew it (`leo tls init` on the broker's host)";
            break;
        case "ERR_TLS_CERT_ALTNAME_INVALID":
            why = `its certificate is not valid for ${JSON.stringify(host)} (\`leo tls init --host ${host}\`)`;
            break;
        case "SELF_SIGNED_CERT_IN_CHAIN":
        case "DEPTH_ZERO_SELF_SIGNED_CERT":
        case "UNABLE_TO_GET_ISSUER_CERT_LOCALLY":
        case "UNABLE_TO_VERIFY_LEAF_SIGNATURE":
            why = `its certificate is not signed by a CA this client trusts; set ${CA_FILE_ENV} to the broker's CA file (tls/ca.pem in the broker's LEO_HOME after \`leo tls init\`)`;
            break;
        case "ERR_SSL_WRONG_VERSION_NUMBER":
        case "EPROTO":
            why = "it does not speak TLS (is it a plain http:// listener?)";
            break;
        default:
            return e;
    }
    return new Error(`TLS with the broker at ${host} failed: ${why}`);
}
/** The options of a TLS connection to `endpoint`. */
function tlsOptions(endpoint) {
    const host = endpoint.host;
    return {
        ca: endpoint.tls?.ca,
        // SNI carries DNS names only; an IP address is checked against the certificate without it.
        servername: net.isIP(host) ? undefined : host,
        ALPNProtocols: ["http/1.1"],
    };
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
/** The error of a request torn down by its stop signal. */
export class Stopped extends Error {
    constructor() {
        super("stopped");
        this.name = "Stopped";
    }
}
/** `p`, or a rejection after `timeoutMs` (unless `null`) or when `signal` aborts; whichever
 * comes first. Its timer and listener are gone however it ends. */
async function bounded(p, timeoutMs, signal) {
    let timer;
    let onAbort;
    const stops = [];
    if (timeoutMs !== null) {
        stops.push(new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("the broker did not answer in time")), timeoutMs))));
    }
    if (signal) {
        stops.push(new Promise((_, reject) => signal.addEventListener("abort", (onAbort = () => reject(new Stopped())), { once: true })));
    }
    try {
        return await Promise.race([p, ...stops]);
    }
    finally {
        clearTimeout(timer);
        if (onAbort)
            signal.removeEventListener("abort", onAbort);
    }
}
/** One keep-alive connection; one request at a time (no pipelining). */
class Conn {
    sock;
    buf = Buffer.alloc(0);
    waiting;
    dead = false;
    /** Bytes of a response have arrived since the last request was written. */
    answered = false;
    since = 0;
    constructor(sock) {
        this.sock = sock;
        sock.setNoDelay(true);
        sock.on("data", (d) => {
            this.answered = true;
            this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
            this.parse();
        });
        sock.on("error", (e) => this.fail(e));
        sock.on("close", () => this.fail(new Error("the broker closed the connection")));
    }
    request(head, body) {
        this.answered = false;
        return new Promise((resolve, reject) => {
            this.waiting = { resolve, reject };
            const size = body.reduce((n, b) => n + b.length, 0);
            if (size < 16 * 1024)
                this.sock.write(Buffer.concat([Buffer.from(head, "latin1"), ...body]));
            else {
                // One writev for the head and every chunk: a large body is never copied into one buffer.
                this.sock.cork();
                this.sock.write(head, "latin1");
                for (const b of body)
                    this.sock.write(b);
                this.sock.uncork();
            }
        });
    }
    fail(e) {
        this.dead = true;
        const w = this.waiting;
        this.waiting = undefined;
        w?.reject(e);
    }
    parse() {
        if (!this.waiting)
            return;
        const end = this.buf.indexOf("\r\n\r\n");
        if (end < 0)
            return;
        const lines = this.buf.subarray(0, end).toString("latin1").split("\r\n");
        const status = Number(lines[0].split(" ")[1]);
        let length = -1;
        let keep = lines[0].startsWith("HTTP/1.1");
        let chunked = false;
        for (const line of lines.slice(1)) {
            const colon = line.indexOf(":");
            const name = line.slice(0, colon).trim().toLowerCase();
            const value = line.slice(colon + 1).trim().toLowerCase();
            if (name === "content-length")
                length = Number(value);
            else if (name === "connection" && value === "close")
                keep = false;
            else if (name === "transfer-encoding" && value === "chunked")
                chunked = true;
        }
        let body;
        let rest;
        if (chunked) {
            const parts = [];
            let at = end + 4;
            for (;;) {
                const eol = this.buf.indexOf("\r\n", at);
                if (eol < 0)
                    return;
                const size = parseInt(this.buf.subarray(at, eol).toString("latin1"), 16);
                if (this.buf.length < eol + 2 + size + 2)
                    return;
                if (size === 0) {
                    at = eol + 4;
                    break;
                }
                parts.push(this.buf.subarray(eol + 2, eol + 2 + size));
                at = eol + 2 + size + 2;
            }
            body = Buffer.concat(parts);
            rest = this.buf.subarray(at);
        }
        else {
            if (length < 0)
                return this.fail(new Error("a response without Content-Length"));
            if (this.buf.length < end + 4 + length)
                return;
            body = this.buf.subarray(end + 4, end + 4 + length);
            rest = this.buf.subarray(end + 4 + length);
        }
        this.buf = rest.length ? Buffer.from(rest) : Buffer.alloc(0);
        const w = this.waiting;
        this.waiting = undefined;
        w.resolve({ status, body, keep });
    }
}
const MAX_IDLE = 32;
const IDLE_FOR_MS = 20_000;
/** A client of one broker with one token. JSON requests are written by hand on pooled
 * keep-alive sockets: a quick tool's whole cost is one POST, and `node:http`'s client spends
 * more time per request than the broker does. */
export class Client {
    endpoint;
    headTail;
    headers;
    idle = [];
    constructor(endpoint, token) {
        this.endpoint = endpoint;
        if (/[\r\n]/.test(token))
            throw new Error("the token has characters a header cannot carry");
        this.headers = { host: endpoint.hostHeader, authorization: `Bearer ${token}` };
        this.headTail = `Host: ${endpoint.hostHeader}\r\nAuthorization: Bearer ${token}\r\n`;
    }
    options(method, path) {
        const o = { method, path, headers: { ...this.headers } };
        if (this.endpoint.socketPath)
            o.socketPath = this.endpoint.socketPath;
        else {
            o.host = this.endpoint.host;
            o.port = this.endpoint.port;
            if (this.endpoint.tls)
                Object.assign(o, tlsOptions(this.endpoint));
        }
        return o;
    }
    connect() {
        return new Promise((resolve, reject) => {
            const { socketPath, host, port } = this.endpoint;
            const secure = this.endpoint.tls !== undefined;
            const sock = socketPath
                ? net.connect({ path: socketPath })
                : secure
                    ? tls.connect({ host: host, port: port, ...tlsOptions(this.endpoint) })
                    : net.connect({ host: host, port: port });
            const onError = (e) => reject(secure ? tlsFailure(host, e) : e);
            sock.once("error", onError);
            sock.once(secure ? "secureConnect" : "connect", () => {
                sock.off("error", onError);
                resolve(new Conn(sock));
            });
        });
    }
    takeIdle() {
        const now = Date.now();
        for (;;) {
            const c = this.idle.pop();
            if (!c)
                return undefined;
            if (!c.dead && now - c.since < IDLE_FOR_MS) {
                c.sock.ref();
                return c;
            }
            c.sock.destroy();
        }
    }
    /** Sends a request on a pooled connection; `timeoutMs: null` waits as long as the broker
     * takes (a question waits for the user). A `signal` that aborts ends it with `Stopped`. */
    async send(method, path, body, timeoutMs = REQUEST_TIMEOUT_MS, signal) {
        const payload = body === undefined ? undefined : Array.isArray(body) ? body : [Buffer.from(body)];
        let head = `${method} ${path} HTTP/1.1\r\n${this.headTail}`;
        if (payload)
            head += `Content-Type: application/json\r\nContent-Length: ${payload.reduce((n, b) => n + b.length, 0)}\r\n\r\n`;
        else
            head += method === "GET" ? "\r\n" : "Content-Length: 0\r\n\r\n";
        for (;;) {
            if (signal?.aborted)
                throw new Stopped();
            let conn = this.takeIdle();
            const reused = conn !== undefined;
            if (!conn) {
                const connecting = this.connect();
                try {
                    conn = await bounded(connecting, timeoutMs, signal);
                }
                catch (e) {
                    // A connection made after the stop (or the timeout) won the race is closed at once.
                    connecting.then((c) => c.sock.destroy(), () => { });
                    throw e;
                }
            }
            try {
                const answer = await bounded(conn.request(head, payload ?? []), timeoutMs, signal);
                if (answer.keep && this.idle.length < MAX_IDLE) {
                    conn.since = Date.now();
                    conn.sock.unref();
                    this.idle.push(conn);
                }
                else
                    conn.sock.destroy();
                return { status: answer.status, body: answer.body };
            }
            catch (e) {
                conn.sock.destroy();
                // The broker closed an idle connection before the request reached it: send it again.
                if (reused && !conn.answered && !signal?.aborted)
                    continue;
                throw e;
            }
        }
    }
    get(path, signal) {
        return this.send("GET", path, undefined, REQUEST_TIMEOUT_MS, signal);
    }
    post(path, body, timeoutMs = REQUEST_TIMEOUT_MS, signal) {
        return this.send("POST", path, body, timeoutMs, signal);
    }
    /** Opens the event stream on its own connection; resolves once the broker answered 200. A
     * `signal` that aborts before then tears the request down (`Stopped`). */
    openStream(path, lastEventId, signal) {
        return new Promise((resolve, reject) => {
            if (signal?.aborted)
                return reject(new Stopped());
            const o = this.options("GET", path);
            o.agent = false;
            o.headers.accept = "text/event-stream";
            if (lastEventId !== undefined)
                o.headers["last-event-id"] = String(lastEventId);
            const done = () => {
                clearTimeout(timer);
                signal?.removeEventListener("abort", onAbort);
            };
            const req = (this.endpoint.tls ? https : http).request(o, (res) => {
                done();
                if (res.statusCode === 200)
                    return resolve(res);
                const parts = [];
                res.on("data", (c) => parts.push(c));
                res.on("end", () => reject(refusal({ status: res.statusCode ?? 0, body: Buffer.concat(parts) })));
            });
            const timer = setTimeout(() => req.destroy(new Error("no answer to the event stream")), REQUEST_TIMEOUT_MS);
            const onAbort = () => req.destroy(new Stopped());
            signal?.addEventListener("abort", onAbort, { once: true });
            req.on("error", (e) => {
                done();
                reject(this.endpoint.tls ? tlsFailure(this.endpoint.host, e) : e);
            });
            req.end();
        });
    }
    close() {
        for (const c of this.idle.splice(0))
            c.sock.destroy();
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
