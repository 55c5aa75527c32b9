"""TracedTool: verl's BaseTool with every lifecycle method traced and every failure contained.

A subclass overrides ``execute`` (and maybe ``create``, ``calc_reward``, ``release``) with plain
methods, no decorator: ``__init_subclass__`` wraps each override once. ``execute`` also gets the
tool's timeout (``config["timeout"]`` seconds, default 30) and turns a failure or timeout into
error text in the ``ToolResponse`` the model sees plus an error span, never an exception out of
the agent loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.semconv import ERROR_KIND, TOOL_NAME
from rollscope.tools.blocking import ToolBlocked, guard
from rollscope.tracing import SpanKind, rollout_trace_op
from rollscope.tracing.instrument import begin_span, end_span, snapshot, traced_callable

log = logging.getLogger("rollscope.tools")

DEFAULT_TIMEOUT_S = 30.0
# Only execute counts as a tool call; the other lifecycle methods get spans of their own kinds.
LIFECYCLE = {"create": SpanKind.CUSTOM, "calc_reward": SpanKind.REWARD, "release": SpanKind.CUSTOM}


#: What ``execute`` returns: (what the model sees, the step reward, metrics). A plain ``str`` is
#: accepted too, as the text with reward 0 (and a bare ``ToolResponse``).
ExecuteResult = tuple[ToolResponse, float, dict]


class ToolError(Exception):
    """Raised inside a tool to send a clean message (no traceback) back to the model. ``kind``
    names the failure for insights (``bad_arguments`` for arguments the tool refuses)."""

    keep_traceback = False  # nor on its span: the message is the whole story

    def __init__(self, message: str, kind: str = "tool_error") -> None:
        super().__init__(message)
        self.kind = kind


class TracedTool(BaseTool):
    __rollscope_tool_traced__ = True  # (tools.observed: a loop's tools of other classes are given traced ones)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, kind in LIFECYCLE.items():
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__rollscope_traced__", False):
                setattr(cls, name, rollout_trace_op(method, kind=kind, name=f"{cls.__name__}.{name}"))
        execute = cls.__dict__.get("execute")
        if execute is not None and not getattr(execute, "__rollscope_traced__", False):
            cls.execute = _contained_execute(execute, f"{cls.__name__}.execute")

    def __init__(self, config: dict | None, tool_schema: OpenAIFunctionToolSchema | None) -> None:
        # BaseTool.__init__ prints the schema; a tool per trajectory makes that noise, so no super().
        self.config = dict(config or {})
        self.tool_schema = tool_schema
        if self.tool_schema is None:  # a subclass may describe itself
            self.tool_schema = self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise ValueError(f"{type(self).__name__}: no tool_schema given and get_openai_tool_schema() returned None")
        self.name = self.tool_schema.function.name
        self.timeout_s = float(self.config.get("timeout", DEFAULT_TIMEOUT_S))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        raise NotImplementedError(f"{type(self).__name__} must implement execute()")


class FailedCall(tuple):
    """What a contained ``execute`` returns for a call that failed: to verl's loop a plain
    ``ExecuteResult`` (the error text the model sees, reward 0, metrics), carrying what failed and
    its kind to the call's span."""

    failure: BaseException
    kind: str

    def __reduce__(self) -> tuple:
        """Pickled and copied as the plain tuple it is to verl (Ray pickles what a loop returns):
        what failed is for this process's span, and may hold what cannot be pickled (a lock)."""
        return (tuple, (tuple(self),))


def error_response(tool: str, message: str, failure: BaseException, kind: str = "exception") -> FailedCall:
    """The result the model sees for a failed call, carrying ``failure`` and its ``kind``."""
    failed = FailedCall((ToolResponse(text=f"Error: {message}"), 0.0, {"error": message, "tool": tool}))
    failed.failure, failed.kind = failure, kind
    return failed


_warned: set[tuple[str, str]] = set()


# Every contained failure of a tool call in this process, by (tool, kind): what a run's summary
# says of its tools (a call per turn: counted here, in the one place every tool call ends).
failures: Counter[tuple[str, str]] = Counter()


def _warn_once(tool: str, error: Exception) -> None:
    """A tool's failure is logged the first time for each tool and kind of error; the rest are in
    the trace (error spans, ``rollscope insights``' tool errors by kind), not one line per call
    through the run's progress."""
    key = (tool, type(error).__name__)
    if key in _warned:
        log.debug("tool %r failed: %s: %s", tool, key[1], error)
        return
    _warned.add(key)
    log.warning(
        "tool %r failed: %s: %s (further %s failures of this tool are traced, not printed)", tool, key[1], error, key[1]
    )


