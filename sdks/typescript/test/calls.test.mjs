// The rule for the pending list, shared by the reconnect and the read after a claim without a
// definite answer (`Calls.offerListed`), on the book of calls alone.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Calls } from "../dist/calls.js";

const req = (id, state, claimed_by, tool = "t") => ({ id, group: "g", tool, arguments: {}, state, ...(claimed_by ? { claimed_by } : {}) });
const serves = (r) => r.group === "g" && r.tool === "t";

test("the pending list offers parked calls anew and runs ours without claiming", () => {
  const calls = new Calls(8);
  // Seen and finished here: not offered again, even listed as ours.
  assert.ok(calls.offer(req("done", "parked")));
  calls.finished(calls.nextToStart().request.id);
  // Its claim got no definite answer: forgotten, so the list may offer it again.
  assert.ok(calls.offer(req("lost", "parked")));
  calls.nextToStart();
  calls.forget("lost");
  calls.finished("lost");
  const listed = [
    req("parked", "parked"), req("lost", "claimed", "me"), req("done", "claimed", "me"),
    req("theirs", "claimed", "other"), req("other_tool", "parked", undefined, "x"),
  ];
  assert.equal(calls.offerListed(listed, "me", serves), 2);
  const first = calls.nextToStart();
  assert.deepEqual([first.request.id, first.claimed], ["lost", true]);
  const second = calls.nextToStart();
  assert.deepEqual([second.request.id, second.claimed], ["parked", false]);
  assert.equal(calls.nextToStart(), undefined);
  // Read again, the same list adds nothing: both run here now.
  assert.equal(calls.offerListed(listed, "me", serves), 0);
});
