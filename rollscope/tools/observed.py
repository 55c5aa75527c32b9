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

from rollscope.tools.traced_tool import LIFECYCLE, begin_tool_span, describe_result, finish_tool_span
from rollscope.tracing import rollout_trace_op
from rollscope.tracing.instrument import current_frame, state, traced_callable

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

    async def execute(self: Any, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        return await super(made[0], self).execute(instance_id, parameters, **kwargs)

    def open_span(args: tuple, kwargs: dict[str, Any]) -> Any:
        instance_id = args[1] if len(args) > 1 else kwargs.get("instance_id")
        parameters = args[2] if len(args) > 2 else kwargs.get("parameters")
        return begin_tool_span(args[0], span_name, instance_id, parameters)

    return traced_callable(execute, open_span, finish_tool_span(describe_result), _tracing_tools)


def _recorded_call(call: Callable[..., Any]) -> Callable[..., Any]:
    def open_span(args: tuple, kwargs: dict[str, Any]) -> Any:
        return begin_tool_span(args[0], args[0].name, None, args[1] if len(args) > 1 else kwargs.get("parameters"))

    return traced_callable(call, open_span, finish_tool_span(_function_result), _tracing_tools)


def _tracing_tools() -> bool:
    """A tool's spans are recorded only inside a trajectory rollscope opened or joined."""
    return state.tracer is not None and current_frame.get() is not None


def _function_result(raw: Any) -> Any:
    """A function tool's return as the loop will read it (verl's normalization), like an execute's."""
    try:
        return describe_result(normalize_function_tool_return(raw))
    except (TypeError, ValueError):
        return raw
