// The SDK reads refusals by the table every SDK shares: testdata/sdk/codes.json is the
// protocol's table (its tests check it), and this SDK's copy must be the same.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { FATAL, LOST_RACE, REGISTER_AGAIN, RESUME_REFUSED } from "../dist/codes.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

test("the SDK reads refusals by the shared table", () => {
  const table = JSON.parse(readFileSync(join(root, "testdata", "sdk", "codes.json"), "utf8"));
  assert.deepEqual([...FATAL].sort(), table.fatal);
  assert.deepEqual([...LOST_RACE].sort(), table.lost_race);
  assert.deepEqual([...REGISTER_AGAIN].sort(), table.register_again);
  assert.equal(RESUME_REFUSED, table.resume_refused);
});
