"""A tool YAML entry's shape, checked without importing verl or the tool: every key known (a typo
gets "did you mean"), the schema whole (``required`` within ``properties``), and a function's
schema against the function's parameters. ``rollscope run`` checks a tool file with it before the
heavy imports (``runner.preflight``, reading the function's source), and ``tools.load_tools`` with
the loaded function, so a mistake is said the same way on either path: one error naming the file,
the entry and the key.

verl reads these entries with pydantic models that drop unknown keys: ``tool_shema:`` there is an
entry with no schema and ``confg:`` a tool with its default config, said by nothing.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Sequence
from typing import Any

ENTRY_KEYS = ("class_name", "function", "config", "tool_schema")
SCHEMA_KEYS = ("type", "function")
FUNCTION_KEYS = ("name", "description", "parameters", "strict")
PARAMETERS_KEYS = ("type", "properties", "required", "additionalProperties")
# JSON Schema's keywords a property may hold; another key close to one is taken for its typo.
PROPERTY_KEYWORDS = (
    "type",
    "description",
    "enum",
    "items",
    "properties",
    "required",
    "default",
    "examples",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "additionalProperties",
    "anyOf",
    "oneOf",
    "allOf",
    "const",
    "title",
    "nullable",
)


def label(path: str, index: int, entry: Any) -> str:
    """How an entry is named in every error: ``FILE: tools[I] (TARGET)``."""
    where = f"{path}: tools[{index}]"
    if isinstance(entry, dict):
        where += f" ({entry.get('class_name') or entry.get('function') or '?'})"
    return where


def entry_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with the keys and schema of one entry (a mapping), naming the key; None if nothing."""
    problem = _unknown(entry, ENTRY_KEYS, "")
    if problem:
        return problem
    config = entry.get("config")
    if config is not None and not isinstance(config, dict):
        return "config: must be a mapping"
    schema = entry.get("tool_schema")
    return None if schema is None else schema_problem(schema)


def schema_problem(schema: Any) -> str | None:
    """What is wrong with an OpenAI function schema as verl reads it, naming the key."""
    if not isinstance(schema, dict):
        return "tool_schema: must be a mapping"
    function = schema.get("function")
    problem = _unknown(schema, SCHEMA_KEYS, "tool_schema.")
    if problem is None and schema.get("type") != "function":
        problem = f"tool_schema.type: must be 'function', got {schema.get('type')!r}"
    if problem is None and not isinstance(function, dict):
        problem = "tool_schema.function: must be a mapping with name, description and parameters"
    if problem is not None:
        return problem
    problem = _unknown(function, FUNCTION_KEYS, "tool_schema.function.")
    for key in ("name", "description"):
        if problem is None and not isinstance(function.get(key), str):
            problem = f"tool_schema.function.{key}: a string is needed, got {function.get(key)!r}"
    parameters = function.get("parameters")
    if problem is not None or parameters is None:
        return problem
    where = "tool_schema.function.parameters"
    if not isinstance(parameters, dict):
        return f"{where}: must be a mapping (type: object, properties, required)"
    problem = _unknown(parameters, PARAMETERS_KEYS, f"{where}.")
    properties = parameters.get("properties", {})
    required = parameters.get("required", [])
    if problem is None and not isinstance(properties, dict):
        problem = f"{where}.properties: must be a mapping of parameter name to its schema"
    if problem is None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        problem = f"{where}.required: must be a list of parameter names"
    if problem is not None:
        return problem
    missing = [r for r in required if r not in properties]
    if missing:
        declared = ", ".join(properties) or "none"
        return f"{where}.required: {', '.join(map(repr, missing))} not in properties ({declared})"
    for name, prop in properties.items():
        if not isinstance(prop, dict) or "type" not in prop:  # (verl's schema requires it)
            return f"{where}.properties.{name}: needs a mapping with a 'type'"
    return None


