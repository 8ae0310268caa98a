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

import { type Body, Client, type Endpoint, FatalError, InputUnsupported, Refused, SseParser, data, describe, endpointFromUrl, refusal } from "./http.js";
import { Reply, ToolError } from "./reply.js";

export { Reply, ToolError, content, type ContentBlock } from "./reply.js";
export { FatalError, InputUnsupported, Refused } from "./http.js";

/** The closing brace of a result body, shared by every post. */
const CLOSE = Buffer.from("}");

/** A JSON Schema object (the broker accepts a keyword subset; see the docs). */
export type JsonSchema = { type: "object"; [keyword: string]: unknown };

/** A zod schema (zod ≥ 3.25 with its v4 API): only what this package calls. */
export interface ZodLike<T> {
  safeParse(value: unknown): { success: true; data: T } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } };
}

/** One call of a tool, as its handler sees it. */
export interface Call {
  /** The request id (`r_…`). */
  id: string;
  /** The agent that called. */
  agent: string;
  session: string;
  group: string;
  tool: string;
  /** The arguments, as the broker checked them against the input schema. */
  arguments: Record<string, unknown>;
  /** The call's timeout in seconds; `null` for a handoff. */
  timeoutS: number | null;
  createdAt: string;
  /** When the broker times the call out (ms since the epoch); `null` for never. */
  deadline: number | null;
  /** Aborted when the call is cancelled (timeout, the agent cancelled, the app stops…). */
  signal: AbortSignal;
  /**
   * Reports progress to the agent's harness (MCP `notifications/progress`; a harness that sent
   * no progress token gets none). `progress` should grow with each report. Reports are posted
   * in order; the promise resolves once this one is sent, never rejects (a report for a call
   * that ended is dropped quietly) and need not be awaited: the reply waits for the reports.
   * Throws at once for a tool that `answersAtOnce` (it has no claim) or a negative number.
   */
  progress(progress: number, total?: number, message?: string): Promise<void>;
  /**
   * Asks the agent's user through the harness (MCP elicitation, form mode) and resolves with
   * the answer. `requestedSchema` is MCP's form subset (an object of string, number, integer
   * and boolean properties). Rejects with `InputUnsupported` when the harness cannot ask, with
   * `Refused` `already_settled` or `timeout` when the call ends first, `invalid_parameter` (with
   * the path) for a schema outside the subset, and an `Error` for a tool that answers at once.
   */
  ask(message: string, requestedSchema: JsonSchema): Promise<Answer>;
}

/** The user's answer to `call.ask`: `content` holds the form's values with `accept`. */
export interface Answer {
  action: "accept" | "decline" | "cancel";
  content?: Record<string, unknown>;
}

/** MCP tool hints shown to the agent's harness. */
export interface ToolAnnotations {
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
}

export type Handler<A> = (args: A, call: Call) => unknown | Promise<unknown>;

export interface ToolOptions<A> {
  name: string;
  description: string;
  /** A JSON Schema for the arguments, or a zod object schema (the arguments are parsed by it). */
  inputSchema?: JsonSchema | ZodLike<A>;
  handler: Handler<A>;
  /** Default: the app's group. */
  group?: string;
  timeoutS?: number;
  label?: string;
  /** A quick tool that may run on more than one instance: no claim, one request per call
   * (so it cannot report progress nor ask the user). */
  answersAtOnce?: boolean;
  /** The MCP tool's title (shown instead of `label`). */
  title?: string;
  annotations?: ToolAnnotations;
  /** The schema of the tool's structured content (JSON Schema, or a zod object schema);
   * a handler of such a tool returning an object answers with structured content. */
  outputSchema?: JsonSchema | ZodLike<unknown>;
  /** `"task"`: harnesses that run MCP tasks run the calls as tasks. */
  execution?: "sync" | "task";
}

