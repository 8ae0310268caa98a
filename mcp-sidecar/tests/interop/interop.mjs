// Drives leo-mcp with the official TypeScript MCP SDK client.
//
// Run by the Rust test `interop::typescript_sdk_client`, which plays the app. The two talk in
// JSON lines: this script prints {"step": ...} on stdout after each step, and waits for a line
// on stdin where the app has to act first. Env: LEO_MCP_BIN (the binary), LEO_HOME.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const say = (step, data = {}) => process.stdout.write(JSON.stringify({ step, ...data }) + "\n");
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const waitForGo = async () => {
  const next = await lines.next();
  if (next.done) throw new Error("the test closed stdin");
};
const fail = (message) => {
  say("failed", { message });
  process.exit(1);
};
setTimeout(() => fail("interop script timed out"), 60_000).unref();

let changed = null;
let changedWaiter = null;
const client = new Client(
  { name: "leo-interop-ts-sdk", version: "0.0.0" },
  {
    listChanged: {
      tools: {
        debounceMs: 0,
        onChanged: (error, tools) => {
          if (error) fail(`re-listing failed: ${error}`);
          changed = tools;
          if (changedWaiter) changedWaiter();
        },
      },
    },
  },
);
const transport = new StdioClientTransport({
  command: process.env.LEO_MCP_BIN,
  // Native: this client re-lists on list_changed (the listChanged option above).
  args: ["--agent", "ts-sdk", "--mode", "native"],
  env: { ...process.env },
  stderr: "inherit",
});
await client.connect(transport);
say("connected", {
  server: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
});

const listed = await client.listTools();
say("listed", { tools: listed.tools });

const echoed = await client.callTool({ name: "echo", arguments: { text: "hi" } });
say("called", { result: echoed });

// A call the app answers late: progress keeps the SDK's 1 s request timeout from firing.
let progress = 0;
const slow = await client.callTool({ name: "slow", arguments: {} }, undefined, {
  timeout: 1000,
  resetTimeoutOnProgress: true,
  onprogress: () => {
    progress += 1;
  },
});
say("slow", { result: slow, progress });

const missing = await client.callTool({ name: "nope", arguments: {} });
say("missing", { result: missing });

say("ready_for_change");
await waitForGo();
const names = () => (changed || []).map((t) => t.name).sort();
const deadline = Date.now() + 20_000;
while (!names().includes("later")) {
  if (Date.now() > deadline) fail(`no list_changed with the new tool; saw ${names()}`);
  await new Promise((resolve) => {
    changedWaiter = resolve;
    setTimeout(resolve, 200);
  });
}
say("changed", { tools: names() });

await client.close();
say("done");
process.exit(0);
