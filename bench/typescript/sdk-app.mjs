// The bench's app on the TypeScript SDK (`sdks/typescript`): it serves the bench's tools as
// group `bench` and answers every call at once (`answersAtOnce`, one POST per call) with the
// payload of the tool called, serialized once ahead (`Reply.rawContent`), the same bytes as the
// Rust app. Tools come from the JSON file the bench writes. Prints `serving` once registered.

import { readFileSync } from "node:fs";

import { App, Reply } from "../../sdks/typescript/dist/index.js";

const app = new App({ group: "bench", maxConcurrent: 256 });
for (const t of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
  const reply = Reply.rawContent(JSON.stringify(t.content));
  app.tool({ name: t.name, description: t.description, inputSchema: t.input_schema, answersAtOnce: true, handler: () => reply });
}
await app.start();
console.log("serving");
process.stdin.resume();
process.stdin.on("end", () => app.stop().then(() => process.exit(0)));
