"""What a handler answers: MCP content blocks for the agent, structured content, or the app's
own error.

Content is serialized once, when the `Reply` is made, and posted as those bytes between a
prefix and a `}` prepared once per session, so a large image is encoded a single time.

The broker passes content blocks to the agent verbatim and checks their shape only: `text`;
`image` and `audio` with base64 `data` and `mimeType`; `resource_link` with `uri` and `name`;
`resource` with `uri` and `text` or `blob`. Structured content (`Reply.structured`) is a JSON
object the harness receives as `structuredContent`; the broker checks it against the tool's
`output_schema`, and `leo-mcp` adds a text block of the same JSON when the reply has no
content, for clients that read only `content`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterable
from typing import Any

#: An app error message is cut to this many characters.
MAX_ERROR_MESSAGE = 4096

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class Reply:
    """A handler's answer. Make one with the class methods."""

    __slots__ = ("app_error", "content_bytes", "structured_bytes")

    def __init__(
        self, content: bytes | None = None, error: tuple[str, str] | None = None,
        structured: bytes | None = None,
    ):
        #: The content blocks as one serialized JSON array, for a content reply.
        self.content_bytes = content
        #: `(code, message)` for an error reply.
        self.app_error = error
        #: The structured content as one serialized JSON object, for a structured reply.
        self.structured_bytes = structured

    @property
    def is_error(self) -> bool:
        return self.app_error is not None

    @classmethod
    def text(cls, text: str) -> Reply:
        """One text block."""
        return cls(_dumps([{"type": "text", "text": str(text)}]).encode())

    @classmethod
    def json(cls, value: Any) -> Reply:
        """One text block holding `value` as JSON (MCP has no JSON block; agents read text)."""
        try:
            return cls.text(_dumps(value))
        except (TypeError, ValueError) as e:
            return cls.error("internal", f"cannot encode the result: {e}")

    @classmethod
    def image(cls, data: bytes, mime_type: str) -> Reply:
        """One image block from raw image bytes (base64-encoded here)."""
        return cls.content([image(data, mime_type)])

    @classmethod
    def audio(cls, data: bytes, mime_type: str) -> Reply:
        """One audio block from raw audio bytes."""
        return cls.content([audio(data, mime_type)])

    @classmethod
    def content(cls, blocks: Iterable[dict[str, Any]]) -> Reply:
        """Any MCP content blocks (see `text`, `image`, `resource`, … in this module)."""
        try:
            return cls(_dumps(list(blocks)).encode())
        except (TypeError, ValueError) as e:
            return cls.error("internal", f"cannot encode the result: {e}")

    @classmethod
    def structured(cls, value: Any, content: Iterable[dict[str, Any]] | None = None) -> Reply:
        """Structured content: `value` is a JSON object (a dict, a dataclass, a TypedDict or a
        pydantic model), posted as `structured_content` and checked by the broker against the
        tool's `output_schema`; `content` adds content blocks (left out, `leo-mcp` gives the
        harness one text block of the same JSON)."""
        value = _plain(value)
        if not isinstance(value, dict):
            return cls.error(
                "internal", f"structured content must be a JSON object, not {type(value).__name__}"
            )
        try:
            blocks = None if content is None else _dumps(list(content)).encode()
            return cls(blocks, structured=_dumps(value).encode())
        except (TypeError, ValueError) as e:
            return cls.error("internal", f"cannot encode the result: {e}")

    @classmethod
    def raw_content(cls, data: bytes) -> Reply:
        """Content serialized ahead of time: `data` must be a JSON array of content blocks. It
        is posted byte for byte; a malformed one ends the call with the broker's
        `invalid_result` message."""
        return cls(bytes(data))

    @classmethod
    def error(cls, code: str, message: str) -> Reply:
        """The app's own error; the agent sees `"<code>: <message>"`."""
        return cls(error=(str(code), str(message)[:MAX_ERROR_MESSAGE]))

    def __repr__(self) -> str:
        if self.app_error:
            return f"Reply.error({self.app_error[0]!r}, {self.app_error[1]!r})"
        if self.structured_bytes is not None:
            return f"Reply.structured({self.structured_bytes[:80]!r})"
        return f"Reply({(self.content_bytes or b'')[:80]!r})"


def text(text: str, **extra: Any) -> dict[str, Any]:
    """`{"type": "text", "text": …}`; `extra` adds fields such as `annotations`."""
    return {"type": "text", "text": text, **extra}


def image(data: bytes, mime_type: str, **extra: Any) -> dict[str, Any]:
    """`{"type": "image", "data": <base64>, "mimeType": …}` from raw bytes."""
    return {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": mime_type, **extra}


def audio(data: bytes, mime_type: str, **extra: Any) -> dict[str, Any]:
    """`{"type": "audio", "data": <base64>, "mimeType": …}` from raw bytes."""
    return {"type": "audio", "data": base64.b64encode(data).decode(), "mimeType": mime_type, **extra}


def resource_link(uri: str, name: str, **extra: Any) -> dict[str, Any]:
    """`{"type": "resource_link", "uri": …, "name": …}`."""
    return {"type": "resource_link", "uri": uri, "name": name, **extra}


def resource(
    uri: str, *, text: str | None = None, blob: bytes | None = None, mime_type: str | None = None
) -> dict[str, Any]:
    """An embedded resource with `text` or a binary `blob`."""
    if (text is None) == (blob is None):
        raise ValueError("a resource needs text or blob, not both")
    res: dict[str, Any] = {"uri": uri}
    if text is not None:
        res["text"] = text
    else:
        res["blob"] = base64.b64encode(blob or b"").decode()
    if mime_type:
        res["mimeType"] = mime_type
    return {"type": "resource", "resource": res}


def _plain(value: Any) -> Any:
    """A dataclass or a pydantic model as JSON-ready data; anything else as it is."""
    if hasattr(value, "model_dump") and hasattr(value, "model_dump_json"):  # a pydantic model
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def to_reply(value: Any, structured: bool = False) -> Reply:
    """What a handler returned, as a reply: a `Reply` as it is, a `str` as text, `None` as no
    content, a dataclass or a pydantic model as its JSON, anything else as JSON text. For a
    tool with an output schema (`structured`), any other value is structured content. To
    answer with content blocks, return `Reply.content([...])`."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply.text(value)
    if value is None:
        return Reply(b"[]")
    if structured:
        return Reply.structured(value)
    if hasattr(value, "model_dump_json"):  # a pydantic model
        return Reply.text(value.model_dump_json())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return Reply.json(dataclasses.asdict(value))
    return Reply.json(value)
