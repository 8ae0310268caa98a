"""The app: its settings and tools, and the connection loop that serves them.

Order matters in a session. The event stream is opened first (its `hello` carries the
`client_id` every other route wants), with `Last-Event-ID` so that a short outage replays what
it missed. Then every group is registered again, because the broker withdrew them when the old
stream closed. Then `GET …/requests?pending=1` lists the calls that still wait: any unclaimed
one for our tools that this app has not seen is served like a fresh request, and one listed as
claimed by this very client (the answer to its claim was lost when the broker went away) is run
without claiming again. When the stream ends, the loop waits a jittered, doubling delay and
starts over.

A claim without a definite answer (no answer at all, a 5xx such as `503 store_unavailable`
while the broker's store is away) may or may not have been taken: after a short backoff the
session reads the pending list again and applies the same rule (re-armed with backoff while the
list cannot be read). A reply refused `503 store_unavailable` is posted again with the same
backoff until it gets a definite answer or the call ends.

Each provider stream's `hello` carries a resume key; the next stream is opened with it
(`&resume=KEY`) so that after a dropped stream or a broker restart the app is the same client
again, with its `client_id`, its claims and its ownership. Handlers that run while the broker
is away go on, and a reply the broker could not take then is posted again on the next session
(`already_settled` means the broker had it already). A key the broker refuses (`400
invalid_parameter`: expired, or the broker forgot it) is dropped and the stream opened without
it, as a new client; replies still waiting are then posted with their claim.

A call is claimed, handed to its handler, and the reply posted (two requests); a tool that
`answers_at_once` skips the claim and posts its reply with `"claim": true` (one request).
Progress reports and questions go out on the same session as the claim (only the claimant may
send them); a reply waits for the reports still on their way, so none arrives after it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import signal
import sys
import threading
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, overload

from ._aio import within
from ._calls import Calls, Control
from ._codes import FATAL, LOST_RACE, REGISTER_AGAIN, RESUME_REFUSED
from ._http import Client, Stream
from ._sse import FrameTooLarge, Parser
from ._where import Where
from .call import Answer, Call
from .errors import (
    Cancelled,
    ConnectError,
    FatalError,
    InputUnsupported,
    LeoError,
    ProtocolError,
    Refused,
    ToolError,
)
from .offers import Offer, ReadHandler, answer, definitions, template_pattern
from .reply import Reply, to_reply
from .tool import Tool, make_tool

log = logging.getLogger("leo_app")

#: A tool's handler, returned as it is by `App.tool`.
_Handler = TypeVar("_Handler", bound=Callable[..., Any])

#: The broker sends a keep-alive comment every 15 s; a stream silent for this long is dead.
STREAM_IDLE = 45.0
#: How long the broker has to send `hello`.
HELLO_TIMEOUT = 10.0
#: Added to the cancel grace for the replies still posted at shutdown.
SHUTDOWN_POST = 5.0
#: Bound on withdrawing the groups at a stop; the stream closes after it regardless.
WITHDRAW_TIMEOUT = 2.0
#: The refusal of a claim or result the broker could not record: its store is away for a while.
STORE_UNAVAILABLE = "store_unavailable"


def _agents_by_group(
    group: str, agents: list[str] | dict[str, list[str]] | None
) -> dict[str, list[str]]:
    """`App(agents=...)` as a map from group to its agents; the broker checks the patterns."""
    if agents is None:
        return {}
    by_group = {group: agents} if isinstance(agents, list) else dict(agents)
    for g, patterns in by_group.items():
        if not isinstance(patterns, list) or not patterns or not all(
            isinstance(p, str) for p in patterns
        ):
            raise ValueError(
                f"agents for group {g!r} must be a non-empty list of agent names or globs"
            )
    return by_group


class App:
    """An app that serves tools through the Leo broker.

    By default it connects to `$LEO_HOME/run/leo.sock` with the operator token
    (`state/operator.token`). `url="http://127.0.0.1:8370"` uses TCP, and
    `url="https://box.lan:8370"` TLS, trusting the system's roots plus `ca_file` (default: the
    file `LEO_CA_FILE` names), such as the `tls/ca.pem` of `leo tls init`; `device="phone"`
    presents a paired device's token (`state/devices/phone.token`); `token=` and `token_file=`
    take any other. Token files are read at every connection attempt.

    `agents=["rocket", "ci-*"]` offers the app's group only to those agents (exact names or
    `*`/`?` globs); `agents={"deploy": ["ci-*"]}` does it per group. Other agents neither see
    nor can call those tools. Left out, every agent gets them.
    """

    def __init__(
        self,
        group: str,
        *,
        name: str | None = None,
        home: str | os.PathLike[str] | None = None,
        socket: str | os.PathLike[str] | None = None,
        url: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        device: str | None = None,
        max_concurrent: int = 64,
        cancel_grace: float = 5.0,
        backoff: tuple[float, float] = (0.1, 5.0),
        agents: list[str] | dict[str, list[str]] | None = None,
    ):
        self.group = group
        #: The agents each group is offered to (absent: every agent).
        self.agents = _agents_by_group(group, agents)
        #: The app's name, sent to the broker with the event stream when set.
        self.name = name
        #: The broker and the token.
        self.where = Where.of(home, socket, url, ca_file, token, token_file, device)
        self.endpoint = self.where.endpoint
        self.max_concurrent = max(1, max_concurrent)
        self.cancel_grace = cancel_grace
        self.backoff = backoff
        self.tools: dict[str, Tool] = {}
        #: Prompts, resources and templates (`offers`), in the order given.
        self.offers: list[Offer] = []
        self._status = "stopped"
        self._client_id: str | None = None
        self._status_changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        #: The serving state while `serve` runs (its session, for `resource_updated`).
        self._serving: _Serving | None = None
        self._error: BaseException | None = None
        #: Set, on the loop's thread, by a stop request (a signal, `stop()`) before it cancels
        #: the serving task: the loops check it, so a request is never lost even if the
        #: cancellation were.
        self._stop_requested = False

    # -- tools ---------------------------------------------------------------------------

    @overload
    def tool(
        self,
        fn: _Handler,
        *,
        name: str | None = None,
        description: str | None = None,
        group: str | None = None,
        schema: dict[str, Any] | None = None,
        timeout_s: int | None = None,
        label: str | None = None,
        answers_at_once: bool = False,
        title: str | None = None,
        annotations: dict[str, bool] | None = None,
        output_schema: Any = None,
        execution: str | None = None,
        needs_approval: bool = False,
    ) -> _Handler: ...

    @overload
    def tool(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        group: str | None = None,
        schema: dict[str, Any] | None = None,
        timeout_s: int | None = None,
        label: str | None = None,
        answers_at_once: bool = False,
        title: str | None = None,
        annotations: dict[str, bool] | None = None,
        output_schema: Any = None,
        execution: str | None = None,
        needs_approval: bool = False,
    ) -> Callable[[_Handler], _Handler]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        group: str | None = None,
        schema: dict[str, Any] | None = None,
        timeout_s: int | None = None,
        label: str | None = None,
        answers_at_once: bool = False,
        title: str | None = None,
        annotations: dict[str, bool] | None = None,
        output_schema: Any = None,
        execution: str | None = None,
        needs_approval: bool = False,
    ) -> Any:
        """Declares a tool from a typed function (`@app.tool` or `@app.tool(...)`).

        The input schema comes from the parameters' type hints, the description from the
        docstring's first paragraph. `answers_at_once=True` is for quick tools that may safely
        run on more than one instance of the app: the handler runs as soon as the call arrives
        and its reply is posted with the claim in one request; a plain (non-async) handler of
        such a tool runs on the event loop's thread, so it must not block, and it cannot report
        progress nor ask the user (it has no claim).

        `title` and `annotations` (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
        `openWorldHint`: booleans) are shown to the agent's harness. `output_schema` is the
        schema of the tool's structured content: derived from the return hint when it is a
        TypedDict, a dataclass or a pydantic model, or given (a dict or such a type), or
        `False` for none; a handler of such a tool returning a value answers with structured
        content. `execution="task"` asks harnesses that run MCP tasks to run the calls as tasks.
        `needs_approval=True` registers the tool with `approval: "required"`: every call waits
        for a person's approval (see `Approver`) before this app sees it.
        """

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            t = make_tool(
                f, group=group or self.group, name=name, description=description,
                schema=schema, timeout_s=timeout_s, label=label,
                answers_at_once=answers_at_once, title=title, annotations=annotations,
                output_schema=output_schema, execution=execution,
                needs_approval=needs_approval,
            )
            if t.name.lower() in {n.lower() for n in self.tools}:
                raise ValueError(f"tool {t.name!r} is given twice (names are compared without case)")
            self.tools[t.name] = t
            return f

        return register(fn) if fn is not None else register

    # -- prompts and resources -------------------------------------------------------------

    def _offer(self, offer: Offer) -> None:
        if any(o.kind == offer.kind and o.key() == offer.key() for o in self.offers):
            raise ValueError(f"{offer.kind[:-1].replace('_', ' ')} {offer.key()!r} is given twice")
        self.offers.append(offer)

    def prompt(
        self, name: str, *, description: str | None = None, title: str | None = None,
        arguments: list[dict[str, Any]] | None = None, group: str | None = None,
        complete: ReadHandler | None = None,
    ) -> Callable[[ReadHandler], ReadHandler]:
        """Offers prompt `name`; the decorated function gets a `Read` and returns MCP's
        `GetPromptResult` as a dict (`{"messages": [...]}`). `arguments` are MCP's
        (`{"name", "description"?, "required"?}`); `complete` answers `completion/complete`
        for them (`{"completion": {"values": [...]}}`)."""
        definition: dict[str, Any] = {"name": name}
        for key, value in (("title", title), ("description", description), ("arguments", arguments)):
            if value is not None:
                definition[key] = value

        def register(f: ReadHandler) -> ReadHandler:
            self._offer(Offer(group or self.group, "prompts", definition, f, complete))
            return f
        return register

    def resource(
        self, uri: str, *, name: str, description: str | None = None,
        mime_type: str | None = None, group: str | None = None,
    ) -> Callable[[ReadHandler], ReadHandler]:
        """Offers the resource at `uri`; the decorated function returns MCP's
        `ReadResourceResult` as a dict (`{"contents": [{"uri", "text" or "blob", ...}]}`)."""
        definition: dict[str, Any] = {"uri": uri, "name": name}
        for key, value in (("description", description), ("mime_type", mime_type)):
            if value is not None:
                definition[key] = value

        def register(f: ReadHandler) -> ReadHandler:
            self._offer(Offer(group or self.group, "resources", definition, f))
            return f
        return register

    def resource_template(
        self, uri_template: str, *, name: str, description: str | None = None,
        mime_type: str | None = None, group: str | None = None,
        complete: ReadHandler | None = None,
    ) -> Callable[[ReadHandler], ReadHandler]:
        """Offers the resources whose URIs match `uri_template` (`test://items/{id}`: each
        `{var}` one or more characters but `/`), read by the decorated function."""
        definition: dict[str, Any] = {"uri_template": uri_template, "name": name}
        for key, value in (("description", description), ("mime_type", mime_type)):
            if value is not None:
                definition[key] = value

        def register(f: ReadHandler) -> ReadHandler:
            pattern = template_pattern(uri_template)
            offer = Offer(group or self.group, "resource_templates", definition, f, complete, pattern)
            self._offer(offer)
            return f
        return register

    def resource_updated(self, uri: str, timeout: float = 20.0) -> int:
        """Tells the agents offered `uri` (one of this app's resources, or a URI one of its
        templates matches) that it changed; those whose harness subscribed to it read it again.
        Returns how many agent sessions were told. From any thread but the app's own loop
        (there, `await app.resource_updated_async(uri)`)."""
        loop = self._loop
        if loop is None:
            raise LeoError("the app is not running")
        future = asyncio.run_coroutine_threadsafe(self.resource_updated_async(uri), loop)
        return future.result(timeout)

    async def resource_updated_async(self, uri: str) -> int:
        """`resource_updated`, on the app's loop."""
        serving = self._serving
        session = serving.session if serving is not None else None
        if session is None:
            raise LeoError("the app is not connected yet")
        body = json.dumps({"client_id": session.client_id, "uri": uri}).encode()
        data = (await session.client.post("/api/v1/client-offers/updated", body)).data()
        return int(data["sessions"])

    # -- status --------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """`connecting`, `serving`, `waiting` (to retry) or `stopped`."""
        return self._status

    @property
    def client_id(self) -> str | None:
        """The broker's id for the current stream, while serving."""
        return self._client_id

    def _set_status(self, status: str, client_id: str | None = None) -> None:
        with self._status_changed:
            self._status = status
            self._client_id = client_id
            self._status_changed.notify_all()

    def wait_status(self, status: str, timeout: float = 20.0, not_: bool = False) -> bool:
        """Blocks until the status is (or, with `not_`, is no longer) `status`."""
        with self._status_changed:
            return self._status_changed.wait_for(
                lambda: (self._status != status) if not_ else (self._status == status), timeout
            )

    def wait_serving(self, timeout: float = 20.0) -> str:
        """Blocks until the app serves; returns its client id. Raises the run's error if it
        ended."""
        with self._status_changed:
            self._status_changed.wait_for(
                lambda: self._status == "serving" or self._error is not None, timeout
            )
            if self._error is not None:
                raise self._error
            if self._status != "serving" or self._client_id is None:
                raise TimeoutError(f"the app is {self._status}, not serving")
            return self._client_id

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Serves until Ctrl-C or SIGTERM, or a fatal error (raised)."""
        async def main() -> None:
            task = asyncio.current_task()
            loop = asyncio.get_running_loop()
            assert task is not None
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, self._request_stop, task)
                except (NotImplementedError, RuntimeError):
                    pass
            try:
                await self.serve()
            except asyncio.CancelledError:
                pass

        asyncio.run(main())

    def start(self) -> App:
        """Serves in a background thread with its own event loop; `stop()` ends it."""
        if self._thread is not None:
            raise RuntimeError("the app is already running")
        ready = threading.Event()

        def thread() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._main = loop.create_task(self.serve())
            ready.set()
            try:
                loop.run_until_complete(self._main)
            except asyncio.CancelledError:
                pass
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                with self._status_changed:
                    self._error = e
                    self._status_changed.notify_all()
            finally:
                loop.close()

        self._error = None
        self._thread = threading.Thread(target=thread, name="leo-app", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stops a `start()`ed app: running handlers are asked to stop, and replies they give
        within the cancel grace are still posted; then the app withdraws its groups, so the
        calls still waiting for them end at once (`tool_withdrawn`), and closes its stream.
        Raises the run's fatal error, if any."""
        thread, loop, main = self._thread, self._loop, self._main
        if thread is None or loop is None or main is None:
            return
        try:
            loop.call_soon_threadsafe(self._request_stop, main)
        except RuntimeError:
            pass  # the loop already ended
        thread.join(timeout)
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _request_stop(self, task: asyncio.Task[Any]) -> None:
        """Asks the serving task to stop (on the loop's thread)."""
        self._stop_requested = True
        task.cancel()

    async def serve(self) -> None:
        """Serves until cancelled or a fatal error (`FatalError`, raised). Cancelled, it stops
        as `stop()` does."""
        if not self.tools and not self.offers:
            raise FatalError("an app needs at least one tool, prompt or resource")
        self._stop_requested = False
        session = _Serving(self, asyncio.get_running_loop())
        self._serving = session
        try:
            await session.run()
        finally:
            self._set_status("stopped")

