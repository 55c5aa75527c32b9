"""``@tool``: a typed Python function (sync or async) becomes a traced verl tool.

The result is a ``FunctionTool`` — a ``TracedTool`` like any other, so it runs in rollscope's
loops and in verl's own ``ToolAgentLoop`` alike. In verl's tool YAML it is named as
``class_name: rollscope.tools.FunctionTool`` with ``config: {type: native, function: pkg.mod:fn}``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, overload

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope._imports import load_object
from rollscope.tools.blocking import in_thread
from rollscope.tools.schema import ToolDefinitionError, check_arguments, schema_from_function
from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool


class FunctionTool(TracedTool):
    """A tool whose ``execute`` calls one Python function with the model's arguments."""

    def __init__(
        self,
        config: dict | None = None,
        tool_schema: OpenAIFunctionToolSchema | None = None,
        *,
        fn: Callable[..., Any] | None = None,
        name: str | None = None,
    ) -> None:
        config = dict(config or {})
        if fn is None:
            target = config.get("function")
            if not target:
                raise ToolDefinitionError("FunctionTool needs config.function: 'package.module:function'")
            fn = load_object(target, ToolDefinitionError)
        if isinstance(fn, FunctionTool):  # a @tool object named by its path: its settings, the YAML's over them
            tool_schema = tool_schema or fn.tool_schema
            config = {**{k: v for k, v in fn.config.items() if k != "function"}, **config}
            fn = fn.fn
        if not callable(fn):
            raise ToolDefinitionError(f"{config.get('function', fn)!r} is not callable")
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        super().__init__(config, tool_schema or schema_from_function(fn, name))
        self.span_name = self.name  # its spans are named by the tool, not by this generic class

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        problems = check_arguments(self.tool_schema, parameters)
        if problems:
            raise ToolError(f"invalid arguments for '{self.name}': " + "; ".join(problems), kind="bad_arguments")
        if self.is_async:
            result = await self.fn(**parameters)
        else:
            result = await in_thread(self.fn, self.name, parameters)  # (one that never returns holds no exit)
        return as_tool_result(result)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Still callable as the plain function (handy in tests and notebooks)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r} -> {self.fn.__module__}.{self.fn.__qualname__})"


def as_tool_result(result: Any) -> ExecuteResult:
    """A function's return value as execute's (ToolResponse, reward, metrics).

    str -> text; ToolResponse as is; (value, reward) or (value, reward, metrics) tuples;
    anything else -> its JSON text.
    """
    reward, metrics = 0.0, {}
    if isinstance(result, tuple) and 2 <= len(result) <= 3:
        result, reward, *rest = result
        metrics = rest[0] if rest else {}
    if isinstance(result, ToolResponse):
        response = result
    elif isinstance(result, str):
        response = ToolResponse(text=result)
    else:
        response = ToolResponse(text=json.dumps(result, ensure_ascii=False, default=str))
    return response, float(reward), dict(metrics)


@overload
def tool(fn: Callable[..., Any]) -> FunctionTool: ...
@overload
def tool(*, name: str | None = ..., timeout: float | None = ...) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, timeout: float | None = None) -> Any:
    """Turn a typed, documented function into a traced tool (schema from signature and docstring)."""

    def make(f: Callable[..., Any]) -> FunctionTool:
        config = {} if timeout is None else {"timeout": timeout}
        return FunctionTool(config, fn=f, name=name)

    return make(fn) if fn is not None else make
