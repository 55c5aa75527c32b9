"""Per-task trace context, and the bridge to a trajectory that verl itself opened.

Context lives in ContextVars, so each asyncio task (verl runs one per sample) sees its own
trajectory and parent span, exactly as verl's own ``rollout_trace_attr`` isolates its attributes.
"""

from __future__ import annotations

from contextvars import ContextVar

from rollscope import _verl
from rollscope.tracing.spans import Span, Trajectory

# What new spans hang under: the innermost open span, or the trajectory itself at the top level
# (both have ``.id`` and ``.trajectory``); None outside any trajectory.
current_frame: ContextVar[Span | Trajectory | None] = ContextVar("rollscope_frame", default=None)
# False inside rollout_trace_attr(trace=False): every nested op runs untraced.
trace_enabled: ContextVar[bool] = ContextVar("rollscope_trace_enabled", default=True)

# (verl allows tracing here, the attributes of the trajectory verl opened or None): read from
# verl's tracer, by the one module that reads verl's internals (the function itself: no call added)
verl_context = _verl.trace_context


def current_trajectory() -> Trajectory | None:
    frame = current_frame.get()
    return frame.trajectory if frame is not None else None
