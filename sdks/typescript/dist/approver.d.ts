import { type BrokerOptions } from "./app.js";
import { Refused } from "./transport.js";
/** The event that announces a call awaiting approval. */
export declare const APPROVAL_REQUESTED = "client_tool.approval_requested";
/** `409 digest_mismatch`: the decision named a digest that is not the call's. List again. */
export declare class DigestMismatch extends Refused {
    constructor(brokerMessage: string, status: number);
}
/** `409 already_decided`: another approver decided the call first, or it ended. */
export declare class AlreadyDecided extends Refused {
    constructor(brokerMessage: string, status: number);
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
export declare class Approver {
    private readonly where;
    private readonly backoffMs;
    private client?;
    private readonly seen;
    constructor(o?: ApproverOptions);
    private http;
    /** Closes the idle connections. */
    close(): void;
    /** The calls awaiting a decision now, oldest first. */
    pending(): Promise<ApprovalRequest[]>;
    /** Each call that awaits a decision, once, as it is asked, until `signal` aborts. A refused
     * token (or a principal that is no approver) throws `FatalError`. */
    requests(signal?: AbortSignal): AsyncGenerator<ApprovalRequest>;
    private first;
    /** Lets the call go on to its app; with `args`, the app gets those instead (only where the
     * policy allows edits; the broker checks them against the tool's schema). Resolves to
     * whether the arguments were edited. */
    approve(request: ApprovalRequest, args?: unknown): Promise<boolean>;
    /** Ends the call; its agent gets the tool error `denied: <reason>`. */
    deny(request: ApprovalRequest, reason?: string): Promise<void>;
    private decide;
}