def property_typos(entry: dict[str, Any]) -> list[str]:
    """Keys of a parameter's schema that look like a misspelt JSON Schema keyword (``item:`` for
    ``items:``, in verl's own search-tool example). Warned, not refused: JSON Schema is open, and
    verl runs such a tool (the model is shown the schema without what the key meant to say)."""
    schema = entry.get("tool_schema")
    function = schema.get("function") if isinstance(schema, dict) else None
    parameters = function.get("parameters") if isinstance(function, dict) else None
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    found = []
    for name, prop in (properties or {}).items():
        typo = _typo(prop, PROPERTY_KEYWORDS) if isinstance(prop, dict) else None
        if typo:
            found.append(f"tool_schema.function.parameters.properties.{name}.{typo}")
    return found


def signature_problem(
    schema: dict[str, Any], parameters: Sequence[tuple[str, bool]], var_keyword: bool, function: str
) -> str | None:
    """Whether a function can take what its schema lets the model send: every property one of its
    parameters (unless it takes ``**kwargs``) and every parameter without a default among the
    properties the schema requires. ``parameters``: (name, has a default) in order."""
    declared = (schema.get("function") or {}).get("parameters") or {}
    properties, required = declared.get("properties") or {}, declared.get("required") or []
    names = [name for name, _ in parameters]
    shown = f"{function}({', '.join(names)})"
    where = "tool_schema.function.parameters"
    extra = [p for p in properties if p not in names]
    if extra and not var_keyword:
        return f"{where}.properties: {', '.join(map(repr, extra))} not parameters of {shown}"
    needed = [name for name, has_default in parameters if not has_default and name not in required]
    if needed:
        return (
            f"{where}.required: {shown} needs {', '.join(map(repr, needed))}, which the schema "
            f"{'does not require' if all(n in properties for n in needed) else 'does not declare'}"
        )
    return None


def _unknown(mapping: dict[str, Any], known: Sequence[str], prefix: str) -> str | None:
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"expected {', '.join(known)}"
            return f"{prefix}{key}: unknown key; {hint}"
    return None


def _typo(mapping: dict[str, Any], known: Sequence[str]) -> str | None:
    """A key that is no keyword but close to one (``descripton``): its name and the hint."""
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.8)
            if close:
                return f"{key}: unknown key; did you mean {close[0]!r}?"
    return None


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Google-style docstring -> (summary, {param: description})."""
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section = None
    current = None
    for line in lines:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            section, current = "args", None
            continue
        if re.fullmatch(r"(Returns|Return|Raises|Yields|Examples?|Notes?):", stripped):
            section, current = "other", None
            continue
        if section is None:
            if stripped or summary_lines:
                summary_lines.append(stripped)
        elif section == "args":
            m = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if m and (line.startswith("    ") or not line.startswith(" ")) and not line.startswith("        "):
                current = m.group(1)
                params[current] = m.group(3).strip()
            elif current and stripped:
                params[current] = f"{params[current]} {stripped}".strip()
    summary = " ".join(s for s in summary_lines if s).strip()
    return summary, params


def docstring_problem(doc: str | None, parameters: Sequence[tuple[str, bool]], variadic: str | None) -> str | None:
    """What keeps a function from describing itself as a tool (its docstring's summary the tool's
    description, its ``Args:`` each parameter's, its annotations their types), in words; None where
    nothing does. ``parameters``: (name, annotated); ``variadic``: a ``*args``/``**kwargs`` name.
    Read from a live function (``tools.schema``) and from its source before anything is imported
    (the run's pre-flight check), so both say the same."""
    if not (doc and doc.strip()):
        return "no docstring; its first line tells the model what the tool does"
    summary, documented = parse_docstring(doc)
    if not summary:
        return "the docstring has no summary line before 'Args:'"
    if variadic:
        return f"*{variadic} / **{variadic} cannot be described; name each parameter"
    for name, annotated in parameters:
        if not annotated:
            return f"parameter {name!r} has no type annotation"
        if not documented.get(name):
            return f"parameter {name!r} is not described in the docstring's Args: section"
    return None