def _contained_execute(func: Callable[..., Any], span_name: str) -> Callable[..., Any]:
    """A subclass's ``execute`` within its timeout, every failure contained, through the span
    route every traced callable takes (``traced_callable``)."""

    async def contained(self: TracedTool, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        try:
            with guard(self.name, self.timeout_s):
                result = await _within(func(self, instance_id, parameters, **kwargs), self.timeout_s)
        except (asyncio.TimeoutError, ToolBlocked) as exc:
            message = f"tool '{self.name}' timed out after {self.timeout_s:g}s" + (
                " (it blocked its event loop: a blocking call in an async tool)" if isinstance(exc, ToolBlocked) else ""
            )
            _warn_once(self.name, TimeoutError(message))
            return error_response(self.name, message, TimeoutError(message), "timeout")
        except ToolError as exc:
            return error_response(self.name, str(exc), exc, exc.kind)
        except Exception as exc:
            _warn_once(self.name, exc)
            return error_response(self.name, f"tool '{self.name}' failed: {type(exc).__name__}: {exc}", exc)
        return _checked(self.name, result)

    def open_span(args: tuple, kwargs: dict[str, Any]) -> Any:
        tool = args[0]
        instance_id = args[1] if len(args) > 1 else kwargs.get("instance_id")
        parameters = args[2] if len(args) > 2 else kwargs.get("parameters")
        return begin_tool_span(tool, getattr(tool, "span_name", span_name), instance_id, parameters)

    return functools.wraps(func)(traced_callable(contained, open_span, finish_tool_span(describe_result)))


def begin_tool_span(tool: Any, span_name: str, instance_id: Any, parameters: Any) -> Any:
    """The span of one ``execute``: what every tool call records, whatever the tool's class."""
    params = parameters.copy() if type(parameters) is dict else snapshot(parameters)  # snapshot, inlined
    inputs = {"instance_id": instance_id, "parameters": params}
    return begin_span(span_name, SpanKind.TOOL, inputs, {TOOL_NAME: tool.name})


def finish_tool_span(describe: Callable[[Any], Any]) -> Callable[[Any, Any, BaseException | None], None]:
    """How every tool call's span ends: the result as ``describe`` shows it; a contained failure
    (``FailedCall``) or an exception marked with its kind (``ERROR_KIND``); a cancellation
    recorded as itself."""

    def finish(span: Any, result: Any, error: BaseException | None) -> None:
        if error is not None:
            if isinstance(error, Exception):
                span.attributes[ERROR_KIND] = "exception"
                failures[(span.attributes.get(TOOL_NAME) or span.name, "exception")] += 1
            end_span(span, None, error)
            return
        if type(result) is FailedCall:
            span.fail(result.failure)
            span.attributes[ERROR_KIND] = result.kind
            failures[(span.attributes.get(TOOL_NAME) or span.name, result.kind)] += 1
        end_span(span, describe(result))

    return finish


if sys.version_info >= (3, 11):

    async def _within(call: Any, seconds: float) -> Any:
        """``wait_for`` without the task it makes per call (a tool call per turn adds up)."""
        async with asyncio.timeout(seconds):
            return await call

else:  # Python 3.10 has no asyncio.timeout
    _within = asyncio.wait_for


def _checked(tool: str, result: Any) -> Any:
    """What verl's loop can use: a (ToolResponse, reward, metrics) tuple whose text the tokenizer
    can encode (a lone surrogate in a tool's output would otherwise crash the rollout there); a
    ``FailedCall`` of kind ``bad_result`` where it cannot be made one."""
    if isinstance(result, str):  # the text the model sees, no reward
        result = (ToolResponse(text=result), 0.0, {})
    elif isinstance(result, ToolResponse):
        result = (result, 0.0, {})
    if not (isinstance(result, tuple) and len(result) == 3 and isinstance(result[0], ToolResponse)):
        message = (
            f"tool '{tool}' returned {type(result).__name__} {str(result)[:80]!r}; execute must return "
            "a str (the text the model sees) or (ToolResponse(text=...), reward: float, metrics: dict)"
        )
        return error_response(tool, message, TypeError(message), "bad_result")
    text = result[0].text
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            result = (
                result[0].model_copy(update={"text": text.encode("utf-8", "replace").decode("utf-8")}),
                *result[1:],
            )
    return result


def describe_result(result: Any) -> Any:
    """The trace view of execute's (ToolResponse, reward, metrics) tuple."""
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[0], ToolResponse):
        return {"text": result[0].text, "reward": result[1], "metrics": result[2]}
    return result