export interface AppOptions {
  /** The default group of the app's tools. */
  group: string;
  /** The app's name, sent with the event stream when set. */
  name?: string;
  /** The broker's home (default `$LEO_HOME`, else `~/.leo`). */
  home?: string;
  /** A unix socket other than `$home/run/leo.sock`. */
  socket?: string;
  /** TCP instead, `http://host:port`. */
  url?: string;
  token?: string;
  tokenFile?: string;
  /** A paired device's token (`state/devices/NAME.token`). */
  device?: string;
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

interface ToolEntry {
  def: Record<string, unknown>;
  group: string;
  handler: Handler<any>;
  zod?: ZodLike<any>;
  outputZod?: ZodLike<unknown>;
  atOnce: boolean;
  /** The tool has an output schema: a returned object is structured content. */
  structured: boolean;
}

interface Request {
  id: string;
  agent: string;
  session: string;
  group: string;
  tool: string;
  arguments: Record<string, unknown> | null;
  timeout_s: number | null;
  created_at: string;
  state?: string;
}

const STREAM_IDLE_MS = 45_000;
const HELLO_TIMEOUT_MS = 10_000;
const LOST_RACE = new Set(["already_claimed", "owned_by_other", "already_settled", "unknown_request", "not_provider", "not_claimant"]);
const ANNOTATIONS = new Set(["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]);
const MAX_PROGRESS_MESSAGE = 4096;
const PROGRESS_FLUSH_MS = 10_000;
const FATAL = new Set(["unauthorized", "forbidden", "invalid_parameter", "unknown_parameter"]);

/** `$LEO_HOME`, else `~/.leo`. */
export function defaultHome(): string {
  return process.env.LEO_HOME || join(homedir(), ".leo");
}

function isZod(s: unknown): s is ZodLike<unknown> {
  return typeof s === "object" && s !== null && typeof (s as ZodLike<unknown>).safeParse === "function";
}

/** Replaces local `$ref`s with their definitions and drops `$defs`, for the broker's subset. */
export function inlineRefs(schema: Record<string, unknown>): Record<string, unknown> {
  const defs = { ...(schema.definitions as object), ...(schema.$defs as object) } as Record<string, unknown>;
  const walk = (node: unknown, seen: string[]): unknown => {
    if (Array.isArray(node)) return node.map((n) => walk(n, seen));
    if (typeof node !== "object" || node === null) return node;
    const out: Record<string, unknown> = {};
    const ref = (node as Record<string, unknown>).$ref;
    if (typeof ref === "string") {
      const name = ref.split("/").pop()!;
      if (seen.includes(name)) throw new Error(`recursive schema ${name} cannot be inlined`);
      if (!(name in defs)) throw new Error(`unresolvable $ref ${ref}`);
      Object.assign(out, walk(defs[name], [...seen, name]));
    }
    for (const [k, v] of Object.entries(node)) {
      if (k === "$ref" || k === "$defs" || k === "definitions" || k === "discriminator") continue;
      if (k === "properties") out[k] = Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, walk(s, seen)]));
      else if (k === "const" || k === "default" || k === "enum" || k === "examples") out[k] = v;
      else out[k] = walk(v, seen);
    }
    return out;
  };
  return walk(schema, []) as Record<string, unknown>;
}

