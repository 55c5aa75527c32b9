"""A traced call's arguments, captured on the rollout's thread and bound to names later.

Binding (``Signature.bind``-like, but precomputed per function) happens once, after the call: when
its span is packed for the trace sidecar, or shaped on the exporter thread.
"""

from __future__ import annotations

import inspect
from typing import Any


class CallArgs:
    """A traced call's raw arguments, bound to parameter names later (see the module docstring)."""

    __slots__ = ("args", "binder", "kwargs")

    def __init__(self, binder: Binder, args: tuple, kwargs: dict) -> None:
        self.binder = binder
        self.args = args
        self.kwargs = kwargs

    def owner(self) -> Any:
        """The bound instance (``self``) when the call is a method call."""
        return self.args[0] if self.binder.is_method and self.args else None

    def bind(self) -> dict[str, Any]:
        return self.binder.bind(self.args, self.kwargs)


class Binder:
    """Maps a call's arguments to parameter names the way verl's trace does (defaults applied,
    ``self`` left out, extra keywords under the ``**kwargs`` name), precomputed per function
    because ``Signature.bind`` is slow."""

    __slots__ = ("defaults", "is_method", "names", "signature", "simple", "var_keyword")

    def __init__(self, func: Any) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self.signature = None
        params = list(self.signature.parameters.values()) if self.signature else []
        self.is_method = bool(params) and params[0].name in ("self", "cls")
        kinds = {p.kind for p in params}
        self.var_keyword = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        # Simple: no *args and no positional-only parameters.
        self.simple = self.signature is not None and not kinds & {
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.POSITIONAL_ONLY,
        }
        self.names = [p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        self.defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        if self.simple and len(args) <= len(self.names):
            inputs = dict(zip(self.names, args, strict=False))
            extra = None
            for key, value in kwargs.items():
                if self.var_keyword is not None and key not in self.defaults and key not in self.names:
                    if value is not None:  # extras left at None (image_data=None, ...) say nothing
                        extra = extra or {}
                        extra[key] = value
                else:
                    inputs[key] = value
            for name, default in self.defaults.items():
                inputs.setdefault(name, default)
            if self.var_keyword is not None:
                inputs[self.var_keyword] = extra or {}
        elif self.signature is not None:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError:
                return {"args": list(args[self.is_method :]), **kwargs}
            bound.apply_defaults()
            inputs = dict(bound.arguments)
        else:
            return {"args": list(args), **kwargs}
        if self.is_method:
            inputs.pop(self.names[0], None)
        return inputs
