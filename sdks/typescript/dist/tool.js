// A tool as the app declares it: its definition for the broker (a zod schema turned into JSON
// Schema once, at the first `serve`), its handler, and how it answers.
import { FatalError } from "./transport.js";
const ANNOTATIONS = new Set(["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]);
/** Checks a tool's options against the others' names (`known`) and builds its entry. */
export function toolEntry(t, defaultGroup, known) {
    if (!t.description?.trim())
        throw new Error(`tool ${t.name} needs a description`);
    for (const name of known) {
        if (name.toLowerCase() === t.name.toLowerCase())
            throw new Error(`tool ${t.name} is given twice`);
    }
    const def = { name: t.name, description: t.description };
    const zod = isZod(t.inputSchema) ? t.inputSchema : undefined;
    def.input_schema = zod ? undefined : (t.inputSchema ?? { type: "object" });
    if (t.timeoutS !== undefined)
        def.timeout_s = t.timeoutS;
    if (t.label !== undefined)
        def.label = t.label;
    if (t.title !== undefined)
        def.title = t.title;
    if (t.annotations !== undefined) {
        for (const [k, v] of Object.entries(t.annotations)) {
            if (!ANNOTATIONS.has(k))
                throw new Error(`tool ${t.name}: unknown annotation ${k} (known: ${[...ANNOTATIONS].join(", ")})`);
            if (typeof v !== "boolean")
                throw new Error(`tool ${t.name}: annotation ${k} must be true or false`);
        }
        def.annotations = { ...t.annotations };
    }
    const outputZod = isZod(t.outputSchema) ? t.outputSchema : undefined;
    if (t.outputSchema !== undefined && !outputZod)
        def.output_schema = t.outputSchema;
    if (t.execution !== undefined) {
        if (t.execution !== "sync" && t.execution !== "task")
            throw new Error(`tool ${t.name}: execution must be "sync" or "task"`);
        def.execution = t.execution;
    }
    if (t.needsApproval)
        def.approval = "required";
    return {
        def, group: t.group ?? defaultGroup, handler: t.handler, zod, outputZod,
        atOnce: !!t.answersAtOnce, structured: t.outputSchema !== undefined,
    };
}
/** Turns the zod schemas into the definitions' JSON Schemas (once). */
export async function resolveSchemas(tools) {
    for (const t of tools) {
        if (t.zod && t.def.input_schema === undefined)
            t.def.input_schema = await zodToJsonSchema(t.zod);
        if (t.outputZod && t.def.output_schema === undefined)
            t.def.output_schema = await zodToJsonSchema(t.outputZod, "output");
    }
}
function isZod(s) {
    return typeof s === "object" && s !== null && typeof s.safeParse === "function";
}
/** Replaces local `$ref`s with their definitions and drops `$defs`, for the broker's subset. */
export function inlineRefs(schema) {
    const defs = { ...schema.definitions, ...schema.$defs };
    const walk = (node, seen) => {
        if (Array.isArray(node))
            return node.map((n) => walk(n, seen));
        if (typeof node !== "object" || node === null)
            return node;
        const out = {};
        const ref = node.$ref;
        if (typeof ref === "string") {
            const name = ref.split("/").pop();
            if (seen.includes(name))
                throw new Error(`recursive schema ${name} cannot be inlined`);
            if (!(name in defs))
                throw new Error(`unresolvable $ref ${ref}`);
            Object.assign(out, walk(defs[name], [...seen, name]));
        }
        for (const [k, v] of Object.entries(node)) {
            if (k === "$ref" || k === "$defs" || k === "definitions" || k === "discriminator")
                continue;
            if (k === "properties")
                out[k] = Object.fromEntries(Object.entries(v).map(([p, s]) => [p, walk(s, seen)]));
            else if (k === "const" || k === "default" || k === "enum" || k === "examples")
                out[k] = v;
            else
                out[k] = walk(v, seen);
        }
        return out;
    };
    return walk(schema, []);
}
async function zodToJsonSchema(schema, io = "input") {
    let z;
    try {
        z = await import("zod");
    }
    catch {
        throw new FatalError("a zod schema was given but zod cannot be imported (npm install zod)");
    }
    if (typeof z.toJSONSchema !== "function") {
        throw new FatalError("zod ≥ 3.25 (with toJSONSchema) is needed for zod schemas");
    }
    const json = inlineRefs(z.toJSONSchema(schema, { io, unrepresentable: "any" }));
    delete json.$schema;
    return json;
}
