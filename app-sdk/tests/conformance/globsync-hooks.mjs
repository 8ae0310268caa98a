// The resolve hook `globsync.mjs` registers: `fs` and `node:fs`, imported from the conformance
// CLI, resolve to `fs-glob.mjs`.
const shim = new URL("./fs-glob.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  const fromCli = context.parentURL?.includes("/@modelcontextprotocol/conformance/");
  if (fromCli && (specifier === "fs" || specifier === "node:fs")) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
