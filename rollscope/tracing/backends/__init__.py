"""Trace destinations behind one interface; see ``base.TraceBackend`` and ``registry``."""

from rollscope.tracing.backends.base import TraceBackend
from rollscope.tracing.backends.registry import (
    available_backends,
    backend_class,
    parse_backend_names,
    register_backend,
    resolve_backends,
)

__all__ = [
    "TraceBackend",
    "available_backends",
    "backend_class",
    "parse_backend_names",
    "register_backend",
    "resolve_backends",
]
