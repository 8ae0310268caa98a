// Stopping the app and the broker at the same moment, as `kill APP BROKER` does (a service
// manager at shutdown): the app's SIGTERM lands while the broker closes its stream. A stop
// request is never lost, however the two interleave: twenty tries of the example app.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Broker, waitUntil } from "./support.mjs";

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
