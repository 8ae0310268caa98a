// A 2025-11-25 session over the broker's /mcp on the official TypeScript MCP SDK client.
// The pinned SDK (1.32.2, the newest release) knows no later revision: no server/discover, no
// subscriptions/listen; its `connected` step says which revisions it supports and which one the
// session settled on, so a newer SDK that adds 2026-07-28 shows up in the test.
//
// Run by the Rust test `http::typescript_sdk_over_http`, which plays the app. The client speaks
// Streamable HTTP to LEO_MCP_URL with the shared agent token (LEO_AGENT_TOKEN) and
// `Leo-Agent: ts-http`. Prints {"step": ...} lines; waits for a line on stdin where the app has
// to act first.

import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SUPPORTED_PROTOCOL_VERSIONS } from "@modelcontextprotocol/sdk/types.js";
import { fail, relistingClient, say, waitForGo } from "./steps.mjs";

setTimeout(() => fail("the script timed out"), 60_000).unref();

const { client, changedTools } = relistingClient({ name: "opencode", version: "0-ts-http" });
const transport = new StreamableHTTPClientTransport(new URL(process.env.LEO_MCP_URL), {
  requestInit: {
    headers: {
      Authorization: `Bearer ${process.env.LEO_AGENT_TOKEN}`,
      "Leo-Agent": "ts-http",
    },
  },
});
await client.connect(transport);
say("connected", {
  server: client.getServerVersion(),
  session: transport.sessionId,
  protocol: transport.protocolVersion,
  supported: SUPPORTED_PROTOCOL_VERSIONS,
});

const listed = await client.listTools();
say("listed", { tools: listed.tools.map((t) => t.name).sort() });
say("called", { result: await client.callTool({ name: "echo", arguments: { text: "hi" } }) });

say("ready_for_change");
await waitForGo();
say("changed", { tools: (await changedTools()).map((t) => t.name).sort() });

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
