import type { ReadHandler } from "./offers.js";
import { type ToolOptions } from "./tool.js";
import { type Endpoint } from "./transport.js";
/** Where the broker is and which token to present: the settings an `App` and an `Approver`
 * share. */
export interface BrokerOptions {
    /** The broker's home (default `$LEO_HOME`, else `~/.leo`). */
    home?: string;
    /** A unix socket other than `$home/run/leo.sock`. */
    socket?: string;
    /** TCP instead, `http://host:port`, or TLS, `https://host:port` (a broker with `web.tls`). */
    url?: string;
    /** For an https URL: a CA file (PEM) trusted besides Node's roots (default: LEO_CA_FILE). */
    caFile?: string;
    token?: string;
    tokenFile?: string;
    /** A paired device's token (`state/devices/NAME.token`). */
    device?: string;
}
export interface AppOptions extends BrokerOptions {
    /** The default group of the app's tools. */
    group: string;
    /** The app's name, sent with the event stream when set. */
    name?: string;
    /** At most this many calls at once (default 64); the rest wait unclaimed. */
    maxConcurrent?: number;
    /** How long a cancelled handler may run on before it is abandoned (default 5000 ms). */
    cancelGraceMs?: number;
    /** The reconnect delay: first, doubling to cap (default 100 ms to 5 s), jittered. */
    backoffMs?: [number, number];
    /**
     * The agents the tools are offered to: exact names or `*`/`?` globs. A list applies to the
     * app's group, `{ deploy: ["ci-*"] }` to each group named. Other agents neither see nor can
     * call those tools. Left out, every agent gets them.
     */
    agents?: string[] | Record<string, string[]>;
}
export type Status = "connecting" | "serving" | "waiting" | "stopped";
/** `$LEO_HOME`, else `~/.leo`. */
export declare function defaultHome(): string;
/** The broker and a way to read the token now (a token file is read at every connection). */
export interface Where {
    endpoint: Endpoint;
    readToken: () => string;
}
/** `BrokerOptions`, checked. */
export declare function where(o: BrokerOptions): Where;
/** An app that serves tools through the Leo broker. */
export declare class App {
    readonly group: string;
    readonly name?: string;
    private readonly where;
    private readonly maxConcurrent;
    private readonly graceMs;
    private readonly backoffMs;
    private readonly agents;
    private readonly tools;
    private readonly offers;
    private serving?;
    private statusNow;
    private clientIdNow?;
    private listeners;
    private stopper?;
    private running?;
    constructor(o: AppOptions);
    /** Declares a tool. */
    tool<A = Record<string, unknown>>(t: ToolOptions<A>): this;
    /** Offers a prompt: `get` returns MCP's `GetPromptResult` (`{messages}`); `complete`
     * answers `completion/complete` for its arguments (`{completion: {values}}`). */
    prompt(p: {
        name: string;
        title?: string;
        description?: string;
        arguments?: {
            name: string;
            description?: string;
            required?: boolean;
        }[];
        group?: string;
        get: ReadHandler;
        complete?: ReadHandler;
    }): this;
    /** Offers the resource at `uri`: `read` returns MCP's `ReadResourceResult` (`{contents}`). */
    resource(r: {
        uri: string;
        name: string;
        title?: string;
        description?: string;
        mimeType?: string;
        group?: string;
        read: ReadHandler;
    }): this;
    /** Offers the resources whose URIs match `uriTemplate` (`test://items/{id}`). */
    resourceTemplate(t: {
        uriTemplate: string;
        name: string;
        title?: string;
        description?: string;
        mimeType?: string;
        group?: string;
        read: ReadHandler;
        complete?: ReadHandler;
    }): this;
    /** Tells the agents offered `uri` (one of this app's resources, or a URI one of its
     * templates matches) that it changed; those whose harness subscribed read it again.
     * Resolves with how many agent sessions were told. */
    resourceUpdated(uri: string): Promise<number>;
    private offer;
    get status(): Status;
    /** The broker's id for the current stream, while serving. */
    get clientId(): string | undefined;
    private setStatus;
    /** Resolves when `pred` holds of the app (checked on every status change). */
    waitFor(pred: (app: App) => boolean, timeoutMs?: number): Promise<void>;
    /** Starts serving; resolves once serving, rejects on a fatal error. `stop()` ends it. */
    start(): Promise<string>;
    /** Stops a started app; handlers are aborted, replies given within the grace are posted,
     * then the app withdraws its groups (the calls still waiting for them end at once). */
    stop(): Promise<void>;
    /** Serves until `signal` aborts (then stops as `stop()` does) or a fatal error
     * (`FatalError`, thrown). */
    serve(signal?: AbortSignal): Promise<void>;
}
