// The TypeScript SDK against the real broker and the real leo-mcp: every reply kind, zod and
// JSON Schema tools, cancellation, the concurrency bound, reconnect and recovery.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { z } from "zod";

import { App, FatalError, Reply, ToolError, content } from "../dist/index.js";
import { Broker, McpAgent, Other, leoCall, textOf, waitUntil } from "./support.mjs";

const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "base64");

function context() {
  const ctx = { cleanups: [] };
  before(async () => { ctx.broker = await Broker.start(); });
  after(async () => {
    for (const c of ctx.cleanups.reverse()) await c();
    await ctx.broker.close();
  });
  ctx.start = async (app) => { await app.start(); ctx.cleanups.push(() => app.stop()); return app; };
  ctx.agent = async () => { const a = await McpAgent.start(ctx.broker); ctx.cleanups.push(() => a.close()); return a; };
  return ctx;
}

describe("replies", () => {
  const ctx = context();
  test("every reply kind reaches the agent", async () => {
    const app = new App({ group: "kinds", home: ctx.broker.home })
      .tool({ name: "text", description: "Text", answersAtOnce: true,
        inputSchema: { type: "object", properties: { s: { type: "string" } }, required: ["s"] },
        handler: (args) => args.s })
      .tool({ name: "as_json", description: "JSON", handler: () => ({ n: 3, list: [1, 2] }) })
      .tool({ name: "image", description: "Image", handler: async () => Reply.image(PNG, "image/png") })
      .tool({ name: "blocks", description: "Blocks", handler: () => Reply.content([
        content.text("one"), content.resourceLink("file:///tmp/a.txt", "a.txt"),
        content.resource("file:///tmp/b.txt", { text: "bee" }), content.audio(Buffer.from([0, 1]), "audio/wav"),
      ]) })
      .tool({ name: "fails", description: "Fails", answersAtOnce: true, handler: () => { throw new ToolError("not_allowed", "no way"); } })
      .tool({ name: "crashes", description: "Crashes", handler: async () => { throw new TypeError("boom"); } })
      .tool({ name: "bad_content", description: "Bad", handler: () => Reply.content([{ type: "image", data: "not base64!", mimeType: "x" }]) });
    await ctx.start(app);
    const agent = await ctx.agent();
    assert.deepEqual((await agent.call("text", { s: "hé" })).content, [{ type: "text", text: "hé" }]);
    assert.deepEqual(JSON.parse(textOf(await agent.call("as_json"))), { n: 3, list: [1, 2] });
    const img = (await agent.call("image")).content[0];
    assert.equal(img.mimeType, "image/png");
    assert.deepEqual(Buffer.from(img.data, "base64"), PNG);
    const blocks = (await agent.call("blocks")).content;
    assert.deepEqual(blocks.map((b) => b.type), ["text", "resource_link", "resource", "audio"]);
    const failed = await agent.call("fails");
    assert.equal(failed.isError, true);
    assert.match(textOf(failed), /not_allowed: no way/);
    assert.match(textOf(await agent.call("crashes")), /internal: the tool's handler threw TypeError: boom/);
    assert.match(textOf(await agent.call("bad_content")), /invalid_result/);
  });

  test("a zod schema becomes the input schema and parses the arguments", async () => {
    let seen;
    const app = new App({ group: "zod", home: ctx.broker.home }).tool({
      name: "shapes", description: "Shapes",
      inputSchema: z.object({ box: z.object({ width: z.number() }), mode: z.enum(["a", "b"]).default("a"), tags: z.array(z.string()).optional() }),
      handler: (args) => { seen = args; return "ok"; },
    });
    await ctx.start(app);
    const { status, body } = await ctx.broker.request("GET", "/api/v1/client-tools");
    assert.equal(status, 200);
    const schema = body.data.tools.find((t) => t.name === "shapes").input_schema;
    assert.equal(schema.type, "object");
    assert.deepEqual(schema.properties.mode.enum, ["a", "b"]);
    const r = await leoCall(ctx.broker, "shapes", { box: { width: 2 } });
    assert.equal(r.out, "ok", r.err);
    assert.deepEqual(seen, { box: { width: 2 }, mode: "a" });
    const bad = await leoCall(ctx.broker, "shapes", { box: { width: "x" } });
    assert.equal(bad.code, 1);
    assert.match(bad.err, /invalid_arguments/);
  });
});

describe("cancellation", () => {
  const ctx = context();
  test("an agent's cancel aborts the handler's signal and no reply is posted", async () => {
    let started, aborted;
    const s = new Promise((r) => (started = r)), a = new Promise((r) => (aborted = r));
    const app = new App({ group: "slow", home: ctx.broker.home }).tool({
      name: "wait", description: "Waits",
      handler: async (_args, call) => {
        started();
        await new Promise((r) => call.signal.addEventListener("abort", r));
        aborted();
        return "too late";
      },
    });
    await ctx.start(app);
    const agent = await ctx.agent();
    const { id, answer } = agent.startCall("wait", {});
    answer.catch(() => {}); // a cancelled request gets no answer
    await s;
    agent.cancel(id);
    await a;
    await waitUntil(async () => (await ctx.broker.pending()).length === 0, "the call ended");
  });

  test("a timeout aborts the signal", async () => {
    let aborted;
    const a = new Promise((r) => (aborted = r));
    const app = new App({ group: "slow2", home: ctx.broker.home, cancelGraceMs: 500 }).tool({
      name: "block", description: "Blocks", timeoutS: 1,
      handler: (_args, call) => new Promise((r) => call.signal.addEventListener("abort", () => { aborted(); r("late"); })),
    });
    await ctx.start(app);
    const r = await leoCall(ctx.broker, "block", {});
    assert.equal(r.code, 1);
    assert.match(r.err, /timeout/);
    await a;
  });
});

describe("concurrency", () => {
  const ctx = context();
  test("at most maxConcurrent calls run and the rest wait unclaimed", async () => {
    let running = 0, peak = 0, release;
    const gate = new Promise((r) => (release = r));
    const app = new App({ group: "busy", home: ctx.broker.home, maxConcurrent: 2 }).tool({
      name: "work", description: "Works",
      handler: async (args) => { running++; peak = Math.max(peak, running); await gate; running--; return `done ${args.n}`; },
    });
    await ctx.start(app);
    const calls = [0, 1, 2, 3].map((n) => leoCall(ctx.broker, "work", { n }));
    const states = await waitUntil(async () => {
      const p = await ctx.broker.pending();
      return p.length === 4 && p.map((r) => r.state).sort();
    }, "four pending calls");
    assert.deepEqual(states, ["claimed", "claimed", "parked", "parked"]);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(peak, 2);
    release();
    const outs = (await Promise.all(calls)).map((c) => c.out).sort();
    assert.deepEqual(outs, ["done 0", "done 1", "done 2", "done 3"]);
    assert.equal(peak, 2);
  });
});

describe("reconnect", () => {
  const ctx = context();
  test("the app serves again after a broker restart", async () => {
    const app = new App({ group: "echo", home: ctx.broker.home, backoffMs: [50, 500] }).tool({
      name: "echo", description: "Echo", answersAtOnce: true, handler: (args) => `app: ${args.text}`,
    });
    const first = await ctx.start(app).then((a) => a.clientId);
    assert.equal((await leoCall(ctx.broker, "echo", { text: "a" })).out, "app: a");
    await ctx.broker.restart();
    await app.waitFor((a) => a.status === "serving" && a.clientId !== first);
    const r = await leoCall(ctx.broker, "echo", { text: "b" });
    assert.equal(r.out, "app: b", r.err);
  });

  test("a request parked before the app subscribed is served", async () => {
    const other = await Other.connect(ctx.broker, "echo2", ["echo2"]);
    ctx.cleanups.push(() => other.close());
    const call = leoCall(ctx.broker, "echo2", { text: "early" });
    await other.nextRequest();
    const app = new App({ group: "echo2", home: ctx.broker.home }).tool({
      name: "echo2", description: "Echo", handler: (args) => `app: ${args.text}`,
    });
    await ctx.start(app);
    const r = await call;
    assert.equal(r.out, "app: early", r.err);
  });
});

describe("scope", () => {
  const ctx = context();
  test("a group for chosen agents reaches them and no other", async () => {
    const app = new App({ group: "open", home: ctx.broker.home, agents: { deploy: ["rocket", "ci-*"] } })
      .tool({ name: "deploy_now", description: "Deploys", group: "deploy", handler: () => "deployed" })
      .tool({ name: "open_tool", description: "Open to all", handler: () => "open" });
    await ctx.start(app);
    const agent = async (name) => {
      const a = new McpAgent(ctx.broker, name);
      ctx.cleanups.push(() => a.close());
      await a.rpc("initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "leo-app-node-tests", version: "1" } });
      a.send({ jsonrpc: "2.0", method: "notifications/initialized" });
      return a;
    };
    const ci = await agent("ci-7");
    assert.equal(textOf(await ci.call("deploy_now", {})), "deployed");
    const scout = await agent("scout");
    assert.equal(textOf(await scout.call("open_tool", {})), "open");
    const refused = await scout.call("deploy_now", {});
    assert.equal(refused.isError, true);
    assert.match(textOf(refused), /no_client/);
  });
});

describe("settings", () => {
  const ctx = context();
  test("bad settings fail early and a refused group ends the app", async () => {
    assert.throws(() => new App({ group: "g", url: "https://x:1" }));
    assert.throws(() => new App({ group: "g", url: "http://127.0.0.1" }));
    assert.throws(() => new App({ group: "g", token: "a", device: "b" }));
    assert.throws(() => new App({ group: "g", agents: [] }));
    assert.throws(() => new App({ group: "g" }).tool({ name: "t", description: "", handler: () => "" }));
    const app = new App({ group: "g", home: ctx.broker.home }).tool({ name: "leo_reserved", description: "Reserved", handler: () => "" });
    await assert.rejects(app.start(), (e) => e instanceof FatalError && /invalid_tool/.test(e.message));
  });
});
