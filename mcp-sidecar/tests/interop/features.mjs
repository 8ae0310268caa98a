// Drives leo-mcp's MCP features with the official TypeScript MCP SDK client: tool titles,
// annotations and output schemas, structured results, progress from the app, elicitation.
//
// Run by the Rust test `features::typescript_sdk_client`, which plays the app. The two talk in
// JSON lines: this script prints {"step": ...} on stdout after each step and waits for a line
// on stdin where the app has to act first. Env: LEO_MCP_BIN (the binary), LEO_HOME.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const say = (step, data = {}) => process.stdout.write(JSON.stringify({ step, ...data }) + "\n");
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const waitForGo = async () => {
  const next = await lines.next();
  if (next.done) throw new Error("the test closed stdin");
  return next.value;
};
const fail = (message) => {
  say("failed", { message });
  process.exit(1);
};
setTimeout(() => fail("features script timed out"), 90_000).unref();

const client = new Client(
  { name: "leo-features-ts-sdk", version: "0.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
// The user: accepts a confirmation with the form's fields filled in, declines anything else.
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const { message, requestedSchema } = request.params;
  asked.push({ message, requestedSchema, mode: request.params.mode ?? null });
  if (message.startsWith("Deploy")) {
    return { action: "accept", content: { confirm: true, env: "prod" } };
  }
  return { action: "decline" };
});

const transport = new StdioClientTransport({
  command: process.env.LEO_MCP_BIN,
  args: ["--agent", "ts-sdk", "--mode", "native"],
  env: { ...process.env },
  stderr: "inherit",
});
await client.connect(transport);
say("connected");

const listed = await client.listTools();
say("listed", { tools: listed.tools });

// A structured result; the SDK checks structuredContent against the listed outputSchema.
const record = await client.callTool({ name: "record", arguments: {} });
say("record", { result: record });

// A call the app reports progress on before it answers.
const reports = [];
const deploy = await client.callTool({ name: "deploy", arguments: {} }, undefined, {
  onprogress: (p) => reports.push(p),
});
say("deploy", { result: deploy, reports });

// A call during which the app asks the user twice (accepted, then declined).
const confirmed = await client.callTool({ name: "confirm", arguments: {} });
say("confirm", { result: confirmed, asked });

await client.close();
say("done");
process.exit(0);