class _Session:
    """One connected stream."""

    def __init__(self, client: Client, stream: Stream, client_id: str, seq: int):
        self.client = client
        self.stream = stream
        self.client_id = client_id
        self.hello_seq = seq
        cid = json.dumps(client_id)
        self.claim_body = f'{{"client_id":{cid}}}'.encode()
        self.ok_head = f'{{"client_id":{cid},"ok":true,'.encode()
        self.claim_ok_head = f'{{"client_id":{cid},"ok":true,"claim":true,'.encode()
        self.ok_prefix = self.ok_head + b'"content":'
        self.claim_ok_prefix = self.claim_ok_head + b'"content":'
        self.io = _CallIO(self)

    def result_body(self, reply: Reply, claim: bool) -> list[bytes]:
        if reply.app_error is None and reply.structured_bytes is not None:
            parts = [self.claim_ok_head if claim else self.ok_head, b'"structured_content":',
                     reply.structured_bytes]
            if reply.content_bytes is not None:
                parts += [b',"content":', reply.content_bytes]
            return [*parts, b"}"]
        if reply.app_error is None:
            prefix = self.claim_ok_prefix if claim else self.ok_prefix
            return [prefix, reply.content_bytes or b"[]", b"}"]
        body: dict[str, Any] = {"client_id": self.client_id, "ok": False}
        if claim:
            body["claim"] = True
        body["error"] = {"code": reply.app_error[0], "message": reply.app_error[1]}
        return [json.dumps(body, separators=(",", ":")).encode()]


