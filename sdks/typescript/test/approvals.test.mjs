// The TypeScript SDK as an approver, against the real broker and the real leo-mcp: a paired
// device's `Approver` receives the calls that need approval (asked before it connected, and
// after), approves one as asked, one with edited arguments and denies one with a reason; the
// agent gets each outcome; a stale digest and a second decision are typed errors.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { AlreadyDecided, App, Approver, DigestMismatch } from "../dist/index.js";
import { Broker, LEO, McpAgent, NATIVE, WAIT, textOf } from "./support.mjs";

const CONFIG = "approvals:\n  allow_edits: true\n  approvers:\n    devices: [phone]\n";
const ctx = { cleanups: [] };

before(async () => {
  const b = new Broker();
  b.home = mkdtempSync(join(tmpdir(), "leo-ts-"));
  writeFileSync(join(b.home, "config.yaml"), CONFIG);
  // The phone is paired before the broker starts, as an operator sets it up once.
  const paired = spawnSync(LEO, ["device", "pair", "phone"], { env: { ...process.env, LEO_HOME: b.home }, encoding: "utf8" });
  assert.equal(paired.status, 0, paired.stderr);
  await b.spawn();
  ctx.broker = b;
});
after(async () => {
  for (const c of ctx.cleanups.reverse()) await c();
  await ctx.broker.close();
});

/** The next request `requests` yields, within the suite's bound. */
async function next(requests) {
  let timer;
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error("no approval request")), WAIT); });
  try {
    const { value, done } = await Promise.race([requests.next(), late]);
    assert.equal(done, false);
    return value;
  } finally {
    clearTimeout(timer);
  }
}

test("an approver app approves, edits and denies, and gets typed refusals", async () => {
  const app = new App({ group: "ops", home: ctx.broker.home }).tool({
    name: "deploy", description: "Deploys", needsApproval: true,
    inputSchema: { type: "object", properties: { env: { type: "string" } }, required: ["env"] },
    handler: (args) => `deployed ${args.env}`,
  });
  await app.start();
  ctx.cleanups.push(() => app.stop());
  const agent = await McpAgent.start(ctx.broker, { agent: "ci-7", client: NATIVE });
  ctx.cleanups.push(() => agent.close());

  // Asked before the approver connects: it is listed to it all the same.
  const first = agent.startNative("deploy", { env: "prod" });
  const approver = new Approver({ home: ctx.broker.home, device: "phone" });
  const stop = new AbortController();
  const requests = approver.requests(stop.signal);
  ctx.cleanups.push(async () => { stop.abort(); await requests.return(undefined); approver.close(); });

  let asked = await next(requests);
  assert.deepEqual([asked.agent, asked.tool, asked.arguments], ["ci-7", "deploy", { env: "prod" }]);
  assert.deepEqual([asked.required_by, asked.editable], ["tool", true]);
  assert.match(asked.digest, /^sha256:/);
  assert.equal(await approver.approve(asked), false);
  assert.equal(textOf(await first.answer), "deployed prod");
  await assert.rejects(approver.deny(asked, "too late"), (e) => e instanceof AlreadyDecided && e.status === 409);

  // Asked while the approver listens: approved with other arguments.
  const second = agent.startNative("deploy", { env: "prod" });
  asked = await next(requests);
  await assert.rejects(approver.approve({ ...asked, digest: `sha256:${"0".repeat(64)}` }),
    (e) => e instanceof DigestMismatch && e.code === "digest_mismatch");
  assert.equal(await approver.approve(asked, { env: "staging" }), true);
  const edited = textOf(await second.answer);
  assert.match(edited, /changed the arguments/);
  assert.match(edited, /deployed staging/);

  // Denied with a reason: the agent gets it as the tool's error.
  const third = agent.startNative("deploy", { env: "prod" });
  asked = await next(requests);
  await approver.deny(asked, "not on a Friday");
  const denied = await third.answer;
  assert.equal(denied.isError, true);
  assert.equal(textOf(denied), "denied: not on a Friday");
  assert.deepEqual(await approver.pending(), []);
});
