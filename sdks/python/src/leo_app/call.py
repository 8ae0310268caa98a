"""One call of a tool, as its handler sees it.

A call carries its cancellation: when the broker ends it (the call timed out, the agent
cancelled or went away, the tool was withdrawn, the app lost its stream) or the app shuts down,
`cancelled` turns true at once. An `async def` handler may `await call.wait_cancelled()` (or use
`call.sleep`), a plain handler may poll `call.cancelled` or wait on `call.cancel_event`; a
handler still running after the cancel grace is abandoned (an `async def` one is cancelled)
and its reply is not posted.

During a claimed call the handler may report progress (`call.progress`, sent in the background
and in order, so it never blocks nor raises for a call that already ended) and ask the agent's
user a question (`await call.ask` or, in a plain handler, `call.ask_blocking`). A tool that
answers at once has no claim, so it can do neither.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ._aio import within
from .errors import Cancelled, LeoError

#: A progress message is cut to this many characters (the broker's limit).
MAX_PROGRESS_MESSAGE = 4096
#: The levels of `Call.log`, least severe first (RFC 5424, as MCP names them).
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
#: How long a reply waits for the progress reports still on their way.
PROGRESS_FLUSH = 10.0


@dataclass(frozen=True)
class Answer:
    """The user's answer to `Call.ask`: `action` is `accept`, `decline` or `cancel`; `content`
    holds the form's values with `accept` (else `None`)."""

    action: str
    content: dict[str, Any] | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"


class CallIO(Protocol):
    """What a call needs from the app to speak to the broker (implemented by the app)."""

    async def progress(self, call: Call, body: bytes) -> None: ...

    async def ask(self, call: Call, body: bytes) -> Answer: ...

    async def log(self, call: Call, body: bytes) -> None: ...

    async def sample(self, call: Call, body: bytes) -> dict[str, Any]: ...

    def client_id(self) -> str: ...


def _epoch(created_at: str) -> float | None:
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


