"""An approver: a program (a phone app, a chat bot, a script) where a person decides the calls
that need approval (docs/approvals.md).

It holds the broker's plain event stream with a token the broker counts as an approver (the
operator's, or a device or API client named in `approvals.approvers`) and yields each call that
awaits a decision, whether it was asked before the stream opened (`GET /api/v1/approvals`,
read once the stream is open so that nothing falls between) or after
(`client_tool.approval_requested`). A dropped stream is opened again after a jittered, doubling
delay, and the list read again; a call is yielded once.

A decision names the call's id and digest, so it holds for that exact call: a digest that no
longer matches is `DigestMismatch` (`409 digest_mismatch`), a call someone else decided first,
or that ended, is `AlreadyDecided` (`409 already_decided`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import urllib.parse
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ._codes import FATAL
from ._http import Client, Stream
from ._sse import Parser
from ._where import Where
from .errors import ConnectError, FatalError, ProtocolError, Refused, typed_refusal

#: The event that announces a call awaiting approval.
APPROVAL_REQUESTED = "client_tool.approval_requested"
#: How many decided ids are remembered, so that a call listed again is not yielded twice.
SEEN = 4096


@dataclass
class ApprovalRequest:
    """A call that awaits a person's decision, as the broker shows it to approvers."""

    id: str
    agent: str
    session: str
    group: str
    tool: str
    #: The agent's arguments, as JSON values. Show them as text: an agent chose them.
    arguments: Any
    #: What a decision must name to hold for this very call.
    digest: str
    #: Whether `approve(arguments=...)` may change the arguments.
    editable: bool
    #: `"tool"` (the app requires it) or `"config"` (a rule of the operator's).
    required_by: str
    #: When the agent called (RFC 3339).
    requested_at: str
    #: When the call ends `approval_timeout` unless decided (RFC 3339).
    expires_at: str
    _approver: Approver | None = field(default=None, repr=False, compare=False)

    @staticmethod
    def of(body: dict[str, Any], approver: Approver | None = None) -> ApprovalRequest:
        try:
            return ApprovalRequest(
                id=body["id"], agent=body["agent"], session=body["session"],
                group=body["group"], tool=body["tool"], arguments=body["arguments"],
                digest=body["digest"], editable=bool(body["editable"]),
                required_by=body["required_by"], requested_at=body["requested_at"],
                expires_at=body["expires_at"], _approver=approver,
            )
        except (KeyError, TypeError) as e:
            raise ProtocolError(f"an approval request without {e}") from None

    async def approve(self, arguments: Any = None) -> bool:
        """Lets the call go on to its app; with `arguments`, the app gets those instead (only
        where the policy allows edits; the broker checks them against the tool's schema).
        Returns whether the arguments were edited."""
        return await self._bound().approve(self, arguments)

    async def deny(self, reason: str | None = None) -> None:
        """Ends the call; its agent gets the tool error `denied: <reason>`."""
        await self._bound().deny(self, reason)

    def _bound(self) -> Approver:
        if self._approver is None:
            raise ValueError("this request was not read by an Approver")
        return self._approver


class Approver:
    """Receives the calls that need approval and decides them.

    By default it connects to `$LEO_HOME/run/leo.sock` with the operator token; a phone app
    gives `url="https://box.lan:8370"` (and `ca_file=` for the broker's own CA) and its paired
    device's token (`token=`, `token_file=`, or `device="phone"` on the broker's host)::

        approver = Approver(url=URL, token=TOKEN)
        async for request in approver.requests():
            if request.tool == "deploy" and request.arguments.get("env") == "staging":
                await request.approve()
            else:
                await request.deny("only staging without a person")
    """

    def __init__(
        self,
        *,
        home: str | os.PathLike[str] | None = None,
        socket: str | os.PathLike[str] | None = None,
        url: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        device: str | None = None,
        backoff: tuple[float, float] = (0.1, 5.0),
    ):
        self._where = Where.of(home, socket, url, ca_file, token, token_file, device)
        self.backoff = backoff
        self._client: Client | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _http(self) -> Client:
        if self._client is None:
            self._client = self._where.client()
        return self._client

    async def pending(self) -> list[ApprovalRequest]:
        """The calls awaiting a decision now, oldest first."""
        data = (await self._http().get("/api/v1/approvals")).data()
        return [ApprovalRequest.of(body, self) for body in data["approvals"]]

    async def requests(self) -> AsyncIterator[ApprovalRequest]:
        """Each call that awaits a decision, once, as it is asked; runs until cancelled. A
        refused token (or a principal that is no approver) raises `FatalError`."""
        delay = self.backoff[0]
        while True:
            stream: Stream | None = None
            try:
                stream = await self._http().open_stream("/api/v1/events", None)
                for request in await self.pending():
                    if self._first(request.id):
                        yield request
                delay = self.backoff[0]
                parser = Parser()
                while data := await stream.read():
                    for frame in parser.push(data):
                        if frame.event != APPROVAL_REQUESTED:
                            continue
                        try:
                            body = json.loads(frame.payload)
                        except ValueError as e:
                            raise ProtocolError(f"an unreadable approval request: {e}") from None
                        request = ApprovalRequest.of(body, self)
                        if self._first(request.id):
                            yield request
            except Refused as r:
                if r.code in FATAL:
                    raise FatalError(f"the broker refused this approver: {r}") from None
            except (ConnectError, ProtocolError, asyncio.TimeoutError, OSError):
                pass
            finally:
                if stream is not None:
                    stream.close()
            # The stream ended or failed: a new connection after a jittered, doubling delay.
            self.close()
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self.backoff[1])

    def _first(self, request_id: str) -> bool:
        """True the first time `request_id` is seen (of the last `SEEN`)."""
        if request_id in self._seen:
            return False
        self._seen[request_id] = None
        if len(self._seen) > SEEN:
            self._seen.popitem(last=False)
        return True

    async def approve(self, request: ApprovalRequest, arguments: Any = None) -> bool:
        """`request.approve(arguments)`."""
        body: dict[str, Any] = {"digest": request.digest}
        if arguments is not None:
            body["arguments"] = arguments
        data = await self._decide(request.id, "approve", body)
        return bool(data.get("edited"))

    async def deny(self, request: ApprovalRequest, reason: str | None = None) -> None:
        """`request.deny(reason)`."""
        body: dict[str, Any] = {"digest": request.digest}
        if reason is not None:
            body["reason"] = reason
        await self._decide(request.id, "deny", body)

    async def _decide(self, request_id: str, what: str, body: dict[str, Any]) -> Any:
        path = f"/api/v1/approvals/{urllib.parse.quote(request_id, safe='')}/{what}"
        try:
            return (await self._http().post(path, json.dumps(body).encode())).data()
        except Refused as r:
            raise typed_refusal(r) from None
