"""Prompts, resources and resource templates an app offers besides tools.

A read (`prompts/get`, `resources/read`, `completion/complete`) is not a call: the broker asks
one app (`client_offer.request` names its `client_id`), the handler returns MCP's result
object as a dict, and the app posts it to `/api/v1/client-offers/requests/{id}/answer`. No
claim, no slot of `max_concurrent`, no history.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("leo_app")

#: A read's handler: given the `Read`, returns MCP's result object (a dict), or awaits it.
ReadHandler = Callable[["Read"], Any]


@dataclass
class Read:
    """What a read asks: its `kind` (`prompt`, `resource`, `complete`), the agent, and MCP's
    params of the method."""

    kind: str
    agent: str
    params: dict[str, Any]

    def argument(self, name: str) -> str | None:
        """A prompt's argument, for `prompts/get`."""
        value = (self.params.get("arguments") or {}).get(name)
        return value if isinstance(value, str) else None

    @property
    def uri(self) -> str | None:
        """The URI read, for `resources/read`."""
        value = self.params.get("uri")
        return value if isinstance(value, str) else None


class ReadError(Exception):
    """Raised by a read's handler: the agent gets `code: message` (`not_found` is the
    agent's mistake, JSON-RPC -32602; any other code -32603)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class Offer:
    """One prompt, resource or template: its definition as registered, and its handlers."""

    group: str
    kind: str  # "prompts", "resources" or "resource_templates"
    definition: dict[str, Any]
    read: ReadHandler
    complete: ReadHandler | None = None
    pattern: re.Pattern[str] | None = field(default=None, repr=False)

    def key(self) -> str:
        d = self.definition
        return str(d.get("name") if self.kind == "prompts" else d.get("uri", d.get("uri_template")))

    def answers(self, read: Read) -> ReadHandler | None:
        """This offer's handler of `read`, if `read` asks for it."""
        p = read.params
        if read.kind == "prompt" and self.kind == "prompts":
            return self.read if p.get("name") == self.definition["name"] else None
        if read.kind == "resource":
            return self.read if self.matches(str(p.get("uri", ""))) else None
        if read.kind == "complete":
            ref = p.get("ref") or {}
            named = ref.get("name") if self.kind == "prompts" else ref.get("uri")
            if named is not None and (named == self.key() or self.matches(str(named))):
                return self.complete or _no_completion
        return None

    def matches(self, uri: str) -> bool:
        if self.kind == "resources":
            return bool(uri == self.definition["uri"])
        return self.pattern is not None and self.pattern.fullmatch(uri) is not None


def template_pattern(template: str) -> re.Pattern[str]:
    """The URIs of a level-1 template: each `{var}` one or more characters but `/`."""
    parts = re.split(r"\{[A-Za-z0-9_]+\}", template)
    return re.compile("[^/]+".join(re.escape(p) for p in parts))


def _no_completion(read: Read) -> dict[str, Any]:
    return {"completion": {"values": [], "hasMore": False}}


def definitions(offers: list[Offer], group: str) -> dict[str, list[dict[str, Any]]]:
    """A group's `prompts`, `resources` and `resource_templates` for its registration."""
    out: dict[str, list[dict[str, Any]]] = {}
    for o in offers:
        if o.group == group:
            out.setdefault(o.kind, []).append(o.definition)
    return out


async def answer(offers: list[Offer], request: dict[str, Any], post: Callable[[str, bytes], Any],
                 client_id: str) -> None:
    """Runs the handler of one `client_offer.request` and posts its answer."""
    read = Read(str(request.get("kind")), str(request.get("agent")), request.get("params") or {})
    group = request.get("group")
    handler = next((h for o in offers if o.group == group and (h := o.answers(read))), None)
    body: dict[str, Any] = {"client_id": client_id}
    try:
        if handler is None:
            raise ReadError("not_found", "this app does not offer it")
        result = handler(read)
        if inspect.isawaitable(result):
            result = await result
        body["result"] = result
    except ReadError as e:
        body["error"] = {"code": e.code, "message": e.message}
    except Exception as e:  # the app's bug is the agent's error, not ours
        log.exception("the handler of a %s read failed", read.kind)
        body["error"] = {"code": "internal", "message": f"{type(e).__name__}: {e}"}
    path = f"/api/v1/client-offers/requests/{request.get('id')}/answer"
    try:
        await post(path, json.dumps(body, separators=(",", ":")).encode())
    except (OSError, asyncio.TimeoutError, ValueError) as e:
        log.debug("the answer to read %s was not taken: %s", request.get("id"), e)
