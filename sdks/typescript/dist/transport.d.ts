import http from "node:http";
/** A request body: JSON text, or its bytes in chunks written as they are. */
export type Body = Buffer | string | Buffer[];
/** The broker answered with a documented error code. */
export declare class Refused extends Error {
    readonly code: string;
    readonly brokerMessage: string;
    readonly status: number;
    constructor(code: string, brokerMessage: string, status: number);
}
/** `call.ask` cannot reach the user: the agent's harness did not declare MCP elicitation (the
 * broker answers `409 input_unsupported` at once). Fall back to a default or the app's own
 * window. */
export declare class InputUnsupported extends Refused {
    constructor(brokerMessage: string, status: number);
}
/** An error retrying cannot fix: a wrong setting, a refused token, a refused group. */
export declare class FatalError extends Error {
    constructor(message: string);
}
export interface Endpoint {
    socketPath?: string;
    host?: string;
    port?: number;
    /** The Host header: `localhost` on the socket, `host:port` on TCP (the broker checks it). */
    hostHeader: string;
    /** Set for `https://`: the CA certificates trusted (absent: Node's own roots). */
    tls?: {
        ca?: string[];
    };
}
/** Where `endpoint` is, as a URL: `unix:PATH`, `http://HOST:PORT` or `https://HOST:PORT`. */
export declare function endpointText(endpoint: Endpoint): string;
/** The variable naming a CA file (PEM) trusted besides the default roots. */
export declare const CA_FILE_ENV = "LEO_CA_FILE";
/** Parses `http://host:port` or `https://host:port` (the port is required); an https URL
 * trusts `caFile` (else the file LEO_CA_FILE names) besides Node's roots. */
export declare function endpointFromUrl(url: string, caFile?: string): Endpoint;
export declare function describe(e: unknown): string;
export interface Answer {
    status: number;
    body: Buffer;
}
/** The documented error of a failed answer. */
export declare function refusal(a: Answer): Error;
export declare function data<T>(a: Answer): T;
/** The error of a request torn down by its stop signal. */
export declare class Stopped extends Error {
    constructor();
}
/** A client of one broker with one token. JSON requests are written by hand on pooled
 * keep-alive sockets: a quick tool's whole cost is one POST, and `node:http`'s client spends
 * more time per request than the broker does. */
export declare class Client {
    readonly endpoint: Endpoint;
    private readonly headTail;
    private readonly headers;
    private idle;
    constructor(endpoint: Endpoint, token: string);
    private options;
    private connect;
    private takeIdle;
    /** Sends a request on a pooled connection; `timeoutMs: null` waits as long as the broker
     * takes (a question waits for the user). A `signal` that aborts ends it with `Stopped`. */
    send(method: string, path: string, body?: Body, timeoutMs?: number | null, signal?: AbortSignal): Promise<Answer>;
    get(path: string, signal?: AbortSignal): Promise<Answer>;
    post(path: string, body: Body, timeoutMs?: number | null, signal?: AbortSignal): Promise<Answer>;
    /** Opens the event stream on its own connection; resolves once the broker answered 200. A
     * `signal` that aborts before then tears the request down (`Stopped`). */
    openStream(path: string, lastEventId: number | undefined, signal?: AbortSignal): Promise<http.IncomingMessage>;
    close(): void;
}
/** One server-sent event. */
export interface Frame {
    id?: number;
    event: string;
    data: string;
}
/** The SSE line format: bytes in, frames out; comments (keep-alives) are skipped. */
export declare class SseParser {
    private buf;
    private frame;
    push(chunk: string): Frame[];
}
