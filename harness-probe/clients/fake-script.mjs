// What the scripted model servers (fake-anthropic.mjs, fake-openai.mjs) ask for, from the
// environment, so one server serves both the list_changed probe and the feature measurement
// (features/measure.sh) instead of a copy per scenario:
//
// - HARNESS_PROBE_TOOLS: the tools to call, in order, comma-separated (default
//   `probe_new_tool,probe_image,probe_error`, the probe's). A harness's own name for a tool
//   (`mcp__leo__record`, `leo_record`, codex's namespaced `record`) counts when it is the name
//   or ends with `_` + the name.
// - HARNESS_PROBE_WATCH: more names recorded when offered but never called (default
//   `probe_echo`).
// - HARNESS_PROBE_TEXT_MAX: how much of each text block a `model_saw` record keeps (default 160).
// - HARNESS_PROBE_GRACE_MS: the wait before the first answer is this + 3 s (default 5000).
// - HARNESS_PROBE_ARGS: a JSON object of the arguments to call a tool with, by its short name
//   (default `{}` for every tool), e.g. `{"leo_app_call": {"tool": "record", "args": {}}}`.
const list = (v, d) => (v ?? d).split(',').map((s) => s.trim()).filter(Boolean);

export const toCall = list(process.env.HARNESS_PROBE_TOOLS, 'probe_new_tool,probe_image,probe_error');
const watched = [...toCall, ...list(process.env.HARNESS_PROBE_WATCH, 'probe_echo')];
export const textMax = Number(process.env.HARNESS_PROBE_TEXT_MAX ?? 160);
export const graceMs = Number(process.env.HARNESS_PROBE_GRACE_MS ?? 5000);
const argsByTool = JSON.parse(process.env.HARNESS_PROBE_ARGS ?? '{}');

/** The arguments of a call of the script's tool `short`, as an object. */
export function argsOf(short) {
  return argsByTool[short] ?? {};
}

/** The script's name for a harness's tool name, or null for a tool it does not know. */
export function shortName(name) {
  if (!name) return null;
  return watched.find((k) => name === k) ?? watched.find((k) => name.endsWith(`_${k}`)) ?? null;
}

/** The next tool to call among `offered` (harness names) that `called` (short names) lacks. */
export function nextTool(offered, called) {
  for (const k of toCall) {
    if (called.has(k)) continue;
    // The bare name first: codex offers its own view_image beside an MCP tool named image.
    const name = offered.find((n) => n === k) ?? offered.find((n) => shortName(n) === k);
    if (name) return { name, short: k };
  }
  return null;
}
