// A tool as the app declares it: its definition for the broker (a zod schema turned into JSON
// Schema once, at the first `serve`), its handler, and how it answers.

import type { Call } from "./call.js";
import { FatalError } from "./transport.js";

/** A JSON Schema object (the broker accepts a keyword subset; see the docs). */
export type JsonSchema = { type: "object"; [keyword: string]: unknown };

/** A zod schema (zod ≥ 3.25 with its v4 API): only what this package calls. */
export interface ZodLike<T> {
  safeParse(value: unknown): { success: true; data: T } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } };
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
  /** Every call waits for a person's approval (an `Approver`) before this app sees it:
   * registered as `approval: "required"`. */
  needsApproval?: boolean;
}

export interface ToolEntry {
  def: Record<string, unknown>;
  group: string;
  handler: Handler<any>;
  zod?: ZodLike<any>;
  outputZod?: ZodLike<unknown>;
  atOnce: boolean;
  /** The tool has an output schema: a returned object is structured content. */
  structured: boolean;
}

const ANNOTATIONS = new Set(["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]);

/** Checks a tool's options against the others' names (`known`) and builds its entry. */
export function toolEntry<A>(t: ToolOptions<A>, defaultGroup: string, known: Iterable<string>): ToolEntry {
  if (!t.description?.trim()) throw new Error(`tool ${t.name} needs a description`);
  for (const name of known) {
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
  if (t.needsApproval) def.approval = "required";
  return {
    def, group: t.group ?? defaultGroup, handler: t.handler as Handler<any>, zod, outputZod,
    atOnce: !!t.answersAtOnce, structured: t.outputSchema !== undefined,
  };
}

/** Turns the zod schemas into the definitions' JSON Schemas (once). */
export async function resolveSchemas(tools: Iterable<ToolEntry>): Promise<void> {
  for (const t of tools) {
    if (t.zod && t.def.input_schema === undefined) t.def.input_schema = await zodToJsonSchema(t.zod);
    if (t.outputZod && t.def.output_schema === undefined) t.def.output_schema = await zodToJsonSchema(t.outputZod, "output");
  }
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
