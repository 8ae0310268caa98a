// Drives leo-mcp with the official TypeScript MCP SDK client.
//
// Run by the Rust test `interop::typescript_sdk_client`, which plays the app. The two talk in
// JSON lines: this script prints {"step": ...} on stdout after each step, and waits for a line
// on stdin where the app has to act first. Env: LEO_MCP_BIN (the binary), LEO_HOME.

import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { fail, relistingClient, say, waitForGo } from "./steps.mjs";

setTimeout(() => fail("interop script timed out"), 60_000).unref();

const { client, latest } = relistingClient({ name: "leo-interop-ts-sdk", version: "0.0.0" });
const transport = new StdioClientTransport({
  command: process.env.LEO_MCP_BIN,
  // Native: this client re-lists on list_changed (`relistingClient`).
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
const names = () => (latest() || []).map((t) => t.name).sort();
const deadline = Date.now() + 20_000;
while (!names().includes("later")) {
  if (Date.now() > deadline) fail(`no list_changed with the new tool; saw ${names()}`);
  await new Promise((resolve) => setTimeout(resolve, 200));
}
say("changed", { tools: names() });

await client.close();
say("done");
process.exit(0);
