"""Tools from YAML, in verl's own format, plus function tools by dotted path.

```yaml
tools:
  - class_name: rollscope.tools.builtin.calculator.CalculatorTool   # verl's format, unchanged
    config: {type: native, timeout: 5}
    tool_schema: {type: function, function: {name: calculator, ...}}   # optional for rollscope tools
  - function: my_package.tools:lookup                                  # a @tool or typed function
    config: {timeout: 10}
```

verl's function tools (``@function_tool`` functions in the file ``multi_turn.function_tool_path``
names) are loaded by ``load_function_tools``, with verl's own loader.

Every problem is reported as one ``ToolConfigError`` naming the file and the entry (and, for a
package a tool needs and lacks, the package).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema

from rollscope import _tool_entries
from rollscope._files import load_yaml, read_text
from rollscope._imports import load_object
from rollscope.tools.function_tool import FunctionTool
from rollscope.tools.schema import ToolDefinitionError

log = logging.getLogger("rollscope.tools")


class ToolConfigError(ValueError):
    pass


def load_tools(path: str | os.PathLike) -> list[BaseTool]:
    """Instantiate every tool a YAML file declares; names must be unique."""
    doc = load_yaml(read_text(path, "tool config", ToolConfigError), str(path), ToolConfigError)
    entries = (doc or {}).get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ToolConfigError(f"{path}: expected a top-level 'tools:' list")
    tools: list[BaseTool] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        label = _tool_entries.label(str(path), i, entry)
        problem = _tool_entries.entry_problem(entry) if isinstance(entry, dict) else None
        if problem:
            raise ToolConfigError(f"{label}: {problem}")
        for typo in _tool_entries.property_typos(entry) if isinstance(entry, dict) else ():
            log.warning("%s: %s", label, typo)
        try:
            tool = _without_verls_schema_print(entry)
        except ImportError as exc:  # raised by the tool's own code (its optional dependency, say)
            raise ToolConfigError(f"{label}: {missing_package(exc)}") from exc
        except (ToolDefinitionError, ValidationError, TypeError, ValueError) as exc:
            raise ToolConfigError(f"{label}: {_one_line(exc)}") from exc
        except (Exception, SystemExit) as exc:  # the tool's own code (its module, its class): said where it is
            raise ToolConfigError(f"{label}: {type(exc).__name__}: {_one_line(exc)}") from exc
        if tool.name in seen:
            raise ToolConfigError(f"{label}: duplicate tool name {tool.name!r} (also tools[{seen[tool.name]}])")
        seen[tool.name] = i
        tools.append(tool)
    return tools


def load_function_tools(path: str | os.PathLike, taken: Iterable[str] = ()) -> list[Any]:
    """verl's function tools from a Python file (``multi_turn.function_tool_path``), loaded by
    verl's own loader so they are the objects verl's loops would run; ``taken``: names already
    used by the run's other tools (a name must be unique across both)."""
    from verl.tools.function_tool import load_function_tools_from_path

    if not os.path.isfile(path):
        raise ToolConfigError(f"{path}: function_tool_path: no such file")
    try:
        tools = load_function_tools_from_path(str(path))
    except ImportError as exc:
        raise ToolConfigError(f"{path}: function_tool_path: {missing_package(exc)}") from exc
    except Exception as exc:  # the file is the user's code: any error in it is reported as where it is
        raise ToolConfigError(f"{path}: function_tool_path: {type(exc).__name__}: {_one_line(exc)}") from exc
    clashes = sorted({t.name for t in tools} & set(taken))
    if clashes:
        raise ToolConfigError(
            f"{path}: function_tool_path: tool name(s) {clashes} are also in the tool config; "
            "each tool name must be unique"
        )
    return tools


def missing_package(exc: ImportError) -> str:
    """What an ImportError says, naming the package to install when a module is missing."""
    name = getattr(exc, "name", None)
    if isinstance(exc, ModuleNotFoundError) and name:
        top = name.split(".")[0]
        return f"needs the package providing {top!r}, which is not installed (pip install {top}): {exc}"
    return f"ImportError: {_one_line(exc)}"


def _without_verls_schema_print(entry: Any) -> BaseTool:
    """``_build``, without the schema verl's ``BaseTool.__init__`` prints for every tool (a dozen
    lines each, every run); anything else the tool's own code prints is passed on as it was."""
    printed = io.StringIO()
    tool = None
    try:
        with contextlib.redirect_stdout(printed):
            tool = _build(entry)
    finally:
        text = printed.getvalue()
        schema = getattr(tool, "tool_schema", None)
        if schema is not None:
            shown = json.dumps(schema.model_dump(exclude_unset=True, exclude_none=True), indent=2)
            text = text.replace(shown + "\n", "", 1)
        if text:
            sys.stdout.write(text)
    return tool


def _build(entry: Any) -> BaseTool:
    if not isinstance(entry, dict):
        raise ToolDefinitionError(f"each entry must be a mapping, got {type(entry).__name__}")
    config = dict(entry.get("config") or {})
    tool_type = config.get("type", "native")
    if tool_type != "native":
        raise ToolDefinitionError(f"config.type {tool_type!r} is not supported (only 'native')")
    schema = _schema(entry.get("tool_schema"))
    if "function" in entry:
        tool = FunctionTool({**config, "function": entry["function"]}, schema)
        if schema is not None:
            _check_signature(entry["tool_schema"], tool.fn, entry["function"])
        return tool
    if "class_name" not in entry:
        raise ToolDefinitionError("needs 'class_name' (a BaseTool subclass) or 'function' (a dotted path)")
    cls = load_object(entry["class_name"], ToolDefinitionError)
    if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
        raise ToolDefinitionError(f"{entry['class_name']!r} is not a subclass of verl's BaseTool")
    try:
        tool = cls(config=config, tool_schema=schema)
    except (ToolDefinitionError, ValidationError, ImportError):
        raise
    except Exception as exc:  # the tool's own __init__: its failure is this entry's, in one line
        if schema is None and isinstance(exc, AssertionError | AttributeError):  # (verl's BaseTool, no schema)
            raise ToolDefinitionError(
                "no tool_schema given and the class provides none (verl's BaseTool found "
                f"no schema: {type(exc).__name__}: {_one_line(exc)}): add tool_schema: to "
                "this entry"
            ) from None
        raise ToolDefinitionError(
            f"{cls.__name__}(config, tool_schema) raised {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    if getattr(tool, "tool_schema", None) is None:
        raise ToolDefinitionError("no tool_schema given and the class provides none")
    return tool


def _check_signature(schema: dict[str, Any], fn: Any, target: str) -> None:
    """A function's schema from YAML against what the function takes (``_tool_entries``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # (a builtin without a signature: left to its calls)
        return
    named = [(p.name, p.default is not p.empty) for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    problem = _tool_entries.signature_problem(schema, named, any(p.kind == p.VAR_KEYWORD for p in parameters), target)
    if problem:
        raise ToolDefinitionError(problem)


def _schema(raw: Any) -> OpenAIFunctionToolSchema | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ToolDefinitionError("tool_schema must be a mapping")
    return OpenAIFunctionToolSchema.model_validate(raw)


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errs = exc.errors()
        return "bad tool_schema: " + "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errs[:3])
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
