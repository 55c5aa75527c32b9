"""Trace events on their way to the trace sidecar: pickle, with both ends restricted.

The sending side's ``reducer_override`` turns every object that is not a plain builtin into one:
spans and trajectories into tuples that the functions below rebuild, call arguments into a dict
of parameter names, pydantic models, dataclasses, numpy and torch values into dicts and lists,
anything else into its ``repr``. So the C pickler walks the big plain payloads (token ids,
log-probabilities) at C speed, nothing user-defined is pickled by reference, and the receiving
side never imports anything but the builtins and this module (its unpickler refuses the rest).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from typing import Any

from rollscope.tracing.callargs import CallArgs
from rollscope.tracing.payload import UNKNOWN, native
from rollscope.tracing.spans import Span, SpanKind, Trajectory

_PROTOCOL = 5
_KIND_VALUE = {k: k.value for k in SpanKind}


def _plain(value: Any) -> Any:
    return value


def _span(
    id: str, trajectory_id: str, parent_id: str | None, name: str, kind: str, start_ns: int, end_ns: int | None,
    status: str, error_type: str | None, error_message: Any, inputs: Any, outputs: Any, attributes: Any,
    shaped: bool,
) -> Span:  # fmt: skip
    span = Span.__new__(Span)
    span.id, span.trajectory_id, span.parent_id, span.name = id, trajectory_id, parent_id, name
    span.kind, span.start_ns, span.end_ns, span.status = SpanKind(kind), start_ns, end_ns, status
    span.error_type, span.error_message = error_type, error_message
    span.inputs, span.outputs, span.attributes, span.shaped = inputs, outputs, attributes, shaped
    span.trajectory = span.ctx_token = span.implicit = span.decoder = None
    return span


def _trajectory(
    id: str, project: str | None, experiment: str | None, step: Any, sample_index: Any, rollout_n: Any,
    validate: bool, agent_name: str, attributes: Any, reward: float | None, start_ns: int, end_ns: int | None,
    status: str, error_type: str | None, error_message: Any,
) -> Trajectory:  # fmt: skip
    t = Trajectory(
        project=project, experiment=experiment, step=step, sample_index=sample_index, rollout_n=rollout_n,
        validate=validate, agent_name=agent_name, attributes=attributes,
    )  # fmt: skip
    t.id, t.reward, t.start_ns, t.end_ns = id, reward, start_ns, end_ns
    t.status, t.error_type, t.error_message = status, error_type, error_message
    return t


_ALLOWED: dict[tuple[str, str], Any] = {
    **{("builtins", c.__name__): c for c in (dict, list, str, int, float, bytes, bool)},
    **{(__name__, f.__name__): f for f in (_plain, _span, _trajectory)},
}
_GLOBALS = {id(obj) for obj in _ALLOWED.values()}


class _Encoder(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        if t is Span:
            return _span, (
                obj.id, obj.trajectory_id, obj.parent_id, obj.name, _KIND_VALUE[obj.kind], obj.start_ns, obj.end_ns,
                obj.status, obj.error_type, obj.error_message, obj.inputs, obj.outputs, obj.attributes, obj.shaped,
            )  # fmt: skip
        if t is Trajectory:
            return _trajectory, (
                obj.id, obj.project, obj.experiment, obj.step, obj.sample_index, obj.rollout_n, obj.validate,
                obj.agent_name, obj.attributes, obj.reward, obj.start_ns, obj.end_ns, obj.status,
                obj.error_type, obj.error_message,
            )  # fmt: skip
        if t is CallArgs:
            return dict, (obj.bind(),)
        if id(obj) in _GLOBALS:
            return NotImplemented  # the allowed callables themselves: pickled by name
        plain = native(obj)
        if plain is not UNKNOWN:
            return _plain, (plain,)
        return _builtin_of(obj)


def _builtin_of(obj: Any) -> tuple:
    if isinstance(obj, str):
        return str, (str.__str__(obj),)
    if isinstance(obj, bool):
        return bool, (bool(obj),)
    if isinstance(obj, int):
        return int, (int.__index__(obj),)
    if isinstance(obj, float):
        return float, (float(obj),)
    if isinstance(obj, Mapping):
        return dict, (dict(obj.items()),)
    if isinstance(obj, list | tuple):
        return list, (list(obj),)
    if isinstance(obj, set | frozenset):
        return list, (sorted(obj, key=repr),)
    if isinstance(obj, bytes | bytearray):
        return bytes, (bytes(obj),)
    try:
        text = repr(obj)
    except Exception as exc:  # an object whose repr itself fails
        text = f"<unrepresentable {type(obj).__name__}: {type(exc).__name__}>"
    return str, (text,)


def encode(value: Any) -> bytes:
    """Raises what pickling raised (a structure too deep, say); the caller decides what to do."""
    buf = io.BytesIO()
    _Encoder(buf, protocol=_PROTOCOL).dump(value)
    return buf.getvalue()


class _Decoder(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"trace wire refuses {module}.{name}")
        return found


def decode(data: bytes) -> Any:
    return _Decoder(io.BytesIO(data)).load()
