"""A backend that keeps nothing: tracing wired up, output discarded (for overhead baselines)."""

from rollscope.tracing.backends.base import TraceBackend


class NoneBackend(TraceBackend):
    name = "none"
    lossless = True
