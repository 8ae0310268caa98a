// An approver: a program (a phone app, a chat bot, a script) where a person decides the calls
// that need approval (docs/approvals.md), as the Python and Rust SDKs' `Approver`.
//
// It holds the broker's plain event stream with a token the broker counts as an approver (the
// operator's, or a device or API client named in `approvals.approvers`) and yields each call
// that awaits a decision, whether it was asked before the stream opened (`GET
// /api/v1/approvals`, read once the stream is open so that nothing falls between) or after
// (`client_tool.approval_requested`). A dropped stream is opened again after a jittered,
// doubling delay and the list read again; a call is yielded once.
//
// A decision names the call's id and digest, so it holds for that exact call: a digest that no
// longer matches is `DigestMismatch` (`409 digest_mismatch`); a call someone else decided
// first, or that ended, is `AlreadyDecided` (`409 already_decided`).

import type http from "node:http";

import { type BrokerOptions, type Where, where } from "./app.js";
import { FATAL } from "./codes.js";
import { Client, FatalError, Refused, SseParser, data } from "./transport.js";

/** The event that announces a call awaiting approval. */
export const APPROVAL_REQUESTED = "client_tool.approval_requested";
/** How many ids are remembered, so that a call listed again is not yielded twice. */
const SEEN = 4096;

/** `409 digest_mismatch`: the decision named a digest that is not the call's. List again. */
export class DigestMismatch extends Refused {
  constructor(brokerMessage: string, status: number) {
    super("digest_mismatch", brokerMessage, status);
    this.name = "DigestMismatch";
  }
}

/** `409 already_decided`: another approver decided the call first, or it ended. */
export class AlreadyDecided extends Refused {
  constructor(brokerMessage: string, status: number) {
    super("already_decided", brokerMessage, status);
    this.name = "AlreadyDecided";
  }
}

/** A call awaiting a decision, as the broker shows it to approvers (`AwaitingApproval`). */
export interface ApprovalRequest {
  id: string;
  agent: string;
  session: string;
  group: string;
  tool: string;
  /** The agent's arguments. Show them as text: an agent chose them. */
  arguments: unknown;
  /** What a decision must name to hold for this very call. */
  digest: string;
  /** Whether `approve(request, arguments)` may change the arguments. */
  editable: boolean;
  /** `"tool"` (the app requires it) or `"config"` (a rule of the operator's). */
  required_by: "tool" | "config";
  /** When the agent called (RFC 3339). */
  requested_at: string;
  /** When the call ends `approval_timeout` unless decided (RFC 3339). */
  expires_at: string;
}

export interface ApproverOptions extends BrokerOptions {
  /** The reconnect delay: first, doubling to cap (default 100 ms to 5 s), jittered. */
  backoffMs?: [number, number];
}

/** Receives the calls that need approval and decides them:
 *
 * ```ts
 * const approver = new Approver({ url, token });
 * for await (const request of approver.requests()) {
 *   if (request.tool === "deploy") await approver.approve(request);
 *   else await approver.deny(request, "not this one");
 * }
 * ```
 */
export class Approver {
  private readonly where: Where;
  private readonly backoffMs: [number, number];
  private client?: Client;
  private readonly seen = new Set<string>();

  constructor(o: ApproverOptions = {}) {
    this.where = where(o);
    this.backoffMs = o.backoffMs ?? [100, 5000];
  }

  private http(): Client {
    this.client ??= new Client(this.where.endpoint, this.where.readToken());
    return this.client;
  }

  /** Closes the idle connections. */
  close(): void {
    this.client?.close();
    this.client = undefined;
  }

  /** The calls awaiting a decision now, oldest first. */
  async pending(): Promise<ApprovalRequest[]> {
    return data<{ approvals: ApprovalRequest[] }>(await this.http().get("/api/v1/approvals")).approvals;
  }

  /** Each call that awaits a decision, once, as it is asked, until `signal` aborts. A refused
   * token (or a principal that is no approver) throws `FatalError`. */
  async *requests(signal?: AbortSignal): AsyncGenerator<ApprovalRequest> {
    let delay = this.backoffMs[0];
    while (!signal?.aborted) {
      let stream: http.IncomingMessage | undefined;
      try {
        stream = await this.http().openStream("/api/v1/events", undefined, signal);
        for (const request of await this.pending()) {
          if (this.first(request.id)) yield request;
        }
        delay = this.backoffMs[0];
        const parser = new SseParser();
        stream.setEncoding("utf8");
        for await (const chunk of stream) {
          for (const frame of parser.push(chunk as string)) {
            if (frame.event !== APPROVAL_REQUESTED) continue;
            const request = JSON.parse(frame.data) as ApprovalRequest;
            if (this.first(request.id)) yield request;
          }
        }
      } catch (e) {
        if (e instanceof Refused && FATAL.has(e.code)) throw new FatalError(`the broker refused this approver: ${e.message}`);
        if (signal?.aborted) return;
      } finally {
        stream?.destroy();
      }
      // The stream ended or failed: a new connection after a jittered, doubling delay.
      this.close();
      await new Promise((r) => setTimeout(r, delay * (0.5 + Math.random() / 2)));
      delay = Math.min(delay * 2, this.backoffMs[1]);
    }
  }

  private first(id: string): boolean {
    if (this.seen.has(id)) return false;
    this.seen.add(id);
    if (this.seen.size > SEEN) this.seen.delete(this.seen.values().next().value as string);
    return true;
  }

  /** Lets the call go on to its app; with `args`, the app gets those instead (only where the
   * policy allows edits; the broker checks them against the tool's schema). Resolves to
   * whether the arguments were edited. */
  async approve(request: ApprovalRequest, args?: unknown): Promise<boolean> {
    const body: Record<string, unknown> = { digest: request.digest };
    if (args !== undefined) body.arguments = args;
    const decided = await this.decide(request.id, "approve", body);
    return decided.edited === true;
  }

  /** Ends the call; its agent gets the tool error `denied: <reason>`. */
  async deny(request: ApprovalRequest, reason?: string): Promise<void> {
    const body: Record<string, unknown> = { digest: request.digest };
    if (reason !== undefined) body.reason = reason;
    await this.decide(request.id, "deny", body);
  }

  private async decide(id: string, what: string, body: Record<string, unknown>): Promise<{ edited?: boolean }> {
    const path = `/api/v1/approvals/${encodeURIComponent(id)}/${what}`;
    try {
      return data(await this.http().post(path, JSON.stringify(body)));
    } catch (e) {
      if (e instanceof Refused && e.code === "digest_mismatch") throw new DigestMismatch(e.brokerMessage, e.status);
      if (e instanceof Refused && e.code === "already_decided") throw new AlreadyDecided(e.brokerMessage, e.status);
      throw e;
    }
  }
}
