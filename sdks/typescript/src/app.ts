// The app: its settings and tools (as the Rust SDK's `app`); `serve` hands them to the
// connection loop (`session`).

import type { Offer, ReadHandler } from "./offers.js";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import { Serving } from "./session.js";
import { type ToolEntry, type ToolOptions, resolveSchemas, toolEntry } from "./tool.js";
import { type Endpoint, FatalError, endpointFromUrl } from "./transport.js";

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
export function defaultHome(): string {
  return process.env.LEO_HOME || join(homedir(), ".leo");
}

/** The broker and a way to read the token now (a token file is read at every connection). */
export interface Where {
  endpoint: Endpoint;
  readToken: () => string;
}

/** `BrokerOptions`, checked. */
export function where(o: BrokerOptions): Where {
  const home = o.home ?? defaultHome();
  if (o.url && o.socket) throw new Error("give a URL or a socket, not both");
  if (o.caFile !== undefined && !o.url) throw new Error("a CA file needs an https:// URL");
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
function agentsByGroup(group: string, agents: AppOptions["agents"]): Map<string, string[]> {
  if (agents === undefined) return new Map();
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
  readonly group: string;
  readonly name?: string;
  private readonly where: Where;
  private readonly maxConcurrent: number;
  private readonly graceMs: number;
  private readonly backoffMs: [number, number];
  private readonly agents: Map<string, string[]>;
  private readonly tools = new Map<string, ToolEntry>();
  private readonly offers: Offer[] = [];
  private serving?: Serving;
  private statusNow: Status = "stopped";
  private clientIdNow?: string;
  private listeners = new Set<() => void>();
  private stopper?: AbortController;
  private running?: Promise<void>;

  constructor(o: AppOptions) {
    this.group = o.group;
    this.name = o.name;
    this.where = where(o);
    this.maxConcurrent = Math.max(1, o.maxConcurrent ?? 64);
    this.graceMs = o.cancelGraceMs ?? 5000;
    this.backoffMs = o.backoffMs ?? [100, 5000];
    this.agents = agentsByGroup(o.group, o.agents);
  }

  /** Declares a tool. */
  tool<A = Record<string, unknown>>(t: ToolOptions<A>): this {
    this.tools.set(t.name, toolEntry(t, this.group, this.tools.keys()));
    return this;
  }

  /** Offers a prompt: `get` returns MCP's `GetPromptResult` (`{messages}`); `complete`
   * answers `completion/complete` for its arguments (`{completion: {values}}`). */
  prompt(p: { name: string; title?: string; description?: string; arguments?: { name: string; description?: string; required?: boolean }[]; group?: string; get: ReadHandler; complete?: ReadHandler }): this {
    const { group, get, complete, ...def } = p;
    return this.offer({ group: group ?? this.group, kind: "prompts", def, read: get, complete }, def.name);
  }

  /** Offers the resource at `uri`: `read` returns MCP's `ReadResourceResult` (`{contents}`). */
  resource(r: { uri: string; name: string; title?: string; description?: string; mimeType?: string; group?: string; read: ReadHandler }): this {
    const { group, read, mimeType, ...def } = r;
    return this.offer({ group: group ?? this.group, kind: "resources", def: { ...def, ...(mimeType ? { mime_type: mimeType } : {}) }, read }, def.uri);
  }

  /** Offers the resources whose URIs match `uriTemplate` (`test://items/{id}`). */
  resourceTemplate(t: { uriTemplate: string; name: string; title?: string; description?: string; mimeType?: string; group?: string; read: ReadHandler; complete?: ReadHandler }): this {
    const { group, read, complete, mimeType, uriTemplate, ...rest } = t;
    const def = { uri_template: uriTemplate, ...rest, ...(mimeType ? { mime_type: mimeType } : {}) };
    return this.offer({ group: group ?? this.group, kind: "resource_templates", def, read, complete }, uriTemplate);
  }

  /** Tells the agents offered `uri` (one of this app's resources, or a URI one of its
   * templates matches) that it changed; those whose harness subscribed read it again.
   * Resolves with how many agent sessions were told. */
  resourceUpdated(uri: string): Promise<number> {
    if (!this.serving) return Promise.reject(new Error("the app is not running"));
    return this.serving.resourceUpdated(uri);
  }

  private offer(o: Offer, key: string): this {
    const same = (x: Offer) => x.kind === o.kind && (x.def.name === key || x.def.uri === key || x.def.uri_template === key);
    if (this.offers.some(same)) throw new Error(`${o.kind} ${JSON.stringify(key)} is given twice`);
    this.offers.push(o);
    return this;
  }

  get status(): Status {
    return this.statusNow;
  }

  /** The broker's id for the current stream, while serving. */
  get clientId(): string | undefined {
    return this.clientIdNow;
  }

  private setStatus(s: Status, clientId?: string): void {
    this.statusNow = s;
    this.clientIdNow = clientId;
    for (const l of [...this.listeners]) l();
  }

  /** Resolves when `pred` holds of the app (checked on every status change). */
  waitFor(pred: (app: App) => boolean, timeoutMs = 20_000): Promise<void> {
    return new Promise((resolve, reject) => {
      if (pred(this)) return resolve();
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
  async start(): Promise<string> {
    this.stopper = new AbortController();
    let failed: unknown;
    this.running = this.serve(this.stopper.signal).catch((e) => {
      failed = e;
      this.setStatus("stopped");
    });
    await this.waitFor((a) => a.status === "serving" || failed !== undefined);
    if (failed !== undefined) throw failed;
    return this.clientIdNow!;
  }

  /** Stops a started app; handlers are aborted, replies given within the grace are posted,
   * then the app withdraws its groups (the calls still waiting for them end at once). */
  async stop(): Promise<void> {
    this.stopper?.abort();
    await this.running;
  }

  /** Serves until `signal` aborts (then stops as `stop()` does) or a fatal error
   * (`FatalError`, thrown). */
  async serve(signal?: AbortSignal): Promise<void> {
    if (this.tools.size === 0 && this.offers.length === 0) throw new FatalError("an app needs at least one tool, prompt or resource");
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
    } finally {
      this.setStatus("stopped");
    }
  }
}
