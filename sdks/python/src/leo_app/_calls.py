"""The app's own book of calls: which requests wait for a free slot, which run, which were
already seen.

Pure state, driven by the session loop, so the rules are tested without a broker:
- a request is claimed only when a slot is free (`max_concurrent`); until then it waits here
  unclaimed, so another instance of the app can take it, and leaves the queue if the broker
  cancels it;
- a request is offered once, however many ways it arrives (the stream, a replay after
  `Last-Event-ID`, the `pending=1` list);
- when the stream is lost the broker keeps this client's claims for the resume grace, so
  running handlers go on (their replies wait for the next session), and queued requests are
  forgotten: the `pending=1` list after the reconnect says which of them still wait, which
  running calls ended meanwhile (`stale`), and which this client claimed without hearing so
  (the answer to its claim was lost with the broker): those are run without claiming again
  (`offer_ours`);
- a request whose claim got no definite answer (the broker is away, or its store is:
  `503 store_unavailable`) is forgotten (`forget`), so that the pending list may offer it
  again: the session reads that list again after a short backoff, and applies to it the rule
  it applies after a reconnect (`offer_listed`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

#: How many finished request ids are remembered to drop repeats.
SEEN = 4096


class Control:
    """The cancellation of one running call."""

    __slots__ = ("ended", "on_cancel")

    def __init__(self) -> None:
        #: The broker ended the call: its reply must not be posted.
        self.ended = False
        #: Called with `ended` or `shutdown` when the call is cancelled.
        self.on_cancel: Callable[[str], None] | None = None

    def end(self) -> None:
        self.ended = True
        if self.on_cancel:
            self.on_cancel("ended")

    def stop(self) -> None:
        if self.on_cancel:
            self.on_cancel("shutdown")


class Calls:
    def __init__(self, max_concurrent: int):
        self.max = max(1, max_concurrent)
        self.queue: deque[dict[str, Any]] = deque()
        self.queued: set[str] = set()
        self.running: dict[str, Control] = {}
        #: Queued requests this client already holds the claim of.
        self.ours: set[str] = set()
        self.seen: OrderedDict[str, None] = OrderedDict()

    def _remember(self, rid: str) -> None:
        if rid not in self.seen:
            self.seen[rid] = None
            if len(self.seen) > SEEN:
                self.seen.popitem(last=False)

    def offer(self, request: dict[str, Any]) -> bool:
        """Queues a request unless it was seen before; returns whether it was queued."""
        rid = request["id"]
        if rid in self.seen or rid in self.queued or rid in self.running:
            return False
        self._remember(rid)
        self.queued.add(rid)
        self.queue.append(request)
        return True

    def offer_ours(self, request: dict[str, Any]) -> bool:
        """Queues, first, a request the broker lists as claimed by this client, unless it runs
        or ran here: the answer to its claim was lost. It is run without claiming again."""
        rid = request["id"]
        if rid in self.running or rid in self.queued or rid in self.seen:
            return False
        self._remember(rid)
        self.queued.add(rid)
        self.ours.add(rid)
        self.queue.appendleft(request)
        return True

    def offer_listed(
        self, pending: list[dict[str, Any]], client_id: str, serves: Callable[[dict[str, Any]], bool]
    ) -> bool:
        """The rule for the broker's `pending=1` list, after a reconnect or a claim without a
        definite answer: a call listed parked for our tools that was not seen here is offered
        (claimed anew), and one listed as claimed by this very client that does not run here
        (the answer to its claim was lost) is queued first, to run without claiming again.
        Returns whether anything was queued."""
        queued = False
        for p in pending:
            if "id" not in p or not serves(p):
                continue
            state = p.get("state")
            if state == "claimed" and p.get("claimed_by") == client_id:
                queued = self.offer_ours(p) or queued
            elif state == "parked":
                queued = self.offer(p) or queued
        return queued

    def forget(self, rid: str) -> None:
        """Request `rid` got no definite answer to its claim: it may be offered again."""
        self.seen.pop(rid, None)

    def cancelled(self, rid: str) -> None:
        """The broker ended request `rid`: it leaves the queue, or its handler is cancelled."""
        self._remember(rid)
        if rid in self.queued:
            self.queued.discard(rid)
            self.ours.discard(rid)
            self.queue = deque(r for r in self.queue if r["id"] != rid)
        control = self.running.get(rid)
        if control is not None:
            control.end()

    def next_to_start(self) -> tuple[dict[str, Any], Control, bool] | None:
        """The next request to start, if a slot is free, and whether this client holds its
        claim already; it counts as running from now on."""
        if len(self.running) >= self.max or not self.queue:
            return None
        request = self.queue.popleft()
        rid = request["id"]
        self.queued.discard(rid)
        claimed = rid in self.ours
        self.ours.discard(rid)
        control = Control()
        self.running[rid] = control
        return request, control, claimed

    def finished(self, rid: str) -> None:
        self.running.pop(rid, None)

    def session_lost(self) -> None:
        """The stream is gone: what runs goes on (its claim waits for the app to resume), what
        waits is forgotten."""
        for rid in self.queued:
            self.seen.pop(rid, None)
        self.queued.clear()
        self.ours.clear()
        self.queue.clear()

    def stale(self, live: dict[str, str | None], client_id: str) -> None:
        """After a reconnect: ends the running calls the broker no longer holds for us (ended,
        or claimed by another client). `live` maps each live call to its claimant (`None`:
        parked, which a reply with its claim may still settle)."""
        for rid, control in list(self.running.items()):
            if rid not in live or live[rid] not in (None, client_id):
                self._remember(rid)
                control.end()

    def shutdown(self) -> None:
        """The app stops: ask what runs to stop, drop what waits."""
        for control in list(self.running.values()):
            control.stop()
        self.queued.clear()
        self.ours.clear()
        self.queue.clear()
