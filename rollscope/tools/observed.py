"""Every tool a rollscope loop is given is traced, whatever its class.

A ``TracedTool`` traces itself. Any other tool a loop gets — a verl ``BaseTool`` subclass from
verl's tool YAML (its gsm8k or search tool, a user's own), verl's ``FunctionTool`` from
``multi_turn.function_tool_path`` — is given a traced class the first time a rollscope loop sees
it (``observe_tools``): a subclass made once per class, whose ``create``, ``execute``,
``calc_reward`` and ``release`` (``call`` for a function tool) record the spans a ``TracedTool``
records, and otherwise behave exactly as the tool's own: an exception is raised on and no timeout
is added, so verl's loop handles them as it always has. The instance's class is switched in place:
the one object verl's worker shares between its loops is traced for all of them, and the user's
class itself is left as it was (``type(tool).__name__`` and ``isinstance`` still say what it is).

Spans are recorded only inside a trajectory rollscope opened or joined: there verl's own
decorator (on ``BaseTool.execute``) is switched off, and outside it that decorator records the
call in verl's backend, so no call is recorded twice.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import FunctionTool as VerlFunctionTool
from verl.tools.function_tool import normalize_function_tool_return

from rollscope.semconv import ERROR_KIND
from rollscope.tools.traced_tool import LIFECYCLE, begin_tool_span, describe_result
from rollscope.tracing import rollout_trace_op
from rollscope.tracing.instrument import current_frame, end_span, state

log = logging.getLogger("rollscope.tools")
_FLAG = "__rollscope_tool_traced__"
_traced_classes: dict[type, type] = {}


def observe_tools(tools: Iterable[Any] | None) -> None:
    """Give every tool here that does not trace itself its traced class (idempotent, cheap once done)."""
    for tool in tools or ():
        cls = type(tool)
        if getattr(cls, _FLAG, False):
            continue
        traced = _traced_classes.get(cls)
        if traced is None:
            traced = _traced_classes[cls] = _traced_class(cls)
        if traced is not cls:
            try:  # (object's own setter: a class whose __setattr__ refuses writes is switched too)
                object.__setattr__(tool, "__class__", traced)
            except Exception as exc:  # an instance whose class cannot be switched (a native type, a layout)
                _traced_classes[cls] = cls
                log.warning(
                    "tool %r of class %s cannot be given a traced class (%s): its calls are not traced",
                    getattr(tool, "name", "?"),
                    cls.__qualname__,
                    exc,
                )


def _traced_class(cls: type) -> type:
    """The traced subclass of a tool's class; the class itself for an object that is no tool, or a
    class that refuses a subclass (a registry metaclass or an ``__init_subclass__`` that rejects a
    second class of its name): said once, its calls untraced, the run unharmed."""
    if issubclass(cls, VerlFunctionTool):
        namespace = {"call": _recorded_call(cls.call)}
    elif issubclass(cls, BaseTool):
        made: list[type] = []  # the traced class, once made: ``execute`` calls the tool's own through it
        namespace = {"execute": _recorded_execute(made, f"{cls.__name__}.execute")}
        for name, kind in LIFECYCLE.items():
            owner = next(c for c in cls.__mro__ if name in c.__dict__)
            if owner is not BaseTool:  # as for a TracedTool: the methods the tool's own classes define
                namespace[name] = _lifecycle(owner.__dict__[name], kind, f"{cls.__name__}.{name}")
    else:
        log.warning(
            "a tool of class %s.%s is neither a verl BaseTool nor a verl FunctionTool: rollscope cannot "
            "trace its calls (subclass TracedTool, or verl's BaseTool)",
            cls.__module__,
            cls.__qualname__,
        )
        return cls
    namespace.update(
        {
            _FLAG: True,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "__slots__": (),
        }
    )  # (no slot: the same layout)
    try:
        traced = type(cls.__name__, (cls,), namespace)
    except Exception as exc:
        log.warning(
            "tool class %s.%s refuses a subclass (%s: %s): its calls are not traced",
            cls.__module__,
            cls.__qualname__,
            type(exc).__name__,
            exc,
        )
        return cls
    if issubclass(cls, BaseTool):
        made.append(traced)
    return traced


def _lifecycle(raw: Any, kind: Any, span_name: str) -> Any:
    """A tool's ``create``/``calc_reward``/``release`` traced inside a trajectory, bound as the
    tool's own is: a static method stays static, a class method a class method."""
    wrap = staticmethod if isinstance(raw, staticmethod) else classmethod if isinstance(raw, classmethod) else None
    plain = raw.__func__ if wrap is not None else raw
    method = _in_trajectory(rollout_trace_op(plain, kind=kind, name=span_name), plain)
    return wrap(method) if wrap is not None else method


def _in_trajectory(traced: Callable[..., Any], plain: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(plain)
    async def method(*args: Any, **kwargs: Any) -> Any:
        if current_frame.get() is None:
            return await plain(*args, **kwargs)
        return await traced(*args, **kwargs)

    return method


def _recorded_execute(made: list[type], span_name: str) -> Callable[..., Any]:
    """``execute``, the tool's own bound as its class binds it (an instance, static or class
    method), through the traced class ``made`` holds."""

    async def recorded(self: Any, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        execute = super(made[0], self).execute
        if state.tracer is None or current_frame.get() is None:
            return await execute(instance_id, parameters, **kwargs)
        span = begin_tool_span(self, span_name, instance_id, parameters)
        if span is None:
            return await execute(instance_id, parameters, **kwargs)
        return await _recorded(span, execute(instance_id, parameters, **kwargs), describe_result)

    return recorded


def _recorded_call(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    async def recorded(self: Any, parameters: dict[str, Any]) -> Any:
        if state.tracer is None or current_frame.get() is None:
            return await call(self, parameters)
        span = begin_tool_span(self, self.name, None, parameters)
        if span is None:
            return await call(self, parameters)
        return await _recorded(span, call(self, parameters), _function_result)

    return recorded


async def _recorded(span: Any, call: Any, describe: Callable[[Any], Any]) -> Any:
    try:
        result = await call
    except BaseException as exc:
        if isinstance(exc, Exception):
            span.attributes[ERROR_KIND] = "exception"
        end_span(span, None, exc)
        raise
    end_span(span, describe(result))
    return result


def _function_result(raw: Any) -> Any:
    """A function tool's return as the loop will read it (verl's normalization), like an execute's."""
    try:
        return describe_result(normalize_function_tool_return(raw))
    except (TypeError, ValueError):
        return raw
