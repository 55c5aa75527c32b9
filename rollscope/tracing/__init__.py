"""rollscope's tracing: verl's trace API (``rollout_trace_attr``, ``rollout_trace_op``,
``RolloutTraceConfig``, ``get_trajectory_info``) with
pluggable backends, deterministic sampling, redaction and a never-blocking exporter.

Typical use::

    from rollscope import tracing
    tracing.init_tracing(project="p", experiment="e")          # local store in ./rollscope_traces
    with tracing.rollout_trace_attr(step=1, sample_index=0, rollout_n=0):
        await agent_loop.run(...)                                  # @rollout_trace_op methods -> spans
    tracing.flush_tracing()
"""

from rollscope.tracing._api import current_span, rollout_trace_attr, rollout_trace_op, set_reward, trace_span
from rollscope.tracing._context import current_trajectory
from rollscope.tracing._pipeline import early_sidecar
from rollscope.tracing._runtime import (
    Tracer,
    flush_tracing,
    get_tracer,
    init_tracing,
    shutdown_tracing,
    stats,
)
from rollscope.tracing._sampling import select_samples
from rollscope.tracing._sidecar.lease import ENV as SIDECAR_LOCK_ENV
from rollscope.tracing._sidecar.lease import wait_released as wait_for_sidecars
from rollscope.tracing._verl_api import RolloutTraceConfig, get_trajectory_info
from rollscope.tracing._verl_config import init_from_verl_config
from rollscope.tracing.backends import TraceBackend, available_backends, register_backend
from rollscope.tracing.spans import Span, SpanKind, Trajectory

__all__ = [
    "SIDECAR_LOCK_ENV",
    "RolloutTraceConfig",
    "Span",
    "SpanKind",
    "TraceBackend",
    "Tracer",
    "Trajectory",
    "available_backends",
    "current_span",
    "current_trajectory",
    "early_sidecar",
    "flush_tracing",
    "get_tracer",
    "get_trajectory_info",
    "init_from_verl_config",
    "init_tracing",
    "register_backend",
    "rollout_trace_attr",
    "rollout_trace_op",
    "select_samples",
    "set_reward",
    "shutdown_tracing",
    "stats",
    "trace_span",
    "wait_for_sidecars",
]
