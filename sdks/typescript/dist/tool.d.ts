import type { Call } from "./call.js";
/** A JSON Schema object (the broker accepts a keyword subset; see the docs). */
export type JsonSchema = {
    type: "object";
    [keyword: string]: unknown;
};
/** A zod schema (zod ≥ 3.25 with its v4 API): only what this package calls. */
export interface ZodLike<T> {
    safeParse(value: unknown): {
        success: true;
        data: T;
    } | {
        success: false;
        error: {
            issues: {
                path: PropertyKey[];
                message: string;
            }[];
        };
    };
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
/** Checks a tool's options against the others' names (`known`) and builds its entry. */
export declare function toolEntry<A>(t: ToolOptions<A>, defaultGroup: string, known: Iterable<string>): ToolEntry;
/** Turns the zod schemas into the definitions' JSON Schemas (once). */
export declare function resolveSchemas(tools: Iterable<ToolEntry>): Promise<void>;
/** Replaces local `$ref`s with their definitions and drops `$defs`, for the broker's subset. */
export declare function inlineRefs(schema: Record<string, unknown>): Record<string, unknown>;
