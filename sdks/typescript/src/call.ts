// One call as its handler sees it: the request's fields, the cancel signal, and progress
// reports and questions posted on the session that claimed it.

import type { Link } from "./worker.js";
import { LOST_RACE } from "./codes.js";
import { InputUnsupported, Refused, data, refusal } from "./transport.js";
import type { JsonSchema } from "./tool.js";

const MAX_PROGRESS_MESSAGE = 4096;
const PROGRESS_FLUSH_MS = 10_000;

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
  /**
   * Logs `data` (a string, or any JSON) at `level` for the agent's harness (MCP
   * `notifications/message`, sent when it reaches the level the harness chose with
   * `logging/setLevel`; every level until it chooses). `logger` names the part of the app that
   * speaks. Like `progress`: posted in order with the reports, never rejects, need not be
   * awaited. Throws at once for a tool that `answersAtOnce` or an unknown level.
   */
  log(level: LogLevel, data: unknown, logger?: string): Promise<void>;
  /**
   * Asks the harness's model for a completion: `params` are MCP's `sampling/createMessage`
   * params (`messages`, `maxTokens`, and any of `systemPrompt`, `modelPreferences`, …).
   * Resolves with the harness's `CreateMessageResult` (`role`, `content`, `model`,
   * `stopReason`). Rejects as `ask` does: `InputUnsupported` when the harness cannot sample.
   */
  sample(params: Record<string, unknown>): Promise<Record<string, unknown>>;
}

/** The levels of `call.log`, least severe first (RFC 5424, as MCP names them). */
export const LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The user's answer to `call.ask`: `content` holds the form's values with `accept`. */
export interface Answer {
  action: "accept" | "decline" | "cancel";
  content?: Record<string, unknown>;
}

/** A call as the broker sends it (`client_tool.request`, or listed by `?pending=1`). */
export interface Request {
  id: string;
  agent: string;
  session: string;
  group: string;
  tool: string;
  arguments: Record<string, unknown> | null;
  timeout_s: number | null;
  created_at: string;
  state?: string;
  claimed_by?: string | null;
}

/** The cancellation of one running call. */
export interface Running {
  abort: AbortController;
  ended: boolean;
}

/** A call as its handler sees it, with the means to report progress and ask the user on the
 * session that claimed it (methods on the prototype: nothing is made per call but the object). */
export class LiveCall implements Call {
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
    private readonly s: Link,
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
    return this.advise("progress", body);
  }

  log(level: LogLevel, data: unknown, logger?: string): Promise<void> {
    this.needClaim("log");
    if (!LOG_LEVELS.includes(level)) throw new RangeError(`level must be one of ${LOG_LEVELS.join(", ")}, not ${String(level)}`);
    const body: Record<string, unknown> = { client_id: this.s.clientId, level, data };
    if (logger !== undefined) body.logger = String(logger);
    return this.advise("log", body);
  }

  /** Queues a report or log message after the ones before it. */
  private advise(route: string, body: Record<string, unknown>): Promise<void> {
    const json = JSON.stringify(body);
    const send = () => (this.run.ended || this.signal.aborted ? undefined : this.sendAdvice(route, json));
    this.tail = (this.tail ?? Promise.resolve()).then(send);
    return this.tail;
  }

  private async sendAdvice(route: string, json: string): Promise<void> {
    try {
      const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/${route}`, json);
      if (a.status === 200) return;
      const e = refusal(a);
      if (!(e instanceof Refused && LOST_RACE.has(e.code))) console.warn(`leo-app: the broker refused ${route} of ${this.id}: ${e.message}`);
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
    return this.waitFor<Answer>("input", { client_id: this.s.clientId, message: String(message), requested_schema: requestedSchema });
  }

  async sample(params: Record<string, unknown>): Promise<Record<string, unknown>> {
    this.needClaim("sample");
    return this.waitFor<Record<string, unknown>>("sample", { client_id: this.s.clientId, params });
  }

  /** Posts a request for the harness and resolves with the answer's data (bounded by the call). */
  private async waitFor<T>(route: string, body: Record<string, unknown>): Promise<T> {
    const a = await this.s.client.post(`/api/v1/client-tools/requests/${this.id}/${route}`, JSON.stringify(body), null);
    if (a.status === 200) return data<T>(a);
    const e = refusal(a);
    if (e instanceof Refused && e.code === "input_unsupported") throw new InputUnsupported(e.brokerMessage, e.status);
    throw e;
  }
}

function checkNumber(name: string, n: number): number {
  if (typeof n !== "number" || !Number.isFinite(n) || n < 0) throw new RangeError(`${name} must be a finite number of at least 0, not ${String(n)}`);
  return n;
}