async function zodToJsonSchema(schema: ZodLike<unknown>, io: "input" | "output" = "input"): Promise<Record<string, unknown>> {
  let z: { toJSONSchema?: (s: unknown, o?: unknown) => Record<string, unknown> };
  try {
    z = await import("zod" as string);
  } catch {
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
  private readonly endpoint: Endpoint;
  private readonly token?: string;
  private readonly tokenFile: string;
  private readonly maxConcurrent: number;
  private readonly graceMs: number;
  private readonly backoffMs: [number, number];
  private readonly agents: Map<string, string[]>;
  private readonly tools = new Map<string, ToolEntry>();
  private statusNow: Status = "stopped";
  private clientIdNow?: string;
  private listeners = new Set<() => void>();
  private stopper?: AbortController;
  private running?: Promise<void>;

  constructor(o: AppOptions) {
    this.group = o.group;
    this.name = o.name;
    const home = o.home ?? defaultHome();
    if (o.url && o.socket) throw new Error("give a URL or a socket, not both");
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
  tool<A = Record<string, unknown>>(t: ToolOptions<A>): this {
    if (!t.description?.trim()) throw new Error(`tool ${t.name} needs a description`);
    for (const name of this.tools.keys()) {
      if (name.toLowerCase() === t.name.toLowerCase()) throw new Error(`tool ${t.name} is given twice`);
    }
    const def: Record<string, unknown> = { name: t.name, description: t.description };
    const zod = isZod(t.inputSchema) ? (t.inputSchema as ZodLike<A>) : undefined;
    def.input_schema = zod ? undefined : (t.inputSchema ?? { type: "object" });
    if (t.timeoutS !== undefined) def.timeout_s = t.timeoutS;
    if (t.label !== undefined) def.label = t.label;
    if (t.title !== undefined) def.title = t.title;
    if (t.annotations !== undefined) {
      for (const [k, v] of Object.entries(t.annotations)) {
        if (!ANNOTATIONS.has(k)) throw new Error(`tool ${t.name}: unknown annotation ${k} (known: ${[...ANNOTATIONS].join(", ")})`);
        if (typeof v !== "boolean") throw new Error(`tool ${t.name}: annotation ${k} must be true or false`);
      }
      def.annotations = { ...t.annotations };
    }
    const outputZod = isZod(t.outputSchema) ? t.outputSchema : undefined;
    if (t.outputSchema !== undefined && !outputZod) def.output_schema = t.outputSchema;
    if (t.execution !== undefined) {
      if (t.execution !== "sync" && t.execution !== "task") throw new Error(`tool ${t.name}: execution must be "sync" or "task"`);
      def.execution = t.execution;
    }
    this.tools.set(t.name, {
      def, group: t.group ?? this.group, handler: t.handler as Handler<any>, zod, outputZod,
      atOnce: !!t.answersAtOnce, structured: t.outputSchema !== undefined,
    });
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

  /** Stops a started app; handlers are aborted, replies given within the grace are posted. */
  async stop(): Promise<void> {
    this.stopper?.abort();
    await this.running;
  }

  /** Serves until `signal` aborts or a fatal error (`FatalError`, thrown). */
  async serve(signal?: AbortSignal): Promise<void> {
    if (this.tools.size === 0) throw new FatalError("an app needs at least one tool");
    for (const t of this.tools.values()) {
      if (t.zod && t.def.input_schema === undefined) t.def.input_schema = await zodToJsonSchema(t.zod);
      if (t.outputZod && t.def.output_schema === undefined) t.def.output_schema = await zodToJsonSchema(t.outputZod, "output");
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
    } finally {
      this.setStatus("stopped");
    }
  }

  private readToken(): string {
    if (this.token !== undefined) return this.token;
    return readFileSync(this.tokenFile, "utf8").trim();
  }
}

interface Settings {
  endpoint: Endpoint;
  readToken: () => string;
  maxConcurrent: number;
  graceMs: number;
  backoffMs: [number, number];
  /** The agents each group is offered to (absent: every agent). */
  agents: Map<string, string[]>;
  setStatus: (s: Status, clientId?: string) => void;
}

/** A call as its handler sees it, with the means to report progress and ask the user on the
 * session that claimed it (methods on the prototype: nothing is made per call but the object). */
class LiveCall implements Call {
  readonly id: string;
  readonly agent: string;
  readonly session: string;
  readonly group: string;
  readonly tool: string;
  readonly arguments: Record<string, unknown>;
  readonly timeoutS: number | null;
  readonly createdAt: string;
  readonly deadline: number | null;
  readonly signal: AbortSignal;
  /** The last progress report on its way, if any. */
  tail?: Promise<void>;

  constructor(
    r: Request,
    private readonly run: Running,
    private readonly s: Session,
    private readonly atOnce: boolean,
  ) {
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

  private needClaim(what: string): void {
    if (this.atOnce) {
      throw new Error(`tool ${this.tool} answers at once (its reply carries the claim), so it cannot ${what}: declare it without answersAtOnce`);
    }
  }

  progress(progress: number, total?: number, message?: string): Promise<void> {
    this.needClaim("report progress");
    const body: Record<string, unknown> = { client_id: this.s.clientId, progress: checkNumber("progress", progress) };
    if (total !== undefined) body.total = checkNumber("total", total);
    if (message !== undefined) body.message = String(message).slice(0, MAX_PROGRESS_MESSAGE);
    const json = JSON.stringify(body);
    const send = () => (this.run.ended || this.signal.aborted ? undefined : this.sendProgress(json));
    this.tail = (this.tail ?? Promise.resolve()).then(send);
    return this.tail;
  }

  private async sendProgress(json: string): Promise<void> {
    try {
      const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/progress`, json);
      if (a.status === 200) return;
      const e = refusal(a);
      if (!(e instanceof Refused && LOST_RACE.has(e.code))) console.warn(`leo-app: the broker refused progress of ${this.id}: ${e.message}`);
    } catch {
      // the session is gone, and the call with it
    }
  }

  /** Waits (bounded) for the reports still on their way, before the reply is posted. */
  async flush(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.tail, new Promise((r) => (timer = setTimeout(r, PROGRESS_FLUSH_MS)))]);
    clearTimeout(timer);
  }

  async ask(message: string, requestedSchema: JsonSchema): Promise<Answer> {
    this.needClaim("ask the user");
    const json = JSON.stringify({ client_id: this.s.clientId, message: String(message), requested_schema: requestedSchema });
    const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/input`, json, null);
    if (a.status === 200) return data<Answer>(a);
    const e = refusal(a);
    if (e instanceof Refused && e.code === "input_unsupported") throw new InputUnsupported(e.brokerMessage, e.status);
    throw e;
  }
}

function checkNumber(name: string, n: number): number {
  if (typeof n !== "number" || !Number.isFinite(n) || n < 0) throw new RangeError(`${name} must be a finite number of at least 0, not ${String(n)}`);
  return n;
}

interface Running {
  abort: AbortController;
  ended: boolean;
}

interface Session {
  client: Client;
  clientId: string;
  claimBody: string;
  /** `{"client_id":…,"ok":true,"content":` as bytes: the content and `}` follow. */
  okPrefix: Buffer;
  claimOkPrefix: Buffer;
  okHead: string;
  claimOkHead: string;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

/** The state that outlives sessions: the book of calls, the last event id. */
class Serving {
  private queue: Request[] = [];
  private queued = new Set<string>();
  private running = new Map<string, Running>();
  private seen = new Set<string>();
  private lastEventId?: number;
  private session?: Session;
  private eventsPath: string;
  private tasks = new Set<Promise<void>>();
  /** The key from the last `hello`: the next stream is the same client again. */
  private resume?: string;
  /** Counts the sessions served; a reply the broker could not take waits for the next. */
  private generation = 0;
  private wakeReplies: (() => void)[] = [];

  constructor(
    private readonly app: App,
    private readonly tools: Map<string, ToolEntry>,
    private readonly signal: AbortSignal,
    private readonly s: Settings,
  ) {
    this.eventsPath = "/api/v1/events?client_tools=1" + (app.name !== undefined ? `&name=${encodeURIComponent(app.name)}` : "");
  }

  async run(): Promise<void> {
    const [first, cap] = this.s.backoffMs;
    let step = Math.max(first, 1);
    let lastError = "";
    while (!this.signal.aborted) {
      this.s.setStatus("connecting");
      let error: string;
      try {
        error = await this.serveSession();
        step = Math.max(first, 1);
      } catch (e) {
        if (e instanceof FatalError) throw e;
        error = describe(e);
      }
      this.sessionLost();
      if (this.signal.aborted) break;
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

  private serves(r: { group: string; tool: string }): boolean {
    return this.tools.get(r.tool)?.group === r.group;
  }

  /** One session: returns why it ended. */
  private async serveSession(): Promise<string> {
    let token: string;
    try {
      token = this.s.readToken();
    } catch (e) {
      return `cannot read the token: ${describe(e)}`;
    }
    const client = new Client(this.s.endpoint, token);
    let res;
    try {
      res = await this.openStream(client);
    } catch (e) {
      client.close();
      if (e instanceof Refused && FATAL.has(e.code)) throw new FatalError(`the broker refused the app: ${e.message}`);
      throw e;
    }
    res.setEncoding("utf8");
    const parser = new SseParser();
    const frames: ReturnType<SseParser["push"]> = [];
    let wake: (() => void) | undefined;
    let ended: string | undefined;
    const finish = (why: string) => {
      ended ??= why;
      wake?.();
    };
    let idle = setTimeout(() => finish("no event or keep-alive for 45 s"), STREAM_IDLE_MS);
    res.on("data", (chunk: string) => {
      clearTimeout(idle);
      idle = setTimeout(() => finish("no event or keep-alive for 45 s"), STREAM_IDLE_MS);
      try {
        frames.push(...parser.push(chunk));
      } catch (e) {
        finish(describe(e));
      }
      wake?.();
    });
    res.on("end", () => finish("the broker closed the event stream"));
    res.on("error", (e) => finish(describe(e)));
    res.on("close", () => finish("the event stream closed"));
    const onAbort = () => finish("stopped");
    this.signal.addEventListener("abort", onAbort, { once: true });
    const next = async (timeoutMs: number) => {
      while (frames.length === 0 && ended === undefined) {
        await new Promise<void>((r) => {
          wake = r;
          if (timeoutMs) setTimeout(r, timeoutMs);
        });
        wake = undefined;
        if (timeoutMs && frames.length === 0) return undefined;
      }
      return frames.shift();
    };
    try {
      const hello = await next(HELLO_TIMEOUT_MS);
      if (!hello || hello.event !== "hello") return ended ?? "the first event is not hello";
      const h = JSON.parse(hello.data) as { client_id: string; seq: number; resume?: string };
      this.resume = h.resume;
      if (this.lastEventId !== undefined && this.lastEventId > h.seq) this.lastEventId = h.seq;
      const cid = JSON.stringify(h.client_id);
      const session: Session = {
        client,
        clientId: h.client_id,
        claimBody: `{"client_id":${cid}}`,
        okPrefix: Buffer.from(`{"client_id":${cid},"ok":true,"content":`),
        claimOkPrefix: Buffer.from(`{"client_id":${cid},"ok":true,"claim":true,"content":`),
        okHead: `{"client_id":${cid},"ok":true,`,
        claimOkHead: `{"client_id":${cid},"ok":true,"claim":true,`,
      };
      const groups = new Map<string, Record<string, unknown>[]>();
      for (const t of this.tools.values()) groups.set(t.group, [...(groups.get(t.group) ?? []), t.def]);
      for (const [group, defs] of groups) {
        try {
          const agents = this.s.agents.get(group);
          data(await client.post("/api/v1/client-tools", JSON.stringify({ client_id: h.client_id, group, tools: defs, ...(agents ? { agents } : {}) })));
        } catch (e) {
          if (e instanceof Refused && e.code !== "unknown_client") throw new FatalError(`cannot register group ${group}: ${e.message}`);
          throw e;
        }
      }
      const pending = data<(Request & { claimed_by?: string | null })[]>(await client.get("/api/v1/client-tools/requests?pending=1"));
      this.session = session;
      this.endStale(new Map(pending.map((p) => [p.id, p.claimed_by ?? null])), h.client_id);
      this.generation++;
      this.wakeReplies.splice(0).forEach((w) => w());
      this.s.setStatus("serving", h.client_id);
      for (const p of pending) if (p.state === "parked" && this.serves(p)) this.offer(p);
      for (;;) {
        const frame = await next(0);
        if (!frame) {
          if (this.signal.aborted) await this.drain();
          return ended ?? "the event stream ended";
        }
        if (frame.id !== undefined) this.lastEventId = frame.id;
        if (frame.event === "client_tool.request") {
          const r = JSON.parse(frame.data) as Request;
          if (this.serves(r)) this.offer(r);
        } else if (frame.event === "client_tool.cancelled") {
          this.cancelled((JSON.parse(frame.data) as { id: string }).id);
        }
      }
    } finally {
      clearTimeout(idle);
      this.signal.removeEventListener("abort", onAbort);
      res.destroy();
      this.session = undefined;
      setTimeout(() => client.close(), this.s.graceMs + 5000).unref();
    }
  }

  /** Opens the stream with the resume key, or without it when the broker refuses it. */
  private async openStream(client: Client): Promise<Awaited<ReturnType<Client["openStream"]>>> {
    if (this.resume !== undefined) {
      try {
        return await client.openStream(`${this.eventsPath}&resume=${encodeURIComponent(this.resume)}`, this.lastEventId);
      } catch (e) {
        // 409 already_claimed: the broker has not seen the old stream go yet; retried later.
        if (!(e instanceof Refused && e.code === "invalid_parameter")) throw e;
        console.warn(`leo-app: the broker refused the resume key (${e.message}); connecting as a new client`);
        this.resume = undefined;
      }
    }
    return client.openStream(this.eventsPath, this.lastEventId);
  }

  /** After a reconnect: ends the running calls the broker no longer holds for us (ended, or
   * claimed by another client); a parked one may still be settled by a reply with its claim. */
  private endStale(live: Map<string, string | null>, clientId: string): void {
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
  private async sessionAfter(generation: number): Promise<Session | undefined> {
    while ((this.generation <= generation || !this.session) && !this.signal.aborted) {
      await new Promise<void>((r) => this.wakeReplies.push(r));
    }
    return this.signal.aborted ? undefined : this.session;
  }

  private remember(id: string): void {
    this.seen.add(id);
    if (this.seen.size > 4096) this.seen.delete(this.seen.values().next().value as string);
  }

  private offer(r: Request): void {
    if (this.seen.has(r.id) || this.queued.has(r.id) || this.running.has(r.id)) return;
    this.remember(r.id);
    this.queued.add(r.id);
    this.queue.push(r);
    this.start();
  }

  private cancelled(id: string): void {
    this.remember(id);
    if (this.queued.delete(id)) this.queue = this.queue.filter((r) => r.id !== id);
    const running = this.running.get(id);
    if (running) {
      running.ended = true;
      running.abort.abort(new Error("the call was cancelled"));
    }
    this.start();
  }

  /** The stream is gone: what runs goes on (its claim waits for the app to resume), what waits
   * is forgotten (the pending list after the reconnect says what still waits). */
  private sessionLost(): void {
    for (const id of this.queued) this.seen.delete(id);
    this.queued.clear();
    this.queue = [];
  }

  private start(): void {
    const session = this.session;
    while (session && this.running.size < this.s.maxConcurrent && this.queue.length) {
      const r = this.queue.shift()!;
      this.queued.delete(r.id);
      const run: Running = { abort: new AbortController(), ended: false };
      this.running.set(r.id, run);
      const task = this.work(session, r, run).finally(() => {
        this.running.delete(r.id);
        this.tasks.delete(task);
        this.start();
      });
      this.tasks.add(task);
    }
  }

  private async work(s: Session, r: Request, run: Running): Promise<void> {
    const tool = this.tools.get(r.tool)!;
    if (!tool.atOnce && !(await this.claim(s, r.id))) return;
    if (run.ended) return;
    const call = new LiveCall(r, run, s, tool.atOnce);
    const outcome = this.runHandler(tool, call);
    // After a cancel, the handler has the grace to return; then it is abandoned.
    const abandoned = new Promise<undefined>((resolve) => {
      run.abort.signal.addEventListener("abort", () => setTimeout(() => resolve(undefined), this.s.graceMs).unref(), { once: true });
    });
    const reply = await Promise.race([outcome, abandoned]);
    if (reply !== undefined && call.tail) await call.flush();
    if (reply === undefined || run.ended) return;
    await this.post(s, r.id, reply, tool.atOnce, run);
  }

  private async runHandler(tool: ToolEntry, call: Call): Promise<Reply> {
    let args: unknown = call.arguments;
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
    } catch (e) {
      if (e instanceof ToolError) return Reply.error(e.code, e.message);
      const name = e instanceof Error ? e.name : typeof e;
      return Reply.error("internal", `the tool's handler threw ${name}: ${describe(e)}`);
    }
  }

  private async claim(s: Session, id: string): Promise<boolean> {
    try {
      const a = await s.client.post(`/api/v1/client-tools/requests/${id}/claim`, s.claimBody);
      if (a.status === 200) return true;
      const e = refusal(a);
      if (!(e instanceof Refused && LOST_RACE.has(e.code))) console.warn(`leo-app: claim of ${id} failed: ${e.message}`);
    } catch (e) {
      console.warn(`leo-app: claim of ${id} failed: ${describe(e)}`);
    }
    return false;
  }

  private body(s: Session, reply: Reply, claim: boolean): Body {
    if (!reply.error && reply.structuredJson !== undefined) {
      const content = reply.contentJson === undefined ? "" : `,"content":${reply.contentJson}`;
      return `${claim ? s.claimOkHead : s.okHead}"structured_content":${reply.structuredJson}${content}}`;
    }
    if (!reply.error) return [claim ? s.claimOkPrefix : s.okPrefix, reply.contentBuffer, CLOSE];
    return JSON.stringify({ client_id: s.clientId, ok: false, ...(claim ? { claim: true } : {}), error: reply.error });
  }

  /** Posts the reply; one the broker refuses becomes an app error with its message. One the
   * broker could not take (it is down, or this client's stream is gone) is posted again on the
   * next session, until the call ends. */
  private async post(s: Session, id: string, reply: Reply, claim: boolean, run: Running): Promise<void> {
    const path = `/api/v1/client-tools/requests/${id}/result`;
    const claimant = s.clientId;
    let replaced = false;
    for (;;) {
      const generation = this.generation;
      let e: Error;
      let away = false;
      try {
        const a = await s.client.post(path, this.body(s, reply, claim));
        if (a.status === 200) return;
        e = refusal(a);
      } catch (thrown) {
        e = new Error(describe(thrown));
        away = true;
      }
      if (e instanceof Refused && (e.code === "invalid_result" || e.code === "result_too_large") && !replaced) {
        reply = Reply.error(e.code, e.brokerMessage);
        replaced = true;
        continue;
      }
      if (e instanceof Refused && LOST_RACE.has(e.code)) return;
      if (!away && !(e instanceof Refused && e.code === "unknown_client")) {
        console.warn(`leo-app: cannot post the result of ${id}: ${e.message}`);
        return;
      }
      console.warn(`leo-app: the result of ${id} waits for the broker (${e.message})`);
      const next = await this.sessionAfter(generation);
      if (!next || run.ended) return;
      s = next;
      // A new client (the broker refused the key) takes the claim with the result.
      claim ||= s.clientId !== claimant;
    }
  }

  /** At shutdown: aborts every handler and waits for them (bounded). */
  private async drain(): Promise<void> {
    this.queue = [];
    this.queued.clear();
    for (const r of this.running.values()) r.abort.abort(new Error("the app is stopping"));
    // Replies waiting for a session that will not come give up.
    this.wakeReplies.splice(0).forEach((w) => w());
    if (this.tasks.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.tasks]),
      new Promise((r) => (timer = setTimeout(r, this.s.graceMs + 5000))),
    ]);
    clearTimeout(timer);
  }
}
