// A 2025-11-25 session over the broker's /mcp on the official TypeScript MCP SDK client.
//
// Run by the Rust test `http::typescript_sdk_over_http`, which plays the app. The client speaks
// Streamable HTTP to LEO_MCP_URL with the shared agent token (LEO_AGENT_TOKEN) and
// `Leo-Agent: ts-http`. Prints {"step": ...} lines; waits for a line on stdin where the app has
// to act first.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

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
setTimeout(() => fail("the script timed out"), 60_000).unref();

let changed = null;
let changedWaiter = null;
const client = new Client(
  { name: "opencode", version: "0-ts-http" },
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
const transport = new StreamableHTTPClientTransport(new URL(process.env.LEO_MCP_URL), {
  requestInit: {
    headers: {
      Authorization: `Bearer ${process.env.LEO_AGENT_TOKEN}`,
      "Leo-Agent": "ts-http",
    },
  },
});
await client.connect(transport);
say("connected", { server: client.getServerVersion(), session: transport.sessionId });

const listed = await client.listTools();
say("listed", { tools: listed.tools.map((t) => t.name).sort() });
say("called", { result: await client.callTool({ name: "echo", arguments: { text: "hi" } }) });

say("ready_for_change");
await waitForGo();
if (!changed) await new Promise((resolve) => (changedWaiter = resolve));
say("changed", { tools: changed.map((t) => t.name).sort() });

// A call the client aborts: the SDK sends notifications/cancelled.
const abort = new AbortController();
const aborted = client
  .callTool({ name: "slow", arguments: {} }, undefined, { signal: abort.signal })
  .then(() => "answered", (e) => `aborted: ${e}`);
say("calling");
await waitForGo();
abort.abort();
say("gave_up", { outcome: await aborted });

await transport.terminateSession();
await client.close();
say("done");
process.exit(0);
