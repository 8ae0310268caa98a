// dist/ is committed (an `npm install ./sdks/typescript` links the folder and runs no build),
// so it must be what src/ compiles to: rebuild into a temporary folder and compare.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");

test("dist/ is what src/ compiles to (run `npm run build` after changing src/)", () => {
  const out = mkdtempSync(join(tmpdir(), "leo-app-dist-"));
  execFileSync(process.execPath, [join(pkg, "node_modules", "typescript", "bin", "tsc"), "-p", join(pkg, "tsconfig.json"), "--outDir", out]);
  const files = readdirSync(out).sort();
  assert.deepEqual(readdirSync(join(pkg, "dist")).sort(), files);
  for (const f of files) {
    assert.equal(readFileSync(join(pkg, "dist", f), "utf8"), readFileSync(join(out, f), "utf8"), `dist/${f} is stale`);
  }
});