class Call:
    """A call to answer."""

    __slots__ = (
        "_async_event",
        "_at_once",
        "_io",
        "_loop",
        "_progress_tail",
        "agent",
        "arguments",
        "cancel_event",
        "cancel_reason",
        "created_at",
        "group",
        "id",
        "session",
        "timeout_s",
        "tool",
    )

    def __init__(
        self, request: dict[str, Any], loop: asyncio.AbstractEventLoop,
        io: CallIO | None = None, at_once: bool = False,
    ):
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
        self._io = io
        self._at_once = at_once
        self._progress_tail: asyncio.Task[None] | None = None

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
            await within(self.wait_cancelled(), seconds)
        except asyncio.TimeoutError:
            return
        raise Cancelled(self.cancel_reason or "cancelled")

    # -- progress and questions ----------------------------------------------------------

    def _need_claim(self, what: str) -> CallIO:
        if self._at_once:
            raise LeoError(
                f"tool {self.tool!r} answers at once (its reply carries the claim), so it cannot "
                f"{what}: declare it without answers_at_once"
            )
        if self._io is None:
            raise LeoError(f"this call is not served by an app, so it cannot {what}")
        return self._io

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Reports progress to the agent's harness (MCP `notifications/progress`; a harness
        that sent no progress token gets none). `progress` should grow with each report;
        `total` is optional. Returns at once from any handler, plain or async: reports are
        posted in the background, in order, and the reply waits for them. A report for a call
        that already ended is dropped quietly. Raises `LeoError` for a tool that answers at
        once, `ValueError` for a negative or non-finite number."""
        io = self._need_claim("report progress")
        body: dict[str, Any] = {"client_id": io.client_id(), "progress": _number("progress", progress)}
        if total is not None:
            body["total"] = _number("total", total)
        if message is not None:
            body["message"] = str(message)[:MAX_PROGRESS_MESSAGE]
        self._advise(io.progress, body)

    def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Logs `data` (a string, or any JSON) at `level` (`debug`, `info`, `notice`,
        `warning`, `error`, `critical`, `alert`, `emergency`) for the agent's harness: MCP
        `notifications/message`, sent when it reaches the level the harness chose with
        `logging/setLevel` (every level until it chooses). `logger` names the part of the app
        that speaks. Like `progress`, it returns at once, messages and reports go in order, and
        one for a call that ended is dropped quietly. Raises `ValueError` for an unknown level,
        `LeoError` for a tool that answers at once."""
        io = self._need_claim("log")
        if level not in LOG_LEVELS:
            raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
        body: dict[str, Any] = {"client_id": io.client_id(), "level": level, "data": data}
        if logger is not None:
            body["logger"] = str(logger)
        self._advise(io.log, body)

    def _advise(self, post: Any, body: dict[str, Any]) -> None:
        """Queues a report or log message on the app's loop, from any thread."""
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        if self._on_loop():
            self._queue_progress(post, data)
        else:
            try:
                self._loop.call_soon_threadsafe(self._queue_progress, post, data)
            except RuntimeError:
                pass  # the app's loop has ended, and the call with it

    def _queue_progress(self, post: Any, data: bytes) -> None:
        """On the loop: each report waits for the one before it, so they arrive in order."""
        before = self._progress_tail

        async def send() -> None:
            if before is not None:
                await asyncio.wait([before])
            if not self.cancel_event.is_set():
                await post(self, data)

        self._progress_tail = self._loop.create_task(send())

    async def _flush_progress(self) -> None:
        """Waits (bounded) for the reports still on their way, before the reply is posted."""
        tail = self._progress_tail
        if tail is not None and not tail.done():
            await asyncio.wait([tail], timeout=PROGRESS_FLUSH)

    async def ask(self, message: str, requested_schema: dict[str, Any]) -> Answer:
        """Asks the agent's user through the harness (MCP elicitation, form mode) and waits for
        the answer. `requested_schema` is MCP's form subset: an object of string, number,
        integer and boolean properties. Raises `InputUnsupported` when the harness cannot ask
        (fall back to a default or the app's own window), `Cancelled` when the call ends
        first, `Refused` (`invalid_parameter`, with the path) for a schema outside the subset,
        and `LeoError` for a tool that answers at once."""
        io = self._need_claim("ask the user")
        body = json.dumps(
            {"client_id": io.client_id(), "message": str(message), "requested_schema": requested_schema},
            ensure_ascii=False, separators=(",", ":"),
        ).encode()
        if self._on_loop():
            return await io.ask(self, body)
        # Called from another event loop (a plain handler running its own): ask on the app's.
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(io.ask(self, body), self._loop))

    async def sample(self, params: dict[str, Any]) -> dict[str, Any]:
        """Asks the harness's model for a completion: `params` are MCP's
        `sampling/createMessage` params (`messages`, `maxTokens`, and any of `systemPrompt`,
        `modelPreferences`, …). Returns the harness's `CreateMessageResult` as a dict (`role`,
        `content`, `model`, `stopReason`). Raises `InputUnsupported` when the harness cannot
        sample, `Cancelled` when the call ends first, `Refused` (`invalid_parameter`, with the
        path) for params the broker or the harness's SDK cannot read, and `LeoError` for a tool
        that answers at once."""
        io = self._need_claim("sample")
        body = json.dumps({"client_id": io.client_id(), "params": params},
                          ensure_ascii=False, separators=(",", ":")).encode()
        if self._on_loop():
            return await io.sample(self, body)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(io.sample(self, body), self._loop))

    def sample_blocking(self, params: dict[str, Any]) -> dict[str, Any]:
        """`sample` for a plain (thread) handler: blocks until the harness answers."""
        self._need_claim("sample")
        if self._on_loop():
            raise LeoError("sample_blocking would block the app's event loop: use await call.sample(...)")
        return asyncio.run_coroutine_threadsafe(self.sample(params), self._loop).result()

    def ask_blocking(self, message: str, requested_schema: dict[str, Any]) -> Answer:
        """`ask` for a plain (thread) handler: blocks until the user answers or the call ends."""
        self._need_claim("ask the user")
        if self._on_loop():
            raise LeoError("ask_blocking would block the app's event loop: use await call.ask(...)")
        return asyncio.run_coroutine_threadsafe(self.ask(message, requested_schema), self._loop).result()

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


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of at least 0, not {value!r}")
    return value
