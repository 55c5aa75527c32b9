"""Trace destinations behind one interface; see ``base.TraceBackend`` and ``registry``."""

from rollscope.tracing.backends.base import Delivery, TraceBackend
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.registry import (
    available_backends,
    backend_class,
    parse_backend_names,
    register_backend,
    resolve_backends,
)

__all__ = [
    "Delivery",
    "TraceBackend",
    "TrajectoryBackend",
    "available_backends",
    "backend_class",
    "parse_backend_names",
    "register_backend",
    "resolve_backends",
]
