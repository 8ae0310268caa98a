// The step protocol of the TypeScript SDK scripts (see testkit's `script`): a {"step": ...}
// line on stdout after each step, a line on stdin where the test must act first, and a client
// that re-lists tools on list_changed and reports the new list.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";

export const say = (step, data = {}) =>
  process.stdout.write(JSON.stringify({ step, ...data }) + "\n");
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
export const waitForGo = async () => {
  const next = await lines.next();
  if (next.done) throw new Error("the test closed stdin");
};
export const fail = (message) => {
  say("failed", { message });
  process.exit(1);
};

// A client named `info` that re-lists on list_changed; `changedTools()` resolves with the
// first list seen after a change, `latest()` is the last one (or null).
export const relistingClient = (info) => {
  let changed = null;
  let waiter = null;
  const client = new Client(info, {
    listChanged: {
      tools: {
        debounceMs: 0,
        onChanged: (error, tools) => {
          if (error) fail(`re-listing failed: ${error}`);
          changed = tools;
          if (waiter) waiter();
        },
      },
    },
  });
  const changedTools = async () => {
    if (!changed) await new Promise((resolve) => (waiter = resolve));
    return changed;
  };
  return { client, changedTools, latest: () => changed };
};
