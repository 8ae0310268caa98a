// The TypeScript baseline: the same tools as an MCP server of its own over stdio, on the
// official TypeScript SDK (@modelcontextprotocol/sdk, pinned in package-lock.json), answering
// at once with the same payload bytes (from the JSON file the bench writes).

import { readFileSync } from "node:fs";

import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const tools = JSON.parse(readFileSync(process.argv[2], "utf8"));
const byName = new Map(tools.map((t) => [t.name, { content: t.content }]));
const server = new Server({ name: "leo-bench-typescript", version: "1" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.input_schema })),
}));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const result = byName.get(req.params.name);
  if (!result) return { content: [{ type: "text", text: `unknown tool ${req.params.name}` }], isError: true };
  return result;
});
await server.connect(new StdioServerTransport());
