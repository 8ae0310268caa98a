"""JSON Schema from Python type hints, and arguments turned back into the hinted types.

A tool's `input_schema` is derived from its handler's signature, so the schema the agent sees
and the types the handler gets cannot drift apart. The broker accepts a strict keyword subset
that every harness understands (no `$ref`, `$defs`, tuple `items`…), so everything is inlined:
a dataclass, a TypedDict or a pydantic model becomes a nested object schema.

Supported hints: `str`, `int`, `float`, `bool`, `None`, `Any`, `list[T]`, `set[T]`,
`tuple[T, ...]`, `dict[str, T]`, `Optional[T]` / `T | None`, unions, `Literal[...]`, `Enum`
subclasses, `TypedDict`, dataclasses, pydantic models (when pydantic is installed), and
`Annotated[T, "a description"]`.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import types
import typing
from typing import Any, Literal, Union

_NoneType = type(None)
_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _is_pydantic(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_json_schema") and hasattr(tp, "model_validate")


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def _hints(tp: Any) -> dict[str, Any]:
    return typing.get_type_hints(tp, include_extras=True)


def schema_of(tp: Any, _stack: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of values of type `tp`."""
    if tp in _stack:
        raise TypeError(f"recursive type {getattr(tp, '__name__', tp)!r} cannot be inlined")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = dict(schema_of(args[0], _stack))
        for meta in args[1:]:
            if isinstance(meta, str):
                schema["description"] = meta
        return schema
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is _NoneType:
        return {"type": "null"}
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    if origin is Literal:
        values = [a.value if isinstance(a, enum.Enum) else a for a in args]
        kinds = {_PRIMITIVES.get(type(v)) for v in values}
        out: dict[str, Any] = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            out["type"] = kinds.pop()
        return out
    if origin is Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        return _union(args, _stack)
    if origin in (list, set, frozenset, typing.Sequence, list) or tp in (list, set):
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_of(args[0], _stack)
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0], _stack)}
        raise TypeError("fixed-length tuples are not supported; use list[T] or a dataclass")
    if origin in (dict, typing.Mapping) or tp is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            if args[0] is not str:
                raise TypeError("dict keys must be str")
            schema["additionalProperties"] = schema_of(args[1], _stack)
        return schema
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        schema = {"enum": values}
        kinds = {_PRIMITIVES.get(type(v)) for v in values}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if _is_pydantic(tp):
        return inline_refs(tp.model_json_schema())
    if _is_typeddict(tp):
        hints = _hints(tp)
        required = sorted(getattr(tp, "__required_keys__", set(hints) if tp.__total__ else set()))
        return _object(
            {name: schema_of(h, (*_stack, tp)) for name, h in hints.items()}, required, tp
        )
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        props: dict[str, Any] = {}
        required = []
        for f in dataclasses.fields(tp):
            props[f.name] = schema_of(hints[f.name], (*_stack, tp))
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            elif f.default is not dataclasses.MISSING and _is_json(f.default):
                props[f.name]["default"] = f.default
        return _object(props, required, tp)
    raise TypeError(f"no JSON Schema for type {tp!r}")


def _object(props: dict[str, Any], required: list[str], tp: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    doc = inspect.getdoc(tp)
    if doc and not doc.startswith(f"{tp.__name__}("):  # dataclasses get a generated docstring
        schema["description"] = doc
    return schema


def _union(args: tuple[Any, ...], stack: tuple[Any, ...]) -> dict[str, Any]:
    schemas = [schema_of(a, stack) for a in args]
    # `str | None` reads best as a type list; anything richer as anyOf.
    if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
        names = list(dict.fromkeys(s["type"] for s in schemas))
        return {"type": names[0] if len(names) == 1 else names}
    return {"anyOf": schemas}


def _is_json(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replaces every local `$ref` with the definition it names and drops `$defs`, so a
    schema made by another generator (pydantic) fits the broker's keyword subset. Keywords that
    are only hints to a validator (`discriminator`) are dropped."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(n, seen) for n in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name in seen:
                raise TypeError(f"recursive schema {name!r} cannot be inlined")
            if name not in defs:
                raise TypeError(f"unresolvable $ref {ref!r}")
            out.update(walk(defs[name], (*seen, name)))
        for key, value in node.items():
            if key in ("$ref", "$defs", "definitions", "discriminator"):
                continue
            if key in ("properties", "patternProperties"):
                out[key] = {k: walk(v, seen) for k, v in value.items()}
            elif key in ("const", "default", "enum", "examples"):
                out[key] = value
            else:
                out[key] = walk(value, seen)
        return out

    inlined: dict[str, Any] = walk(schema, ())
    return inlined


def convert(value: Any, tp: Any) -> Any:
    """`value` (JSON the broker checked against `schema_of(tp)`) as a `tp`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return convert(value, args[0])
    if value is None or tp is Any or tp is object:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if origin is Union or (sys.version_info >= (3, 10) and origin is types.UnionType):
        for arg in args:
            if arg is not _NoneType and _accepts(arg, value):
                return convert(value, arg)
        return value
    if origin in (list, typing.Sequence, list) and args:
        return [convert(v, args[0]) for v in value]
    if origin in (set, frozenset) and args:
        return origin(convert(v, args[0]) for v in value)
    if origin is tuple and args:
        return tuple(convert(v, args[0]) for v in value)
    if origin in (dict, typing.Mapping) and len(args) == 2:
        return {k: convert(v, args[1]) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if _is_pydantic(tp):
        return tp.model_validate(value)
    if _is_typeddict(tp):
        hints = _hints(tp)
        return {k: convert(v, hints[k]) if k in hints else v for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: convert(v, hints[k]) for k, v in value.items() if k in names})
    return value


def _accepts(tp: Any, value: Any) -> bool:
    """Whether JSON `value` can be a `tp` (to pick the arm of a union)."""
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp
    origin = typing.get_origin(tp) or tp
    if tp in _PRIMITIVES:
        if tp is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if tp is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, tp)
    if origin in (list, set, frozenset, tuple, typing.Sequence):
        return isinstance(value, list)
    if origin is Literal:
        return value in typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value in {m.value for m in tp}
    return isinstance(value, dict)
