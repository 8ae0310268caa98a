// The conformance CLI imports `globSync` from `fs`, which Node has from version 22 on. On older
// Node this module, loaded with `--import` before the CLI, resolves the CLI's `fs` to
// `fs-glob.mjs`: Node's `fs` plus the `glob` package's `globSync` (the same call shape for what
// the CLI asks of it: a pattern and `{ cwd }`). A builtin's ES module exports are fixed, so a
// resolve hook is the way to add one; nothing under node_modules is changed.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  register("./globsync-hooks.mjs", import.meta.url);
}
