// Prompts, resources and resource templates an app offers besides tools (as the Rust SDK's
// `offers`). A read (`prompts/get`, `resources/read`, `completion/complete`) is not a call: the
// broker asks one app (`client_offer.request` names its `client_id`), the handler returns
// MCP's result object, and the app posts it to `…/client-offers/requests/{id}/answer`. No
// claim, no slot of `maxConcurrent`, no history.
/** Thrown by a read's handler: the agent gets `code: message`. */
export class ReadError extends Error {
    code;
    constructor(code, message) {
        super(`${code}: ${message}`);
        this.code = code;
    }
}
/** The URIs of a level-1 template: each `{var}` one or more characters but `/`. */
export function templatePattern(template) {
    const parts = template.split(/\{[A-Za-z0-9_]+\}/).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    return new RegExp(`^${parts.join("[^/]+")}$`);
}
function matches(o, uri) {
    if (o.kind === "resources")
        return o.def.uri === uri;
    return o.kind === "resource_templates" && templatePattern(String(o.def.uri_template)).test(uri);
}
const noCompletion = () => ({ completion: { values: [], hasMore: false } });
/** The handler `o` has for `read`, if `read` asks for it. */
function handlerOf(o, read) {
    const p = read.params;
    if (read.kind === "prompt")
        return o.kind === "prompts" && p.name === o.def.name ? o.read : undefined;
    if (read.kind === "resource")
        return matches(o, String(p.uri ?? "")) ? o.read : undefined;
    const ref = (p.ref ?? {});
    if (o.kind === "prompts")
        return ref.name === o.def.name ? (o.complete ?? noCompletion) : undefined;
    const uri = String(ref.uri ?? "");
    return uri === o.def.uri_template || matches(o, uri) ? (o.complete ?? noCompletion) : undefined;
}
/** A group's `prompts`, `resources` and `resource_templates` for its registration. */
export function definitions(offers, group) {
    const out = {};
    for (const o of offers)
        if (o.group === group)
            (out[o.kind] ??= []).push(o.def);
    return out;
}
/** Runs the handler of one `client_offer.request` and posts its answer. */
export async function answerRead(offers, request, client, clientId) {
    const read = {
        kind: request.kind,
        agent: String(request.agent),
        params: (request.params ?? {}),
    };
    const handler = offers.filter((o) => o.group === request.group).map((o) => handlerOf(o, read)).find((h) => h);
    let body;
    try {
        if (!handler)
            throw new ReadError("not_found", "this app does not offer it");
        body = { client_id: clientId, result: await handler(read) };
    }
    catch (e) {
        const error = e instanceof ReadError ? { code: e.code, message: e.message.slice(e.code.length + 2) } : { code: "internal", message: String(e) };
        body = { client_id: clientId, error };
    }
    try {
        await client.post(`/api/v1/client-offers/requests/${String(request.id)}/answer`, JSON.stringify(body));
    }
    catch {
        // The broker went away: the read ends for the agent anyway.
    }
}
