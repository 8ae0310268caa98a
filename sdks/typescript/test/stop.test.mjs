// Stopping the app and the broker at the same moment, as `kill APP BROKER` does (a service
// manager at shutdown): the app's SIGTERM lands while the broker closes its stream. A stop
// request is never lost, however the two interleave: twenty tries of the example app. And a stop
// is prompt: nothing the SDK holds (a timer, a pooled keep-alive socket, a request to a broker
// that does not answer) keeps a stopped app running. And a stop withdraws the app's groups, so
// the calls still waiting for them end at once.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { App } from "../dist/index.js";
import { Broker, McpAgent, textOf, waitUntil } from "./support.mjs";

const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "text-tools.mjs");

test("stopping the app and the broker at once stops the app every time", async () => {
  const broker = await Broker.start();
  try {
    for (let attempt = 1; attempt <= 20; attempt++) {
      const app = spawn(process.execPath, [example], { env: { ...process.env, LEO_HOME: broker.home }, stdio: ["ignore", "ignore", "pipe"] });
      let err = "";
      app.stderr.on("data", (c) => (err += c));
      const exited = new Promise((r) => app.once("exit", (code, signal) => r({ code, signal })));
      try {
        await waitUntil(async () => (await broker.tools()).join() === "reverse_text,word_count", "the app serving");
        app.kill("SIGTERM");
        broker.proc.kill("SIGTERM");
        let timer;
        const ended = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r(undefined), 10_000)))]);
        clearTimeout(timer);
        assert.ok(ended, `try ${attempt}: the app did not stop on SIGTERM:\n${err}`);
        assert.deepEqual(ended, { code: 0, signal: null }, `try ${attempt}:\n${err}`);
      } finally {
        app.kill("SIGKILL");
      }
      await broker.restart(); // kills what is left of the one stopping (its drain takes 2 s)
    }
  } finally {
    await broker.close();
  }
});

/** Spawns the example app on `broker`; resolves once it serves. */
async function serving(broker) {
  const app = spawn(process.execPath, [example], { env: { ...process.env, LEO_HOME: broker.home }, stdio: ["ignore", "ignore", "pipe"] });
  app.err = "";
  app.stderr.on("data", (c) => (app.err += c));
  app.exited = new Promise((r) => app.once("exit", (code, signal) => r({ code, signal })));
  await waitUntil(async () => (await broker.tools()).join() === "reverse_text,word_count", "the app serving");
  return app;
}

/** How long `exited` took, or undefined past `ms`. */
async function within(exited, ms) {
  const t0 = Date.now();
  let timer;
  const ended = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r(undefined), ms)))]);
  clearTimeout(timer);
  return ended && { ...ended, ms: Date.now() - t0 };
}

// The broker stays up, so its keep-alive connection and the app's timers are all that could hold
// the app: a 10 s timer (the wait for hello) or a pooled socket would show as ~10 s here.
test("a stopped app exits at once while the broker stays up", async () => {
  const broker = await Broker.start();
  try {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const app = await serving(broker);
      try {
        app.kill("SIGTERM");
        const ended = await within(app.exited, 5_000);
        assert.ok(ended, `try ${attempt}: the app was still running 5 s after SIGTERM:\n${app.err}`);
        assert.deepEqual({ code: ended.code, signal: ended.signal }, { code: 0, signal: null }, `try ${attempt}:\n${app.err}`);
      } finally {
        app.kill("SIGKILL");
      }
    }
  } finally {
    await broker.close();
  }
});

// A broker that accepts a connection but does not answer (frozen here; shutting down, in life):
// a stop tears down the open of the event stream instead of waiting out its 30 s timeout.
test("a stop ends an open of the event stream the broker does not answer", async () => {
  const broker = await Broker.start();
  const app = new App({ group: "frozen", home: broker.home })
    .tool({ name: "noop", description: "Does nothing", handler: () => "ok" });
  const stop = new AbortController();
  broker.proc.kill("SIGSTOP");
  try {
    const served = app.serve(stop.signal);
    // The connect succeeds (the kernel queues it), the request waits for an answer.
    await waitUntil(() => app.status === "connecting", "the app connecting");
    await new Promise((r) => setTimeout(r, 500));
    stop.abort();
    const ended = await within(served.then(() => ({ code: 0, signal: null })), 5_000);
    assert.ok(ended, "serve() still waited for the frozen broker 5 s after the stop");
  } finally {
    broker.proc.kill("SIGCONT");
    await broker.close();
  }
});

// A stream that merely drops keeps the calls parked for its tools for the resume grace (60 s); a
// deliberate stop withdraws the groups before closing it, so they end at once.
test("a stopped app withdraws its groups and its parked calls end at once", async () => {
  const broker = await Broker.start();
  let agent;
  try {
    let started;
    const running = new Promise((r) => (started = r));
    const app = new App({ group: "busy", home: broker.home, maxConcurrent: 1 }).tool({
      name: "work", description: "Runs until stopped",
      handler: async (args, call) => {
        started();
        await new Promise((r) => call.signal.addEventListener("abort", r));
        return `stopped ${args.n}`;
      },
    });
    await app.start();
    agent = await McpAgent.start(broker);
    const first = agent.startCall("work", { n: 1 });
    await running;
    const second = agent.startCall("work", { n: 2 });
    const states = async () => (await broker.pending()).map((r) => r.state).sort().join();
    await waitUntil(async () => (await states()) === "claimed,parked", "one call claimed and one parked");
    await app.stop();
    assert.equal(textOf(await first.answer), "stopped 1", "its reply is still posted");
    const ended = await within(second.answer, 10_000);
    assert.ok(ended, "the parked call still waited 10 s after the stop (for the resume grace)");
    assert.equal(ended.isError, true);
    assert.match(textOf(ended), /cancelled: tool "work" was withdrawn/);
  } finally {
    agent?.close();
    await broker.close();
  }
});
