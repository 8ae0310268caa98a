// Prompts, resources and resource templates an app offers besides tools (as the Rust SDK's
// `offers`). A read (`prompts/get`, `resources/read`, `completion/complete`) is not a call: the
// broker asks one app (`client_offer.request` names its `client_id`), the handler returns
// MCP's result object, and the app posts it to `…/client-offers/requests/{id}/answer`. No
// claim, no slot of `maxConcurrent`, no history.

import type { Client } from "./transport.js";

/** What a read asks: its kind, the agent, and MCP's params of the method. */
export interface Read {
  kind: "prompt" | "resource" | "complete";
  agent: string;
  params: Record<string, unknown>;
}

/** Answers a read with MCP's result object (`{messages}`, `{contents}`, `{completion}`). */
export type ReadHandler = (read: Read) => Record<string, unknown> | Promise<Record<string, unknown>>;

/** Thrown by a read's handler: the agent gets `code: message`. */
export class ReadError extends Error {
  constructor(readonly code: string, message: string) {
    super(`${code}: ${message}`);
  }
}

/** One prompt, resource or template as registered, with its handlers. */
export interface Offer {
  group: string;
  kind: "prompts" | "resources" | "resource_templates";
  def: Record<string, unknown>;
  read: ReadHandler;
  complete?: ReadHandler;
}

/** The URIs of a level-1 template: each `{var}` one or more characters but `/`. */
export function templatePattern(template: string): RegExp {
  const parts = template.split(/\{[A-Za-z0-9_]+\}/).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(`^${parts.join("[^/]+")}$`);
}

function matches(o: Offer, uri: string): boolean {
  if (o.kind === "resources") return o.def.uri === uri;
  return o.kind === "resource_templates" && templatePattern(String(o.def.uri_template)).test(uri);
}

const noCompletion: ReadHandler = () => ({ completion: { values: [], hasMore: false } });

/** The handler `o` has for `read`, if `read` asks for it. */
function handlerOf(o: Offer, read: Read): ReadHandler | undefined {
  const p = read.params;
  if (read.kind === "prompt") return o.kind === "prompts" && p.name === o.def.name ? o.read : undefined;
  if (read.kind === "resource") return matches(o, String(p.uri ?? "")) ? o.read : undefined;
  const ref = (p.ref ?? {}) as Record<string, unknown>;
  if (o.kind === "prompts") return ref.name === o.def.name ? (o.complete ?? noCompletion) : undefined;
  const uri = String(ref.uri ?? "");
  return uri === o.def.uri_template || matches(o, uri) ? (o.complete ?? noCompletion) : undefined;
}

/** A group's `prompts`, `resources` and `resource_templates` for its registration. */
export function definitions(offers: Offer[], group: string): Record<string, Record<string, unknown>[]> {
  const out: Record<string, Record<string, unknown>[]> = {};
  for (const o of offers) if (o.group === group) (out[o.kind] ??= []).push(o.def);
  return out;
}

/** Runs the handler of one `client_offer.request` and posts its answer. */
export async function answerRead(offers: Offer[], request: Record<string, unknown>, client: Client, clientId: string): Promise<void> {
  const read: Read = {
    kind: request.kind as Read["kind"],
    agent: String(request.agent),
    params: (request.params ?? {}) as Record<string, unknown>,
  };
  const handler = offers.filter((o) => o.group === request.group).map((o) => handlerOf(o, read)).find((h) => h);
  let body: Record<string, unknown>;
  try {
    if (!handler) throw new ReadError("not_found", "this app does not offer it");
    body = { client_id: clientId, result: await handler(read) };
  } catch (e) {
    const error = e instanceof ReadError ? { code: e.code, message: e.message.slice(e.code.length + 2) } : { code: "internal", message: String(e) };
    body = { client_id: clientId, error };
  }
  try {
    await client.post(`/api/v1/client-offers/requests/${String(request.id)}/answer`, JSON.stringify(body));
  } catch {
    // The broker went away: the read ends for the agent anyway.
  }
}
