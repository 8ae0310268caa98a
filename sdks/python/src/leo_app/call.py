"""One call of a tool, as its handler sees it.

A call carries its cancellation: when the broker ends it (the call timed out, the agent
cancelled or went away, the tool was withdrawn, the app lost its stream) or the app shuts down,
`cancelled` turns true at once. An `async def` handler may `await call.wait_cancelled()` (or use
`call.sleep`), a plain handler may poll `call.cancelled` or wait on `call.cancel_event`; a
handler still running after the cancel grace is abandoned (an `async def` one is cancelled)
and its reply is not posted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime
from typing import Any

from .errors import Cancelled


def _epoch(created_at: str) -> float | None:
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


class Call:
    """A call to answer."""

    __slots__ = (
        "id", "agent", "session", "group", "tool", "arguments", "timeout_s", "created_at",
        "cancel_event", "cancel_reason", "_loop", "_async_event",
    )

    def __init__(self, request: dict[str, Any], loop: asyncio.AbstractEventLoop):
        #: The request id (`r_…`).
        self.id: str = request["id"]
        #: The agent that called (its name in the broker's config, such as `claude`).
        self.agent: str = request.get("agent", "")
        #: The agent's session.
        self.session: str = request.get("session", "")
        #: The group the tool was registered in.
        self.group: str = request.get("group", "")
        #: The tool's name.
        self.tool: str = request.get("tool", "")
        #: The arguments, already checked by the broker against the tool's input_schema.
        self.arguments: dict[str, Any] = request.get("arguments") or {}
        #: The call's timeout in seconds; `None` for a handoff (`timeout_s: 0`).
        self.timeout_s: int | None = request.get("timeout_s")
        #: When the agent called (RFC 3339).
        self.created_at: str = request.get("created_at", "")
        #: Set once the call is cancelled; for plain (thread) handlers to wait on.
        self.cancel_event = threading.Event()
        #: Why it was cancelled: `ended` (by the broker) or `shutdown` (the app stops).
        self.cancel_reason: str | None = None
        self._loop = loop
        self._async_event: asyncio.Event | None = None

    @property
    def deadline(self) -> float | None:
        """When the broker times the call out, as a `time.time()` value; `None` for never."""
        start = _epoch(self.created_at)
        if self.timeout_s is None or start is None:
            return None
        return start + self.timeout_s

    def remaining(self) -> float | None:
        """Seconds left before the broker times the call out; `None` for never."""
        deadline = self.deadline
        return None if deadline is None else max(0.0, deadline - time.time())

    @property
    def cancelled(self) -> bool:
        """True once the call is cancelled."""
        return self.cancel_event.is_set()

    def check(self) -> None:
        """Raises `Cancelled` if the call is cancelled."""
        if self.cancel_event.is_set():
            raise Cancelled(self.cancel_reason or "cancelled")

    async def wait_cancelled(self) -> None:
        """Returns when the call is cancelled (on the app's event loop)."""
        if self.cancel_event.is_set():
            return
        if self._async_event is None:
            self._async_event = asyncio.Event()
        await self._async_event.wait()

    async def sleep(self, seconds: float) -> None:
        """Sleeps, or raises `Cancelled` as soon as the call is cancelled."""
        try:
            await asyncio.wait_for(self.wait_cancelled(), seconds)
        except asyncio.TimeoutError:
            return
        raise Cancelled(self.cancel_reason or "cancelled")

    def _cancel(self, reason: str) -> None:
        """Called on the app's event loop."""
        if self.cancel_event.is_set():
            return
        self.cancel_reason = reason
        self.cancel_event.set()
        if self._async_event is not None:
            self._async_event.set()

    def __repr__(self) -> str:
        return f"Call(id={self.id!r}, tool={self.tool!r}, agent={self.agent!r})"
