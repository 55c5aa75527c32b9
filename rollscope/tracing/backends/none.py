"""A backend that keeps nothing: tracing wired up, output discarded (for overhead baselines)."""

from rollscope.tracing.backends.base import Delivery, TraceBackend


class NoneBackend(TraceBackend):
    name = "none"
    delivery = Delivery(lossless=True)
