// A complete app: the group `text` with two tools, served until Ctrl-C.
//
//   npm install ./sdks/typescript        (in your project; or `npm install` here)
//   leo broker &                         (already running, or in another terminal)
//   node sdks/typescript/examples/text-tools.mjs
//   leo call reverse_text '{"text": "stressed"}'    # desserts

import { App } from "@leo/app";

const app = new App({ group: "text", maxConcurrent: 8 })
  .tool({
    name: "reverse_text",
    description: "Reverse a text, character by character",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    answersAtOnce: true,
    timeoutS: 30,
    handler: ({ text }) => [...text].reverse().join(""),
  })
  .tool({
    name: "word_count",
    description: "Count the words, lines and characters of a text",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    handler: async ({ text }, call) => {
      call.signal.throwIfAborted();
      return { words: text.split(/\s+/).filter(Boolean).length, lines: text.split("\n").length, chars: text.length };
    },
  });

const stop = new AbortController();
process.once("SIGINT", () => stop.abort());
process.once("SIGTERM", () => stop.abort());
await app.serve(stop.signal);
