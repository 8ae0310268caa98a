"""A tool: its definition as the broker registers it, built from a typed function, and the way
a call's arguments reach that function.

Every parameter of the handler is a property of the input schema, typed by its hint, required
unless it has a default. A parameter annotated `Call` is not an argument: it receives the call
itself (agent, deadline, cancellation). With an explicit `schema=`, the handler takes only the
`Call` and reads `call.arguments`.

The output schema comes from the return hint when it names an object type (a TypedDict, a
dataclass or a pydantic model), so that a handler returning one answers with structured content
the broker checks; `output_schema=` gives one explicitly, `output_schema=False` declares none.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .call import Call
from .schema import _is_json, _is_pydantic, _is_typeddict, convert, schema_of

log = logging.getLogger("leo_app")

#: The MCP tool annotations the broker accepts, each a boolean.
ANNOTATIONS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass
class Tool:
    """One tool of an app (made by `App.tool`)."""

    name: str
    description: str
    handler: Callable[..., Any]
    group: str
    input_schema: dict[str, Any]
    timeout_s: int | None = None
    label: str | None = None
    answers_at_once: bool = False
    is_async: bool = False
    #: (name, hint) of each argument parameter; `None` when the handler takes the Call only.
    params: list[tuple[str, Any]] | None = field(default=None)
    #: The name of the parameter that receives the Call, if any.
    call_param: str | None = None
    #: The MCP tool's title (shown instead of `label`).
    title: str | None = None
    #: MCP tool hints: `readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`.
    annotations: dict[str, bool] | None = None
    #: The schema of the structured content the tool answers with.
    output_schema: dict[str, Any] | None = None
    #: `"sync"` or `"task"` (how a harness that runs MCP tasks runs the calls).
    execution: str | None = None
    #: Every call waits for a person's approval before the app sees it.
    needs_approval: bool = False

    def definition(self) -> dict[str, Any]:
        """The tool as `POST /api/v1/client-tools` wants it."""
        d: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }
        if self.timeout_s is not None:
            d["timeout_s"] = self.timeout_s
        if self.label is not None:
            d["label"] = self.label
        if self.title is not None:
            d["title"] = self.title
        if self.annotations is not None:
            d["annotations"] = self.annotations
        if self.output_schema is not None:
            d["output_schema"] = self.output_schema
        if self.execution is not None:
            d["execution"] = self.execution
        if self.needs_approval:
            d["approval"] = "required"
        return d

    def bind(self, call: Call) -> tuple[list[Any], dict[str, Any]]:
        """The handler's arguments for `call`."""
        if self.params is None:
            return [call], {}
        kwargs: dict[str, Any] = {}
        args = call.arguments
        for name, hint in self.params:
            if name in args:
                kwargs[name] = convert(args[name], hint)
        if self.call_param:
            kwargs[self.call_param] = call
        return [], kwargs


def make_tool(
    fn: Callable[..., Any],
    *,
    group: str,
    name: str | None,
    description: str | None,
    schema: dict[str, Any] | None,
    timeout_s: int | None,
    label: str | None,
    answers_at_once: bool,
    title: str | None = None,
    annotations: dict[str, bool] | None = None,
    output_schema: Any = None,
    execution: str | None = None,
    needs_approval: bool = False,
) -> Tool:
    name = name or fn.__name__
    doc = inspect.getdoc(fn) or ""
    description = description or doc.split("\n\n", 1)[0].strip()
    if not description:
        raise ValueError(f"tool {name!r} needs a description (a docstring or description=)")
    is_async = inspect.iscoroutinefunction(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    signature = inspect.signature(fn)
    call_param = None
    params: list[tuple[str, Any]] = []
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in signature.parameters.values():
        hint = hints.get(p.name, Any)
        if hint is Call:
            call_param = p.name
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args and **kwargs cannot be arguments")
        if schema is not None:
            raise TypeError(
                f"tool {name!r}: with schema= the handler takes only the Call "
                f"(read call.arguments), not {p.name!r}"
            )
        params.append((p.name, hint))
        try:
            prop = schema_of(hint)
        except TypeError as e:
            raise TypeError(f"tool {name!r}, parameter {p.name!r}: {e}") from None
        if p.default is p.empty:
            required.append(p.name)
        elif _is_json(p.default):
            prop = {**prop, "default": p.default}
        props[p.name] = prop
    explicit = schema is not None
    if schema is None:
        schema = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
    elif call_param is None:
        raise TypeError(f"tool {name!r}: with schema= the handler takes one parameter typed Call")
    _check_mcp_fields(name, annotations, execution)
    return Tool(
        name=name,
        description=description,
        handler=fn,
        group=group,
        input_schema=schema,
        timeout_s=timeout_s,
        label=label,
        answers_at_once=answers_at_once,
        is_async=is_async,
        params=None if explicit else params,
        call_param=call_param,
        title=title,
        annotations=dict(annotations) if annotations is not None else None,
        output_schema=_output_schema(name, output_schema, hints.get("return")),
        execution=execution,
        needs_approval=needs_approval,
    )


def _is_object_type(tp: Any) -> bool:
    return _is_pydantic(tp) or _is_typeddict(tp) or (
        isinstance(tp, type) and dataclasses.is_dataclass(tp)
    )


def _output_schema(name: str, given: Any, returns: Any) -> dict[str, Any] | None:
    """`output_schema=`: a dict as it is, an object type's schema, `False` for none; left out,
    the schema of the return hint when it is an object type."""
    if given is False:
        return None
    if isinstance(given, dict):
        return given
    tp = given if given is not None else returns
    if tp is None or not _is_object_type(tp):
        if given is not None:
            raise TypeError(
                f"tool {name!r}: output_schema must be a dict, a TypedDict, a dataclass or a "
                f"pydantic model, not {given!r}"
            )
        return None
    try:
        return schema_of(tp)
    except TypeError as e:
        if given is None:
            # A return hint that has no schema (a field of an unsupported type) only means the
            # tool declares none, as before output schemas existed.
            log.warning("tool %r declares no output schema: %s", name, e)
            return None
        raise TypeError(f"tool {name!r}, output schema: {e}") from None


def _check_mcp_fields(name: str, annotations: Any, execution: Any) -> None:
    if annotations is not None:
        if not isinstance(annotations, dict):
            raise TypeError(f"tool {name!r}: annotations must be a dict of booleans")
        for key, value in annotations.items():
            if key not in ANNOTATIONS:
                raise ValueError(
                    f"tool {name!r}: unknown annotation {key!r} (known: {', '.join(ANNOTATIONS)})"
                )
            if not isinstance(value, bool):
                raise TypeError(f"tool {name!r}: annotation {key!r} must be True or False")
    if execution not in (None, "sync", "task"):
        raise ValueError(f"tool {name!r}: execution must be \"sync\" or \"task\", not {execution!r}")
