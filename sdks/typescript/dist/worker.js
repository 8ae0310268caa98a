// One call, from claim to answer (as the Rust SDK's `worker`): claim it (unless the tool
// answers at once, or this client holds the claim already), run the handler, post what it
// returns.
//
// A claim the broker refuses because the call is taken or over (`LOST_RACE`) is the normal
// outcome of several instances racing, and is dropped quietly. A claim without a definite answer
// (the connection broke, a 5xx such as `503 store_unavailable` while the broker's store is away)
// may or may not have been taken: the call is forgotten, and the pending list, read again after
// a short backoff, tells (parked: offered again; claimed by this client: run without claiming).
// A reply the broker refuses (`invalid_result`, `result_too_large`) is replaced by an app error
// with its message; one it could not take (it is down, or this client's stream is gone) is
// posted again on the next session, and one it could not record (`503 store_unavailable`) again
// after a backoff, until the call ends.
import { LiveCall } from "./call.js";
import { LOST_RACE } from "./codes.js";
import { Reply, ToolError } from "./reply.js";
import { Refused, describe, refusal } from "./transport.js";
/** The refusal of a claim or result the broker could not record: its store is away a while. */
const STORE_UNAVAILABLE = "store_unavailable";
/** The closing brace of a result body, shared by every post. */
const CLOSE = Buffer.from("}");
/** Claims the call (unless `claimed`, or the tool answers at once), runs its handler, posts the
 * reply. */
export async function work(ctx, s, r, run, claimed) {
    const tool = ctx.tools.get(r.tool);
    if (!tool.atOnce && !claimed) {
        const taken = await claim(s, r.id);
        if (taken === undefined)
            ctx.claimUnsettled(r.id);
        if (!taken)
            return;
        ctx.claimTaken();
    }
    if (run.ended)
        return;
    const call = new LiveCall(r, run, s, tool.atOnce);
    const outcome = runHandler(tool, call);
    // After a cancel, the handler has the grace to return; then it is abandoned.
    const abandoned = new Promise((resolve) => {
        run.abort.signal.addEventListener("abort", () => setTimeout(() => resolve(undefined), ctx.graceMs).unref(), { once: true });
    });
    const reply = await Promise.race([outcome, abandoned]);
    if (reply !== undefined && call.tail)
        await call.flush();
    if (reply === undefined || run.ended)
        return;
    await post(ctx, s, r.id, reply, tool.atOnce, run);
}
async function runHandler(tool, call) {
    let args = call.arguments;
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
    }
    catch (e) {
        if (e instanceof ToolError)
            return Reply.error(e.code, e.message);
        const name = e instanceof Error ? e.name : typeof e;
        return Reply.error("internal", `the tool's handler threw ${name}: ${describe(e)}`);
    }
}
/** Whether the claim was taken; `undefined` without a definite answer (the connection broke, the
 * broker does not know this client yet, or its store is away: `503 store_unavailable`). */
async function claim(s, id) {
    try {
        const a = await s.client.post(`/api/v1/client-tools/requests/${id}/claim`, s.claimBody);
        if (a.status === 200)
            return true;
        const e = refusal(a);
        if (e instanceof Refused && LOST_RACE.has(e.code))
            return false;
        console.warn(`leo-app: claim of ${id} failed: ${e.message}`);
    }
    catch (e) {
        console.warn(`leo-app: claim of ${id} failed: ${describe(e)}`);
    }
    return undefined;
}
function body(s, reply, claim) {
    if (!reply.error && reply.structuredJson !== undefined) {
        const content = reply.contentJson === undefined ? "" : `,"content":${reply.contentJson}`;
        return `${claim ? s.claimOkHead : s.okHead}"structured_content":${reply.structuredJson}${content}}`;
    }
    if (!reply.error)
        return [claim ? s.claimOkPrefix : s.okPrefix, reply.contentBuffer, CLOSE];
    return JSON.stringify({ client_id: s.clientId, ok: false, ...(claim ? { claim: true } : {}), error: reply.error });
}
/** Posts the reply; one the broker refuses becomes an app error with its message. One the
 * broker could not take (it is down, or this client's stream is gone) is posted again on the
 * next session, and one it could not record (`503 store_unavailable`) again after a backoff,
 * until the call ends. */
async function post(ctx, s, id, reply, claim, run) {
    const path = `/api/v1/client-tools/requests/${id}/result`;
    const claimant = s.clientId;
    let replaced = false;
    const [first, cap] = ctx.backoffMs;
    let step = Math.max(first, 1);
    for (;;) {
        const generation = ctx.generation();
        let e;
        let away = false;
        try {
            const a = await s.client.post(path, body(s, reply, claim));
            if (a.status === 200)
                return;
            e = refusal(a);
        }
        catch (thrown) {
            e = new Error(describe(thrown));
            away = true;
        }
        if (e instanceof Refused && (e.code === "invalid_result" || e.code === "result_too_large") && !replaced) {
            reply = Reply.error(e.code, e.brokerMessage);
            replaced = true;
            continue;
        }
        if (e instanceof Refused && LOST_RACE.has(e.code))
            return;
        if (e instanceof Refused && e.code === STORE_UNAVAILABLE) {
            console.warn(`leo-app: the result of ${id} waits for the broker's store (${e.message})`);
            const going = await ctx.pause(step / 2 + Math.random() * (step / 2));
            step = Math.min(step * 2, cap);
            if (!going || run.ended)
                return;
            const now = ctx.current();
            if (now && now !== s) {
                s = now;
                claim ||= s.clientId !== claimant;
            }
            continue;
        }
        if (!away && !(e instanceof Refused && e.code === "unknown_client")) {
            console.warn(`leo-app: cannot post the result of ${id}: ${e.message}`);
            return;
        }
        console.warn(`leo-app: the result of ${id} waits for the broker (${e.message})`);
        const next = await ctx.sessionAfter(generation);
        if (!next || run.ended)
            return;
        s = next;
        // A new client (the broker refused the key) takes the claim with the result.
        claim ||= s.clientId !== claimant;
    }
}
