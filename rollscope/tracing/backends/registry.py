"""Backend names -> backend classes. Built-ins are listed here; third parties register through the
``rollscope.trace_backends`` entry-point group or ``register_backend``. No if/elif over names."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from rollscope._extras import require
from rollscope._imports import load_object
from rollscope.tracing.backends.base import TraceBackend

ENTRY_POINT_GROUP = "rollscope.trace_backends"

# name -> "module:Class", imported only when used so optional dependencies stay optional.
_BUILTIN: dict[str, str] = {
    "local": "rollscope.tracing.backends.local:LocalBackend",
    "none": "rollscope.tracing.backends.none:NoneBackend",
    "otel": "rollscope.tracing.backends.otel:OtelBackend",
    "mlflow": "rollscope.tracing.backends.mlflow:MlflowBackend",
    "weave": "rollscope.tracing.backends.weave:WeaveBackend",
    "trackio": "rollscope.tracing.backends.trackio:TrackioBackend",
    "weave-otel": "rollscope.tracing.backends.weave_otel:WeaveOtelBackend",
}
_registered: dict[str, type[TraceBackend] | Callable[..., TraceBackend]] = {}


def register_backend(name: str, factory: type[TraceBackend] | Callable[..., TraceBackend]) -> None:
    _registered[name] = factory


def available_backends() -> list[str]:
    names = set(_BUILTIN) | set(_registered)
    names |= {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def backend_class(name: str) -> Any:
    if name in _registered:
        return _registered[name]
    if name in _BUILTIN:
        return load_object(_BUILTIN[name])
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.load()
    raise ValueError(f"unknown trace backend {name!r}; available: {', '.join(available_backends())}")


def parse_backend_names(spec: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """'local,weave' or ['local', 'weave'] -> ['local', 'weave']; None/'' -> []."""
    if spec is None:
        return []
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for p in parts:
        p = str(p).strip()
        if p and p not in names:
            names.append(p)
    return names


def resolve_backends(names: list[str], options: dict[str, Any]) -> list[tuple[str, Any, dict[str, Any]]]:
    """(name, class, the options it declares) per backend; an option no backend declares is an
    error rather than silently ignored."""
    resolved = []
    claimed: set[str] = set()
    for name in names:
        cls = backend_class(name)
        requires = getattr(cls, "requires", ())
        if requires:
            require(getattr(cls, "extra", None) or name, *requires, feature=f"the {name} trace backend")
        accepted = getattr(cls, "options", frozenset())
        mine = {k: v for k, v in options.items() if k in accepted}
        claimed |= set(mine)
        resolved.append((name, cls, mine))
    unknown = sorted(set(options) - claimed)
    if unknown:
        raise ValueError(
            f"trace option(s) {', '.join(unknown)} not accepted by backend(s) {', '.join(names) or '(none)'}"
        )
    return resolved
