"""Per-task trace context, and the bridge to a trajectory that verl itself opened.

Context lives in ContextVars, so each asyncio task (verl runs one per sample) sees its own
trajectory and parent span, exactly as verl's own ``rollout_trace_attr`` isolates its attributes.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import Any

from rollscope.tracing.spans import Span, Trajectory

# What new spans hang under: the innermost open span, or the trajectory itself at the top level
# (both have ``.id`` and ``.trajectory``); None outside any trajectory.
current_frame: ContextVar[Span | Trajectory | None] = ContextVar("rollscope_frame", default=None)
# False inside rollout_trace_attr(trace=False): every nested op runs untraced.
trace_enabled: ContextVar[bool] = ContextVar("rollscope_trace_enabled", default=True)

_VERL_MODULE = "verl.utils.rollout_trace"


def verl_context() -> tuple[bool, dict[str, Any] | None]:
    """(verl allows tracing here, the attributes of the trajectory verl opened or None).

    Looked up in ``sys.modules`` rather than imported: if verl's tracing module was never
    imported, verl cannot have opened a trajectory, and importing it would cost seconds.
    """
    mod = sys.modules.get(_VERL_MODULE)
    if mod is None:
        return True, None
    if not mod._trace_enabled.get():
        return False, None
    cfg = mod.RolloutTraceConfig._instance
    if cfg is None or not cfg._initialized:
        return True, None
    return True, mod._trace_attributes.get()


def current_trajectory() -> Trajectory | None:
    frame = current_frame.get()
    return frame.trajectory if frame is not None else None
