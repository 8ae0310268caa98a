// A real broker on a real PostgreSQL store that goes away for a while: it answers the app's
// result and claim `503 store_unavailable` meanwhile, and the agent still gets the app's answers.

import assert from "node:assert/strict";
import { test } from "node:test";

import { App } from "../dist/index.js";
import { Broker, Postgres, leoCall, waitUntil } from "./support.mjs";

test("a claim and a result refused store_unavailable still reach the agent", async () => {
  const db = new Postgres();
  const broker = await Broker.start(db.config);
  const warned = [];
  const warn = console.warn;
  console.warn = (...a) => { warned.push(a.join(" ")); warn(...a); };
  let release;
  const gate = new Promise((r) => (release = r));
  const app = new App({ group: "outage", home: broker.home, maxConcurrent: 2, backoffMs: [50, 500], cancelGraceMs: 200 })
    .tool({
      name: "expire", description: "Holds its slot until the broker ends the call (timeout)", timeoutS: 2,
      handler: (_args, call) => new Promise((r) => call.signal.addEventListener("abort", () => r("late"))),
    })
    .tool({ name: "hold", description: "Answers once the test lets it go", handler: async (args) => { await gate; return `held ${args.n}`; } });
  const calls = [];
  try {
    await app.start();
    const states = async () => (await broker.pending()).map((r) => r.state).sort().join();
    calls.push(leoCall(broker, "expire", {}));
    await waitUntil(async () => (await states()) === "claimed", "the first call claimed");
    const held = leoCall(broker, "hold", { n: 1 });
    calls.push(held);
    await waitUntil(async () => (await states()) === "claimed,claimed", "both slots taken");
    const waiting = leoCall(broker, "hold", { n: 2 });
    calls.push(waiting);
    await waitUntil(async () => (await broker.pending()).length === 3, "a third call waiting unclaimed");
    db.outage();
    // The result of the held call meets the outage; then the first call times out, its slot
    // frees, and the claim of the waiting one meets it too.
    release();
    await waitUntil(() => warned.some((m) => m.includes("waits for the broker's store")), "a result refused store_unavailable");
    await waitUntil(() => warned.some((m) => m.includes("claim of") && m.includes("store_unavailable")), "a claim refused store_unavailable");
    await new Promise((r) => setTimeout(r, 500));
    db.back();
    assert.equal((await held).out, "held 1");
    const w = await waiting;
    assert.equal(w.out, "held 2", w.err + broker.log());
  } finally {
    console.warn = warn;
    release();
    for (const c of calls) c.proc.kill();
    await app.stop();
    await broker.close();
    db.back();
    db.drop();
  }
});

test("an app started while the store is away serves once it is back", async () => {
  // The broker answers 503 store_unavailable meanwhile (its stream, or with pin_definitions a
  // registration: the shared table's REGISTER_AGAIN): the app keeps trying.
  const db = new Postgres();
  const broker = await Broker.start(`${db.config}client_tools:\n  pin_definitions: true\n`);
  const app = new App({ group: "outage", home: broker.home, backoffMs: [50, 200] })
    .tool({ name: "echo", description: "Echoes n", handler: async (args) => `echo ${args.n}` });
  try {
    db.outage();
    await waitUntil(async () => (await broker.request("POST", "/web/agent/rocket/message", { text: "t", from: "ops" })).status === 503,
      "the broker refusing work without its store");
    const started = app.start();
    started.catch(() => {});
    await new Promise((r) => setTimeout(r, 2000)); // several refused attempts
    assert.ok(["waiting", "connecting"].includes(app.status), app.status);
    db.back();
    await started;
    const r = await leoCall(broker, "echo", { n: 7 });
    assert.equal(r.out, "echo 7", r.err + broker.log());
  } finally {
    await app.stop();
    await broker.close();
    db.back();
    db.drop();
  }
});
