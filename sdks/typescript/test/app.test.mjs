// The TypeScript SDK against the real broker and the real leo-mcp: every reply kind, zod and
// JSON Schema tools, cancellation, the concurrency bound, reconnect and recovery, and the MCP
// features (title, annotations, output schemas and structured replies, progress, questions).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { z } from "zod";

import { App, FatalError, InputUnsupported, ReadError, Refused, Reply, ToolError, content } from "../dist/index.js";
import { Broker, McpAgent, NATIVE, Other, Pipe, leoCall, textOf, waitUntil } from "./support.mjs";

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
        await call.progress(1, undefined, "late"); // quiet for an ended call: never rejects
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
    const states = async () => (await ctx.broker.pending()).map((r) => r.state).sort().join();
    // Four calls listed may come before the second claim: wait for the two claims.
    await waitUntil(async () => (await states()) === "claimed,claimed,parked,parked", "two calls claimed and two waiting");
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await states(), "claimed,claimed,parked,parked");
    assert.equal(peak, 2);
    release();
    const outs = (await Promise.all(calls)).map((c) => c.out).sort();
    assert.deepEqual(outs, ["done 0", "done 1", "done 2", "done 3"]);
    assert.equal(peak, 2);
  });
});

describe("https", () => {
  test("an app over https answers a call; without the CA it is told why", async () => {
    const broker = await Broker.startTls();
    try {
      const port = broker.addr.split(":").pop();
      const app = new App({ group: "secure", url: `https://localhost:${port}`, caFile: broker.caFile, token: broker.operatorToken })
        .tool({ name: "secure_echo", description: "Echo over TLS", answersAtOnce: true, handler: (args) => `tls: ${args.text}` });
      await app.start();
      try {
        const r = await leoCall(broker, "secure_echo", { text: "a" });
        assert.equal(r.out, "tls: a", r.err);
      } finally {
        await app.stop();
      }
      // Without the CA the handshake fails, and says which variable to set.
      const { Client, endpointFromUrl } = await import("../dist/transport.js");
      const client = new Client(endpointFromUrl(`https://localhost:${port}`), "t");
      await assert.rejects(client.get("/api/v1/status"), /not signed by a CA this client trusts.*LEO_CA_FILE/);
    } finally {
      await broker.close();
    }
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
    await waitUntil(async () => (await ctx.broker.tools()).join() === "echo", "the app registered again");
    await app.waitFor((a) => a.status === "serving");
    assert.equal(app.clientId, first, "the stream resumed with its key");
    const r = await leoCall(ctx.broker, "echo", { text: "b" });
    assert.equal(r.out, "app: b", r.err);
  });

  test("the app says once on stderr which tools it serves and where", async () => {
    const said = [];
    const write = console.error;
    console.error = (...args) => said.push(args.join(" "));
    try {
      const app = new App({ group: "text", name: "scribe", home: ctx.broker.home, backoffMs: [50, 500] })
        .tool({ name: "shout", description: "Shout", handler: (args) => String(args.text).toUpperCase() })
        .tool({ name: "count", group: "count", description: "Count", handler: (args) => String(args.text).length });
      await ctx.start(app);
      await ctx.broker.restart();
      await waitUntil(async () => (await ctx.broker.tools()).includes("shout"), "the app registered again");
      await app.waitFor((a) => a.status === "serving");
    } finally {
      console.error = write;
    }
    const socket = `${ctx.broker.home}/run/leo.sock`;
    assert.deepEqual(said.filter((l) => l.startsWith("leo-app:")), [
      `leo-app: app "scribe" serving shout (group text); count (group count) on unix:${socket}`,
    ]);
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

function deferred() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

/** A tool whose calls wait until the test lets each go, and the warnings the app writes. */
function held(options) {
  const started = new Map(), release = new Map(), warned = [];
  for (const n of [1, 2]) {
    started.set(n, deferred());
    release.set(n, deferred());
  }
  const app = new App({ group: "hold", backoffMs: [50, 500], ...options }).tool({
    name: "hold", description: "Holds the call until the test lets it go",
    inputSchema: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] },
    handler: async ({ n }) => { started.get(n).resolve(); await release.get(n).promise; return `held ${n}`; },
  });
  const warn = console.warn;
  console.warn = (...args) => { warned.push(args.join(" ")); warn(...args); };
  const restore = () => { console.warn = warn; for (const r of release.values()) r.resolve(); };
  const waiting = () => warned.some((w) => w.includes("waits for the broker"));
  return { app, started, release, warned, restore, waiting };
}

describe("resume", () => {
  const ctx = context();
  test("claims survive a broker kill and the agent gets both results", async () => {
    const h = held({ home: ctx.broker.home });
    ctx.cleanups.push(h.restore);
    const first = (await ctx.start(h.app)).clientId;
    const agent = await ctx.agent();
    const before = agent.startCall("hold", { n: 1 }), after = agent.startCall("hold", { n: 2 });
    await h.started.get(1).promise;
    await h.started.get(2).promise;
    await waitUntil(async () => (await ctx.broker.pending()).map((r) => r.claimed_by).join() === [first, first].join(), "both calls claimed by the app");
    await ctx.broker.kill();
    // The first reply is posted while the broker is down: it waits for the next session.
    h.release.get(1).resolve();
    await waitUntil(h.waiting, "the reply to wait for the broker");
    await ctx.broker.spawn();
    await waitUntil(async () => (await ctx.broker.tools()).join() === "hold", "the app registered again");
    await h.app.waitFor((a) => a.status === "serving");
    assert.equal(h.app.clientId, first, "the app resumed as the same client");
    const second = (await ctx.broker.pending()).filter((r) => r.arguments.n === 2);
    assert.deepEqual(second.map((r) => r.claimed_by), [first], "its claim kept");
    // The second call is answered after the restart, by the same client.
    h.release.get(2).resolve();
    assert.equal(textOf(await before.answer), "held 1");
    assert.equal(textOf(await after.answer), "held 2");
    await waitUntil(async () => (await ctx.broker.pending()).length === 0, "no call left");
  });
});

describe("a claim whose answer was lost", () => {
  const ctx = context();
  test("a call claimed without hearing so is run after a broker kill", async () => {
    const h = held({ home: ctx.broker.home, maxConcurrent: 1 });
    ctx.cleanups.push(h.restore);
    const clientId = (await ctx.start(h.app)).clientId;
    const agent = await ctx.agent();
    const first = agent.startCall("hold", { n: 1 });
    await h.started.get(1).promise;
    // The second call waits in the app for the only slot. Its claim is taken as the app's own
    // whose answer the kill lost: the broker holds it for this client, the app never heard.
    const second = agent.startCall("hold", { n: 2 });
    const id = await waitUntil(async () => (await ctx.broker.pending()).find((r) => r.arguments.n === 2)?.id, "the second call");
    const claimed = await ctx.broker.request("POST", `/api/v1/client-tools/requests/${id}/claim`, { client_id: clientId });
    assert.equal(claimed.status, 200, JSON.stringify(claimed.body));
    await ctx.broker.restart();
    await waitUntil(async () => (await ctx.broker.tools()).join() === "hold", "the app registered again");
    h.release.get(1).resolve();
    h.release.get(2).resolve();
    assert.equal(textOf(await first.answer), "held 1");
    assert.equal(textOf(await second.answer), "held 2");
    await waitUntil(async () => (await ctx.broker.pending()).length === 0, "no call left");
  });
});

describe("resume refused", () => {
  const ctx = { cleanups: [] };
  before(async () => { ctx.broker = await Broker.start("client_tools:\n  resume_grace_s: 1\n"); });
  after(async () => {
    for (const c of ctx.cleanups.reverse()) await c();
    await ctx.broker.close();
  });
  test("a refused key connects a new client that still answers", async () => {
    const other = await Other.connect(ctx.broker, "hold", ["hold"]); // keeps the tool alive while the app is away
    ctx.cleanups.push(() => other.close());
    const pipe = await Pipe.open(ctx.broker);
    ctx.cleanups.push(() => pipe.close());
    const h = held({ home: ctx.broker.home, socket: pipe.path });
    ctx.cleanups.push(h.restore);
    await h.app.start();
    ctx.cleanups.push(() => h.app.stop());
    const first = h.app.clientId;
    const agent = await McpAgent.start(ctx.broker);
    ctx.cleanups.push(() => agent.close());
    const call = agent.startCall("hold", { n: 1 });
    await h.started.get(1).promise;
    pipe.cut();
    // Past the grace the claim is given up: the call is parked and offered again.
    await waitUntil(async () => (await ctx.broker.pending()).map((r) => r.state).join() === "parked", "the claim given up");
    h.release.get(1).resolve();
    await waitUntil(h.waiting, "the reply to wait for the broker");
    pipe.mend();
    await h.app.waitFor((a) => a.status === "serving" && a.clientId !== first);
    assert.equal(textOf(await call.answer), "held 1");
    assert.ok(h.warned.some((w) => w.includes("refused the resume key")), h.warned.join("\n"));
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

const RECORD = { type: "object", properties: { build: { type: "integer" }, url: { type: "string" } }, required: ["build", "url"] };
const CONFIRM_FORM = {
  type: "object",
  properties: { confirm: { type: "boolean", title: "Go ahead?" }, env: { type: "string", enum: ["prod", "staging"] } },
  required: ["confirm"],
};

describe("mcp features", () => {
  // One broker for the three tests, so each has a group of its own: the first app to claim a
  // call of an agent's group owns that group for the agent.
  const ctx = context();
  const native = async (elicit, sample) => {
    const a = await McpAgent.start(ctx.broker, { client: NATIVE, elicit, sample });
    ctx.cleanups.push(() => a.close());
    return a;
  };

  test("title, annotations and output schemas are listed natively; structured replies valid and invalid", async () => {
    const app = new App({ group: "mcp1", home: ctx.broker.home })
      .tool({ name: "record", description: "Return the build record", title: "Build record",
        annotations: { readOnlyHint: true, openWorldHint: false }, outputSchema: RECORD,
        inputSchema: { type: "object", properties: { build: { type: "integer" } }, required: ["build"] },
        handler: ({ build }) => ({ build, url: `https://ci.example/${build}` }) })
      .tool({ name: "tally", description: "Count words (zod output schema)", answersAtOnce: true,
        outputSchema: z.object({ words: z.number().int() }), handler: () => ({ words: 3 }) })
      .tool({ name: "wipe", description: "Wipe the cache", annotations: { destructiveHint: true }, execution: "task", timeoutS: 60,
        handler: () => Reply.structured({ n: 1 }, [content.text("one")]) })
      .tool({ name: "broken", description: "A record that does not match", outputSchema: RECORD, handler: () => ({ build: "seven", url: "u" }) })
      .tool({ name: "text_only", description: "Text where a record is due", outputSchema: RECORD, handler: () => "no record" });
    assert.throws(() => app.tool({ name: "bad", description: "x", annotations: { readOnly: true }, handler: () => "" }), /unknown annotation/);
    assert.throws(() => app.tool({ name: "bad", description: "x", execution: "later", handler: () => "" }), /execution/);
    await ctx.start(app);
    const agent = await native();
    const tools = Object.fromEntries((await agent.rpc("tools/list", {})).tools.map((t) => [t.name, t]));
    assert.equal(tools.record.title, "Build record");
    assert.deepEqual(tools.record.annotations, { readOnlyHint: true, openWorldHint: false });
    assert.deepEqual(tools.record.outputSchema, RECORD);
    assert.equal(tools.tally.outputSchema.properties.words.type, "integer");
    assert.deepEqual(tools.wipe.annotations, { destructiveHint: true });
    assert.equal(tools.wipe.outputSchema, undefined);
    const { body } = await ctx.broker.request("GET", "/api/v1/client-tools");
    assert.equal(body.data.tools.find((t) => t.name === "wipe").execution, "task");

    const got = await agent.native("record", { build: 7 });
    assert.deepEqual(got.structuredContent, { build: 7, url: "https://ci.example/7" });
    assert.deepEqual(JSON.parse(textOf(got)), got.structuredContent);
    assert.deepEqual((await agent.native("tally")).structuredContent, { words: 3 });
    const wiped = await agent.native("wipe");
    assert.deepEqual([wiped.structuredContent, wiped.content], [{ n: 1 }, [{ type: "text", text: "one" }]]);
    const broken = await agent.native("broken");
    assert.equal(broken.isError, true);
    assert.match(textOf(broken), /invalid_result: at \$\.structured_content\.build/);
    assert.match(textOf(await agent.native("text_only")), /invalid_result: at \$\.structured_content: required/);
    assert.equal(Reply.structured([1, 2]).isError, true);
  });

  test("progress with messages reaches the harness; a tool that answers at once cannot report", async () => {
    let release;
    const go = new Promise((r) => (release = r));
    let atOnceError;
    const app = new App({ group: "mcp2", home: ctx.broker.home })
      .tool({ name: "deploy", description: "Deploys, reporting progress", handler: async (_args, call) => {
        call.progress(1, 3, "building");
        await call.progress(2, 3, "uploading");
        await go;
        call.progress(3, 3, "done");
        return "deployed";
      } })
      .tool({ name: "quick", description: "Answers at once", answersAtOnce: true, handler: (_args, call) => {
        try { call.progress(1); } catch (e) { atOnceError = e.message; }
        return "quick";
      } });
    await ctx.start(app);
    const agent = await native();
    const { answer } = agent.startNative("deploy", {}, "d");
    const reports = await agent.reports("d", 2);
    assert.deepEqual(reports.slice(0, 2).map((r) => [r.progress, r.total, r.message]), [[1, 3, "building"], [2, 3, "uploading"]]);
    release();
    assert.equal(textOf(await answer), "deployed");
    assert.ok((await agent.reports("d", 3)).some((r) => r.message === "done"));
    assert.equal(textOf(await agent.native("quick")), "quick");
    assert.match(atOnceError, /answers at once/);
  });

  test("questions are answered, declined, or unsupported", async () => {
    const app = new App({ group: "mcp3", home: ctx.broker.home })
      .tool({ name: "confirm", description: "Asks twice", handler: async (_args, call) => {
        try {
          const yes = await call.ask("Deploy build 7 to production?", CONFIRM_FORM);
          const no = await call.ask("Also wipe the cache?", CONFIRM_FORM);
          return JSON.stringify({ yes, no });
        } catch (e) {
          return e instanceof InputUnsupported ? `fallback: ${e.code}` : `failed: ${e.message}`;
        }
      } })
      .tool({ name: "bad_form", description: "Asks with a form outside the subset", handler: async (_args, call) => {
        try {
          await call.ask("x", { type: "object", properties: { a: { type: "object" } } });
          return "asked";
        } catch (e) {
          return e instanceof Refused && !(e instanceof InputUnsupported) ? e.message : `unexpected ${e}`;
        }
      } });
    await ctx.start(app);
    const asker = await native((params) => params.message.startsWith("Also")
      ? { action: "decline" }
      : { action: "accept", content: { confirm: true, env: "prod" } });
    assert.deepEqual(JSON.parse(textOf(await asker.native("confirm"))), {
      yes: { action: "accept", content: { confirm: true, env: "prod" } },
      no: { action: "decline" },
    });
    assert.equal(asker.asked[0].mode, "form");
    assert.deepEqual(asker.asked[0].requestedSchema, CONFIRM_FORM);
    assert.match(textOf(await asker.native("bad_form")), /invalid_parameter: at \$\.requested_schema\.properties\.a\.type/);
    const plain = await ctx.agent(); // declares no elicitation (and runs in fallback mode)
    assert.equal(textOf(await plain.call("confirm")), "fallback: input_unsupported");
  });

  test("log messages pass the harness's level and sampling reaches its model", async () => {
    const app = new App({ group: "mcp4", home: ctx.broker.home })
      .tool({ name: "summarize", description: "Logs, then asks the model", handler: async (_args, call) => {
        call.log("info", "reading", "reader");
        call.log("warning", { disk: "slow" });
        assert.throws(() => call.log("loud", "x"), RangeError);
        try {
          const r = await call.sample({ messages: [{ role: "user", content: { type: "text", text: "Summarize" } }], maxTokens: 20 });
          return `model said: ${r.content.text}`;
        } catch (e) {
          return e instanceof InputUnsupported ? `cannot sample: ${e.code}` : `failed: ${e.message}`;
        }
      } });
    await ctx.start(app);
    const asker = await native(undefined, () => ({ role: "assistant", content: { type: "text", text: "short" }, model: "m1" }));
    await asker.rpc("logging/setLevel", { level: "warning" });
    assert.equal(textOf(await asker.native("summarize")), "model said: short");
    assert.equal(asker.sampled[0].maxTokens, 20);
    assert.deepEqual(await asker.logged(1), [{ level: "warning", data: { disk: "slow" } }]);
    const plain = await native(); // declares no sampling; no level set, so every message passes
    assert.equal(textOf(await plain.native("summarize")), "cannot sample: input_unsupported");
    assert.deepEqual((await plain.logged(2))[0], { level: "info", logger: "reader", data: "reading" });
  });
});

describe("settings", () => {
  const ctx = context();
  test("bad settings fail early and a refused group ends the app", async () => {
    assert.throws(() => new App({ group: "g", url: "ftp://x:1" }));
    assert.throws(() => new App({ group: "g", url: "http://x:1", caFile: "/nowhere/ca.pem" }), /needs an https/);
    assert.throws(() => new App({ group: "g", url: "https://x:1", caFile: "/nowhere/ca.pem" }), /cannot read the CA file/);
    assert.throws(() => new App({ group: "g", url: "http://127.0.0.1" }));
    assert.throws(() => new App({ group: "g", token: "a", device: "b" }));
    assert.throws(() => new App({ group: "g", agents: [] }));
    assert.throws(() => new App({ group: "g" }).tool({ name: "t", description: "", handler: () => "" }));
    const app = new App({ group: "g", home: ctx.broker.home }).tool({ name: "leo_reserved", description: "Reserved", handler: () => "" });
    await assert.rejects(app.start(), (e) => e instanceof FatalError && /invalid_tool/.test(e.message));
  });
});

describe("prompts and resources", () => {
  const ctx = context();
  test("prompts, resources and completions reach the agent as the app wrote them", async () => {
    const pixel = PNG.toString("base64");
    const app = new App({ group: "docs", home: ctx.broker.home })
      .prompt({ name: "greet", description: "Greets someone", arguments: [{ name: "name", required: true }],
        get: (read) => ({ messages: [
          { role: "user", content: { type: "text", text: `Say hello to ${read.params.arguments.name}` } },
          { role: "user", content: { type: "image", data: pixel, mimeType: "image/png" } },
        ] }),
        complete: () => ({ completion: { values: ["Ada", "Alan"] } }) })
      .resource({ uri: "test://pixel.png", name: "pixel", mimeType: "image/png",
        read: async (read) => ({ contents: [{ uri: read.params.uri, mimeType: "image/png", blob: pixel }] }) })
      .resourceTemplate({ uriTemplate: "test://items/{id}", name: "item", read: (read) => {
        if (read.params.uri === "test://items/missing") throw new ReadError("not_found", "no such item");
        return { contents: [{ uri: read.params.uri, text: `item at ${read.params.uri}` }] };
      } });
    await ctx.start(app); // prompts and resources alone, without a tool
    const a = await McpAgent.start(ctx.broker, { client: NATIVE });
    ctx.cleanups.push(() => a.close());
    assert.equal((await a.rpc("prompts/list", {})).prompts[0].name, "greet");
    const got = await a.rpc("prompts/get", { name: "greet", arguments: { name: "Ada" } });
    assert.equal(got.messages[0].content.text, "Say hello to Ada");
    assert.equal(got.messages[1].content.data, pixel);
    assert.deepEqual((await a.rpc("resources/list", {})).resources,
      [{ uri: "test://pixel.png", name: "pixel", mimeType: "image/png" }]);
    assert.equal((await a.rpc("resources/templates/list", {})).resourceTemplates[0].uriTemplate, "test://items/{id}");
    assert.equal((await a.rpc("resources/read", { uri: "test://pixel.png" })).contents[0].blob, pixel);
    assert.equal((await a.rpc("resources/read", { uri: "test://items/7" })).contents[0].text, "item at test://items/7");
    await assert.rejects(a.rpc("resources/read", { uri: "test://items/missing" }), /not_found: no such item/);
    const done = await a.rpc("completion/complete", { ref: { type: "ref/prompt", name: "greet" }, argument: { name: "name", value: "A" } });
    assert.deepEqual(done.completion.values, ["Ada", "Alan"]);
    assert.throws(() => app.resource({ uri: "test://pixel.png", name: "again", read: () => ({}) }), /given twice/);
    await waitUntil(async () => (await app.resourceUpdated("test://items/3")) === 1);
    await assert.rejects(app.resourceUpdated("test://elsewhere"), /not_found/);
  });
});