class _Serving:
    """The state that outlives sessions: the book of calls, the last event id, the backoff."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop):
        self.app = app
        self.loop = loop
        self.calls = Calls(app.max_concurrent)
        self.last_event_id: int | None = None
        self.session: _Session | None = None
        #: The key from the last `hello`: the next stream is the same client again.
        self.resume: str | None = None
        #: Counts the sessions served; a reply the broker could not take waits for the next.
        self.generation = 0
        self.new_session = asyncio.Event()
        #: Set at shutdown: replies waiting for a session give up.
        self.stopping = False
        #: The session whose stream was open when the app was stopped: its groups are
        #: withdrawn before it closes.
        self.stopped_in: _Session | None = None
        #: Live calls by id, with their claimant, as the broker listed them at the last connect.
        self.live: dict[str, str | None] = {}
        #: The pending list read at the last connect, served once the session starts.
        self.listed: list[dict[str, Any]] = []
        self.tasks: dict[str, asyncio.Task[None]] = {}
        #: Reads of prompts and resources being answered.
        self.reads: set[asyncio.Future[None]] = set()
        #: The pending list read again after a claim without a definite answer, and the delay
        #: before the next such read (doubling while claims keep failing, reset by one taken).
        self.rechecking: asyncio.Task[None] | None = None
        #: Counts the claims without a definite answer: one met during a read asks for another.
        self.unsettled = 0
        self.recheck_step = max(app.backoff[0], 0.001)
        self.pool = ThreadPoolExecutor(max_workers=app.max_concurrent, thread_name_prefix="leo-tool")
        path = "/api/v1/events?client_tools=1"
        if app.name is not None:
            path += "&name=" + urllib.parse.quote(app.name, safe="")
        self.events_path = path

    async def run(self) -> None:
        first, cap = self.app.backoff
        step = max(first, 0.001)
        last_error = ""
        try:
            while True:
                self.check_stop()
                self.app._set_status("connecting")
                try:
                    session = await self.open()
                except FatalError:
                    raise
                except (LeoError, OSError, asyncio.TimeoutError) as e:
                    error = _describe(e)
                else:
                    step = max(first, 0.001)
                    last_error = ""
                    error = await self.serve_session(session)
                    self.calls.session_lost()
                if error != last_error:
                    log.warning("not connected to the broker (%s); retrying", error)
                    last_error = error
                self.check_stop()
                self.app._set_status("waiting")
                await asyncio.sleep(random.uniform(step / 2, step))
                step = min(step * 2, cap)
        except asyncio.CancelledError:
            await self.drain()
            if self.stopped_in is not None:
                await self.withdraw(self.stopped_in)
            raise
        finally:
            if self.session is not None:
                self.session.stream.close()
                self.session.client.close()
            self.pool.shutdown(wait=False)

    def check_stop(self) -> None:
        """Raises `CancelledError` once a stop was asked for, whatever became of its
        cancellation."""
        if self.app._stop_requested:
            raise asyncio.CancelledError()

    async def open(self) -> _Session:
        if self.session is not None:
            # The old session's calls ended with its stream; its idle connections go too.
            self.session.client.close()
        client = self.app.where.client()
        try:
            stream = await self.open_stream(client)
        except Refused as e:
            if e.code in FATAL:
                raise FatalError(f"the broker refused the app: {e}") from None
            raise
        parser = Parser()
        try:
            hello = await within(_next_frame(stream, parser), HELLO_TIMEOUT)
            if hello is None or hello.event != "hello":
                raise ProtocolError("the first event is not hello")
            data = json.loads(hello.payload)
            session = _Session(client, stream, data["client_id"], int(data.get("seq", 0)))
            self.resume = data.get("resume")
            if self.last_event_id is not None and self.last_event_id > session.hello_seq:
                # A restarted broker counts from zero again.
                self.last_event_id = session.hello_seq
            for group, tools in self.groups().items():
                await self.register(session, group, tools)
            pending = (await client.get("/api/v1/client-tools/requests?pending=1")).data()
        except BaseException:
            stream.close()
            client.close()
            raise
        self.parser = parser
        self.live = {p["id"]: p.get("claimed_by") for p in pending if "id" in p}
        self.listed = pending
        return session

    async def open_stream(self, client: Client) -> Stream:
        """Opens the stream with the resume key, or without it when the broker refuses it."""
        if self.resume is not None:
            path = f"{self.events_path}&resume={urllib.parse.quote(self.resume, safe='')}"
            try:
                return await client.open_stream(path, self.last_event_id)
            except Refused as e:
                if e.code != RESUME_REFUSED:
                    raise  # 409 already_claimed: the broker has not seen the old stream go yet
                log.info("the broker refused the resume key (%s); connecting as a new client", e)
                self.resume = None
        return await client.open_stream(self.events_path, self.last_event_id)

    def groups(self) -> dict[str, list[Tool]]:
        groups: dict[str, list[Tool]] = {}
        for t in self.app.tools.values():
            groups.setdefault(t.group, []).append(t)
        for o in self.app.offers:
            groups.setdefault(o.group, [])
        return groups

    async def register(self, session: _Session, group: str, tools: list[Tool]) -> None:
        registration: dict[str, Any] = {
            "client_id": session.client_id, "group": group,
            "tools": [t.definition() for t in tools],
            **definitions(self.app.offers, group),
        }
        if group in self.app.agents:
            registration["agents"] = self.app.agents[group]
        body = json.dumps(registration, separators=(",", ":")).encode()
        try:
            (await session.client.post("/api/v1/client-tools", body)).data()
        except Refused as e:
            if e.code in REGISTER_AGAIN:
                raise  # the stream closed since hello, or the store is away: reconnect
            raise FatalError(f"cannot register group {group!r}: {e}") from None
        log.debug("registered group %s", group)

    def announcement(self) -> str:
        """The one line said on stderr once the tools are first served, as `leo serve-tool`
        says it: which app, which tools by group, and where."""
        name = f"app {json.dumps(self.app.name)}" if self.app.name else "an unnamed app (name= names it)"
        groups = "; ".join(
            f"{', '.join(t.name for t in tools)} (group {group})"
            for group, tools in self.groups().items()
        )
        return f"leo_app: {name} serving {groups} on {self.app.endpoint}"

    def serves(self, request: dict[str, Any]) -> bool:
        t = self.app.tools.get(request.get("tool", ""))
        return t is not None and t.group == request.get("group")

    async def serve_session(self, session: _Session) -> str:
        """Serves until the stream ends; returns why it ended."""
        resumed = self.session is not None and self.session.client_id == session.client_id
        self.session = session
        self.calls.stale(self.live, session.client_id)
        self.generation += 1
        woken, self.new_session = self.new_session, asyncio.Event()
        woken.set()
        self.app._set_status("serving", session.client_id)
        log.debug("serving as %s on %s (resumed: %s)", session.client_id, self.app.endpoint, resumed)
        if self.generation == 1:
            print(self.announcement(), file=sys.stderr, flush=True)
        listed, self.listed = self.listed, []
        self.offer_listed(listed, session.client_id)
        self.start()
        self.handle(getattr(self.parser, "held", []))
        try:
            while True:
                try:
                    data = await within(session.stream.read(), STREAM_IDLE)
                except asyncio.TimeoutError:
                    return f"no event or keep-alive for {STREAM_IDLE:.0f} s"
                except (OSError, asyncio.IncompleteReadError, LeoError) as e:
                    return _describe(e)
                self.check_stop()
                if not data:
                    return "the broker closed the event stream"
                try:
                    frames = self.parser.push(data)
                except FrameTooLarge:
                    return "an event is larger than 8 MiB"
                self.handle(frames)
        except asyncio.CancelledError:
            # A stop: `run` drains the calls and withdraws the groups on it, then closes it.
            self.stopped_in = session
            raise
        finally:
            if self.stopped_in is not session:
                session.stream.close()

    def handle(self, frames: list[Any]) -> None:
        for frame in frames:
            if frame.id is not None:
                self.last_event_id = frame.id
            if frame.event == "client_tool.request":
                self.on_request(frame.payload)
            elif frame.event == "client_tool.cancelled":
                self.on_cancelled(frame.payload)
            elif frame.event == "client_offer.request":
                self.on_read(frame.payload)

    def on_read(self, payload: bytes) -> None:
        """A read of a prompt or resource: answered in a task of its own if asked of us."""
        session = self.session
        try:
            request = json.loads(payload)
        except ValueError as e:
            log.warning("skipping an event: %s", e)
            return
        if session is None or request.get("client_id") != session.client_id:
            return
        task = asyncio.ensure_future(
            answer(self.app.offers, request, session.client.post, session.client_id))
        self.reads.add(task)
        task.add_done_callback(self.reads.discard)

    def on_request(self, payload: bytes) -> None:
        try:
            request = json.loads(payload)
        except ValueError as e:
            log.warning("skipping an event: %s", e)
            return
        if self.serves(request) and self.calls.offer(request):
            self.start()

    def on_cancelled(self, payload: bytes) -> None:
        try:
            rid = json.loads(payload)["id"]
        except (ValueError, KeyError, TypeError) as e:
            log.warning("skipping an event: %s", e)
            return
        log.debug("request %s cancelled", rid)
        self.calls.cancelled(rid)
        self.start()

    def offer_listed(self, pending: list[dict[str, Any]], client_id: str) -> None:
        """The rule for the pending list, after a reconnect or a claim without a definite
        answer: parked for our tools and not run here, offered again (claimed anew); claimed by
        this very client, run without claiming again."""
        before = len(self.calls.queue)
        self.calls.offer_listed(pending, client_id, self.serves)
        if len(self.calls.queue) > before:
            log.info("serving %d requests that waited for us", len(self.calls.queue) - before)

    def claim_unsettled(self, rid: str) -> None:
        """The claim of `rid` got no definite answer: it is forgotten, and the pending list read
        again after a backoff says what became of it."""
        self.calls.forget(rid)
        self.unsettled += 1
        if self.rechecking is None or self.rechecking.done():
            self.rechecking = self.loop.create_task(self.recheck())

    async def recheck(self) -> None:
        """Reads the pending list again after a backoff, and offers what it lists for us (see
        `offer_listed`); re-armed with a doubling backoff while the list cannot be read.
        Between sessions it ends: the next connect reads the list."""
        cap = self.app.backoff[1]
        while True:
            step = self.recheck_step
            self.recheck_step = min(step * 2, cap)
            await self.pause(random.uniform(step / 2, step))
            s = self.session
            if self.stopping or s is None:
                return
            unsettled = self.unsettled
            try:
                answer = await s.client.get("/api/v1/client-tools/requests?pending=1")
                pending = answer.data()
            except (LeoError, OSError, asyncio.TimeoutError) as e:
                log.info("cannot read the pending requests again (%s); retrying", _describe(e))
                continue
            if self.stopping or not isinstance(pending, list):
                return
            self.offer_listed(pending, s.client_id)
            self.start()
            if self.unsettled == unsettled:
                return

    async def pause(self, delay: float) -> None:
        """Sleeps `delay`, or less when a new session starts or the app stops."""
        try:
            await within(self.new_session.wait(), delay)
        except asyncio.TimeoutError:
            pass

    def start(self) -> None:
        """Starts every waiting request a free slot allows."""
        session = self.session
        while session is not None:
            nxt = self.calls.next_to_start()
            if nxt is None:
                return
            request, control, claimed = nxt
            tool = self.app.tools[request["tool"]]
            task = self.loop.create_task(self.work(session, tool, request, control, claimed))
            self.tasks[request["id"]] = task

    def finished(self, rid: str) -> None:
        self.calls.finished(rid)
        self.tasks.pop(rid, None)
        self.start()

    async def work(
        self, s: _Session, tool: Tool, request: dict[str, Any], control: Control, claimed: bool
    ) -> None:
        """Claims the call (unless the tool answers at once, or this client holds the claim
        already), runs the handler, posts the reply."""
        rid = request["id"]
        call = Call(request, self.loop, s.io, tool.answers_at_once)
        timer: asyncio.TimerHandle | None = None

        def on_cancel(reason: str) -> None:
            nonlocal timer
            call._cancel(reason)
            task = self.tasks.get(rid)
            if task is not None and timer is None:
                timer = self.loop.call_later(self.app.cancel_grace, task.cancel)

        control.on_cancel = on_cancel
        try:
            if not tool.answers_at_once and not claimed:
                taken = await self.claim(s, rid)
                if taken is None:
                    # No definite answer: the pending list, read again, tells (parked: offered
                    # again; claimed by this client: run without claiming).
                    self.claim_unsettled(rid)
                if not taken:
                    return
                self.recheck_step = max(self.app.backoff[0], 0.001)
            if control.ended:
                return
            reply = await self.run_handler(tool, call)
            if call._progress_tail is not None:
                await call._flush_progress()
            if control.ended:
                log.debug("request %s ended at the broker; its reply is dropped", rid)
                return
            await self.post(s, rid, reply, tool.answers_at_once, control)
        except asyncio.CancelledError:
            log.debug("request %s: the handler did not return within the cancel grace", rid)
        finally:
            if timer is not None:
                timer.cancel()
            self.finished(rid)

    async def run_handler(self, tool: Tool, call: Call) -> Reply:
        try:
            args, kwargs = tool.bind(call)
        except Exception as e:  # noqa: BLE001 - the agent is told
            return Reply.error("invalid_arguments", str(e))
        try:
            if tool.is_async:
                value = await tool.handler(*args, **kwargs)
            elif tool.answers_at_once:
                value = tool.handler(*args, **kwargs)
            else:
                value = await self.loop.run_in_executor(
                    self.pool, functools.partial(tool.handler, *args, **kwargs)
                )
            return to_reply(value, tool.output_schema is not None)
        except ToolError as e:
            return Reply.error(e.code, e.message)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("the handler of %s raised", tool.name)
            return Reply.error("internal", f"the tool's handler raised {type(e).__name__}: {e}")

    async def claim(self, s: _Session, rid: str) -> bool | None:
        """Whether the claim was taken; `None` without a definite answer (the connection broke,
        the broker does not know this client yet, or its store is away: `503
        store_unavailable`)."""
        try:
            answer = await s.client.post(
                f"/api/v1/client-tools/requests/{rid}/claim", s.claim_body
            )
        except (LeoError, OSError, asyncio.TimeoutError) as e:
            log.warning("claim of %s failed: %s", rid, _describe(e))
            return None
        if answer.status == 200:
            return True
        refusal = answer.refusal()
        if isinstance(refusal, Refused) and refusal.code in LOST_RACE:
            log.debug("request %s not claimed: %s", rid, refusal)
            return False
        log.warning("claim of %s failed: %s", rid, refusal)
        return None

    async def post(
        self, s: _Session, rid: str, reply: Reply, claim: bool, control: Control
    ) -> None:
        """Posts the reply; one the broker refuses becomes an app error with its message. One
        the broker could not take (it is down, or this client's stream is gone) is posted again
        on the next session, and one it could not record (`503 store_unavailable`) again after
        a backoff, until the call ends."""
        path = f"/api/v1/client-tools/requests/{rid}/result"
        claimant = s.client_id
        replaced = False
        first, cap = self.app.backoff
        step = max(first, 0.001)
        while True:
            generation = self.generation
            try:
                answer = await s.client.post(path, s.result_body(reply, claim))
                refusal = None if answer.status == 200 else answer.refusal()
            except (LeoError, OSError, asyncio.TimeoutError) as e:
                refusal = ConnectError(_describe(e))
            if refusal is None:
                return
            code = refusal.code if isinstance(refusal, Refused) else None
            if isinstance(refusal, Refused) and code in (
                "invalid_result", "result_too_large"
            ) and not replaced:
                log.warning(
                    "the broker refused the reply to %s (%s); answering with an error", rid, refusal
                )
                reply = Reply.error(refusal.code, refusal.message)
                replaced = True
                continue
            if code in LOST_RACE:
                log.debug("request %s ended before its reply (%s)", rid, refusal)
                return
            if code == STORE_UNAVAILABLE:
                log.info("the result of %s waits for the broker's store (%s)", rid, refusal)
                await self.pause(random.uniform(step / 2, step))
                step = min(step * 2, cap)
                if self.stopping or control.ended:
                    log.debug("request %s ended while the broker's store was away", rid)
                    return
                if self.session is not None and self.session is not s:
                    s = self.session
                    claim = claim or s.client_id != claimant
                continue
            if not isinstance(refusal, ConnectError) and code != "unknown_client":
                log.warning("cannot post the result of %s: %s", rid, refusal)
                return
            log.info("the result of %s waits for the broker (%s)", rid, refusal)
            nxt = await self.session_after(generation)
            if nxt is None or control.ended:
                log.debug("request %s ended while the broker was away", rid)
                return
            s = nxt
            # A new client (the broker refused the key) takes the claim with the result.
            claim = claim or s.client_id != claimant

    async def session_after(self, generation: int) -> _Session | None:
        """The first session served after `generation`; `None` once the app stops."""
        while not self.stopping and (self.generation <= generation or self.session is None):
            await self.new_session.wait()
        return None if self.stopping else self.session

    async def drain(self) -> None:
        """At shutdown: asks every handler to stop and waits for them (bounded)."""
        self.calls.shutdown()
        self.stopping = True
        self.new_session.set()
        if self.rechecking is not None:
            self.rechecking.cancel()
        tasks = list(self.tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.app.cancel_grace + SHUTDOWN_POST)
        for task in pending:
            task.cancel()

    async def withdraw(self, session: _Session) -> None:
        """At a deliberate stop, once the handlers are done: withdraws every group (registers
        it with no tools) while the stream is still open, so the broker ends the calls still
        parked for them at once (`tool_withdrawn`) instead of keeping them for the resume
        grace, as it does for a stream that merely dropped. Best effort, within
        `WITHDRAW_TIMEOUT`: a failure is logged and the stream closes anyway."""

        async def every_group() -> None:
            for group in self.groups():
                body = json.dumps(
                    {"client_id": session.client_id, "group": group, "tools": []},
                    separators=(",", ":"),
                ).encode()
                (await session.client.post("/api/v1/client-tools", body)).data()
                log.debug("withdrew group %s", group)

        try:
            await within(every_group(), WITHDRAW_TIMEOUT)
        except (LeoError, OSError, asyncio.TimeoutError) as e:
            log.debug("cannot withdraw the groups: %s", _describe(e))


class _CallIO:
    """A call's progress reports and questions, on the session that claimed it."""

    __slots__ = ("session",)

    def __init__(self, session: _Session):
        self.session = session

    def client_id(self) -> str:
        return self.session.client_id

    async def progress(self, call: Call, body: bytes) -> None:
        await self._advise(call, "progress", body)

    async def log(self, call: Call, body: bytes) -> None:
        await self._advise(call, "log", body)

    async def _advise(self, call: Call, route: str, body: bytes) -> None:
        """Posts one report or log message; never raises (it is advice, and the call may have
        ended)."""
        path = f"/api/v1/client-tools/requests/{call.id}/{route}"
        try:
            answer = await self.session.client.post(path, body)
        except (LeoError, OSError, asyncio.TimeoutError) as e:
            log.debug("%s of %s not sent: %s", route, call.id, _describe(e))
            return
        if answer.status != 200:
            refusal = answer.refusal()
            if getattr(refusal, "code", None) in LOST_RACE:
                log.debug("%s of %s dropped: the call ended (%s)", route, call.id, refusal)
            else:
                log.warning("the broker refused %s of %s: %s", route, call.id, refusal)

    async def ask(self, call: Call, body: bytes) -> Answer:
        """Posts the question and waits for the user (the broker bounds it by the call)."""
        data = await self._wait(call, "input", body)
        try:
            return Answer(str(data["action"]), data.get("content"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ProtocolError(f"the answer to a question: {e}") from None

    async def sample(self, call: Call, body: bytes) -> dict[str, Any]:
        """Posts the sampling request and waits for the harness (bounded by the call)."""
        data = await self._wait(call, "sample", body)
        if not isinstance(data, dict):
            raise ProtocolError("the answer to a sampling request is not an object")
        return data

    async def _wait(self, call: Call, route: str, body: bytes) -> Any:
        """Posts a request for the harness and returns the answer's data."""
        path = f"/api/v1/client-tools/requests/{call.id}/{route}"
        answer = await self.session.client.post(path, body, timeout=None)
        if answer.status == 200:
            return answer.data()
        refusal = answer.refusal()
        if not isinstance(refusal, Refused):
            raise refusal
        if refusal.code == "input_unsupported":
            raise InputUnsupported(refusal.code, refusal.message, refusal.status)
        if refusal.code in LOST_RACE or refusal.code == "timeout":
            raise Cancelled(f"the call ended before the harness answered ({refusal})")
        raise refusal


async def _next_frame(stream: Stream, parser: Parser) -> Any:
    while True:
        data = await stream.read()
        if not data:
            return None
        frames = parser.push(data)
        if frames:
            # Only `hello` can come first; anything after it in the same read is kept.
            first, rest = frames[0], frames[1:]
            parser.held = rest  # type: ignore[attr-defined]
            return first


def _describe(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__
