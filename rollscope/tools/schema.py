"""OpenAI function schemas from typed Python functions, and argument checks against a schema.

The schema is what the model is shown, so a function that cannot be described fully (no
docstring, an unannotated or undocumented parameter, a type JSON Schema cannot express) is
refused at registration with a message naming what is missing.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

from verl.tools.schemas import OpenAIFunctionToolSchema

from rollscope._tool_entries import docstring_problem, parse_docstring

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_CONTAINERS: dict[Any, str] = {list: "array", tuple: "array", set: "array", dict: "object"}


class ToolDefinitionError(ValueError):
    """A function or config entry that cannot become a tool; the message says what is missing."""


def _json_type(tp: Any, where: str) -> tuple[str | list[str], list[Any] | None, bool]:
    """(JSON type, enum values, optional?) for an annotation."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        values = list(typing.get_args(tp))
        kinds = {_SCALARS.get(type(v)) for v in values}
        if None in kinds or len(kinds) != 1:
            raise ToolDefinitionError(f"{where}: Literal values must all be str, int, float or bool")
        return kinds.pop(), values, False
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        parts = [_json_type(a, where) for a in args]
        names: list[str] = []
        for kind, _, _ in parts:
            for k in kind if isinstance(kind, list) else [kind]:
                if k not in names:
                    names.append(k)
        return (names[0] if len(names) == 1 else names), None, optional
    base = origin or tp
    if base in _SCALARS:
        return _SCALARS[base], None, False
    if base in _CONTAINERS:
        return _CONTAINERS[base], None, False
    if tp is Any or tp is inspect.Parameter.empty:
        raise ToolDefinitionError(f"{where}: needs a concrete type annotation (str, int, float, bool, list, dict)")
    raise ToolDefinitionError(f"{where}: type {tp!r} cannot be described in JSON Schema")


def schema_from_function(fn: Callable[..., Any], name: str | None = None) -> OpenAIFunctionToolSchema:
    tool_name = name or fn.__name__
    where = f"tool {tool_name!r} ({getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', tool_name)})"
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: type hints cannot be resolved: {exc}") from exc
    parameters = inspect.signature(fn).parameters
    variadic = next((p for p, v in parameters.items() if v.kind in (v.VAR_POSITIONAL, v.VAR_KEYWORD)), None)
    problem = docstring_problem(fn.__doc__, [(p, p in hints) for p in parameters], variadic)
    if problem:
        raise ToolDefinitionError(f"{where}: {problem}")
    summary, documented = parse_docstring(fn.__doc__ or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in parameters.items():
        kind, enum, optional = _json_type(hints[pname], f"{where}, parameter {pname!r}")
        prop: dict[str, Any] = {"type": kind, "description": documented[pname]}
        if enum is not None:
            prop["enum"] = enum
        properties[pname] = prop
        if param.default is inspect.Parameter.empty and not optional:
            required.append(pname)
    return OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": tool_name,
                "description": summary,
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        }
    )


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _type_ok(value: Any, kind: str | list[str]) -> bool:
    for k in kind if isinstance(kind, list) else [kind]:
        if k == "null":
            if value is None:
                return True
            continue
        allowed = _PY_TYPES.get(k)
        if allowed is None:  # a JSON type this check does not know: let the tool decide
            return True
        if isinstance(value, bool) and k in ("integer", "number"):
            continue  # JSON true is not a number, although Python's bool is an int
        if isinstance(value, allowed):
            return True
    return False


def check_arguments(schema: OpenAIFunctionToolSchema, arguments: Any) -> list[str]:
    """Problems with a model's arguments for a tool, in words the model can act on (empty: fine)."""
    if not isinstance(arguments, dict):
        return [f"arguments must be a JSON object, got {type(arguments).__name__}"]
    params = schema.function.parameters
    problems = [f"missing required argument {r!r}" for r in params.required if r not in arguments]
    for key, value in arguments.items():
        prop = params.properties.get(key)
        if prop is None:
            allowed = ", ".join(params.properties) or "none"
            problems.append(f"unknown argument {key!r} (allowed: {allowed})")
            continue
        if not _type_ok(value, prop.type):
            problems.append(f"argument {key!r} must be {prop.type}, got {type(value).__name__} {value!r:.40}")
        elif prop.enum is not None and value not in prop.enum:
            problems.append(f"argument {key!r} must be one of {prop.enum}, got {value!r:.40}")
    return problems
