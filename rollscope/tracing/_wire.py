"""Trace events on their way to the trace sidecar: pickle, with both ends restricted.

The pickling side's ``reducer_override`` turns every object that is not exactly a plain builtin
into one: spans and trajectories into tuples that the functions below rebuild, call arguments
into a dict of parameter names, numpy, torch, pydantic, dataclass and the other rich values into
what ``_values.native`` makes of them, anything else into its ``repr``. So the C pickler walks the
big plain payloads (token ids, log-probabilities) at C speed, nothing user-defined is pickled by
reference, and the receiving side never imports anything but the builtins and this module (its
unpickler refuses the rest). (``marshal``, a little faster, cannot be used: it stores anything
with a memory buffer — every numpy scalar and array — as that buffer's raw bytes.)
"""

from __future__ import annotations

import io
import pickle
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

from rollscope.semconv import STATUS_OK
from rollscope.tracing._callargs import CallArgs
from rollscope.tracing._events import (
    KIND,
    LEAF_SPAN,
    SPAN,
    SPAN_END,
    SPAN_START,
    TRAJECTORY,
    TRAJECTORY_END,
    TRAJECTORY_START,
)
from rollscope.tracing._payload import CUT_MARGIN_CHARS, UNRECORDED, CutText, NoRedaction, PayloadShaper, unrecorded
from rollscope.tracing._values import CONVERTERS, UNKNOWN, converter_for, error_text, native
from rollscope.tracing.spans import Span, SpanKind, Trajectory, new_id

_PROTOCOL = 5
_KIND_VALUE = {k: k.value for k in SpanKind}
_KIND_OF = {k.value: k for k in SpanKind}  # (a dict lookup: ``SpanKind(value)`` is Python code)


def _plain(value: Any) -> Any:
    return value


def _span(
    id: str,
    trajectory_id: str,
    parent_id: str | None,
    name: str,
    kind: str,
    start_ns: int,
    end_ns: int | None,
    status: str,
    error_type: str | None,
    error_message: Any,
    inputs: Any,
    outputs: Any,
    attributes: Any,
    shaped: bool,
    decoder: str | None = None,
) -> Span:
    span = Span.__new__(Span)
    span.id, span.trajectory_id, span.parent_id, span.name = id, trajectory_id, parent_id, name
    span.kind, span.start_ns, span.end_ns, span.status = _KIND_OF[kind], start_ns, end_ns, status
    span.error_type, span.error_message = error_type, error_message
    span.inputs, span.outputs, span.attributes, span.shaped = inputs, outputs, attributes, shaped
    span.decoder = decoder  # the tokenizer's name: the sidecar loads its own (``_shaping``)
    span.trajectory = span.ctx_token = span.implicit = None
    return span


def _trajectory(
    id: str,
    project: str | None,
    experiment: str | None,
    step: Any,
    sample_index: Any,
    rollout_n: Any,
    validate: bool,
    agent_name: str,
    attributes: Any,
    reward: float | None,
    start_ns: int,
    end_ns: int | None,
    status: str,
    error_type: str | None,
    error_message: Any,
) -> Trajectory:
    t = Trajectory(
        project=project,
        experiment=experiment,
        step=step,
        sample_index=sample_index,
        rollout_n=rollout_n,
        validate=validate,
        agent_name=agent_name,
        attributes=attributes,
    )
    t.id, t.reward, t.start_ns, t.end_ns = id, reward, start_ns, end_ns
    t.status, t.error_type, t.error_message = status, error_type, error_message
    return t


def _span_args(
    s: Span, error_message: Any, inputs: Any, outputs: Any, attributes: Any, decoder: str | None = None
) -> tuple:
    """``_span``'s arguments, the payloads as given."""
    return (
        s.id,
        s.trajectory_id,
        s.parent_id,
        s.name,
        _KIND_VALUE[s.kind],
        s.start_ns,
        s.end_ns,
        s.status,
        s.error_type,
        error_message,
        inputs,
        outputs,
        attributes,
        s.shaped,
        decoder,
    )


def tokenizer_name(tokenizer: Any) -> str | None:
    """What a tokenizer is loaded from (its directory or hub name): token2text's tokenizer cannot
    cross to the sidecar, its name can."""
    try:
        name = getattr(tokenizer, "name_or_path", None) if tokenizer is not None else None
    except Exception:  # an object whose attributes fail: nothing to decode with
        return None
    return name if isinstance(name, str) and name else None


def _decoder_name(span: Span) -> str | None:
    """The name of the tokenizer token2text decodes a span's ids with: the one it was given, else
    (a decorated method) its object's ``tokenizer``, as where it is shaped in process."""
    decoder = span.decoder
    if type(decoder) is str:  # a name already (a span that came over the wire)
        return decoder
    if decoder is None and type(span.inputs) is CallArgs:
        try:
            decoder = getattr(span.inputs.owner(), "tokenizer", None)
        except Exception:  # an object whose attribute lookup fails: no decoder
            return None
    return None if decoder is None else tokenizer_name(decoder)


def _trajectory_args(t: Trajectory) -> tuple:
    """``_trajectory``'s arguments."""
    return (
        t.id,
        t.project,
        t.experiment,
        t.step,
        t.sample_index,
        t.rollout_n,
        t.validate,
        t.agent_name,
        t.attributes,
        t.reward,
        t.start_ns,
        t.end_ns,
        t.status,
        t.error_type,
        t.error_message,
    )


def _cut_text(text: str, original: int) -> CutText:
    if type(text) is not str or type(original) is not int or original < len(text):
        raise pickle.UnpicklingError("trace wire refuses a malformed cut string")
    cut = CutText(text)
    cut.original = original
    return cut


_ALLOWED: dict[tuple[str, str], Any] = {
    **{("builtins", c.__name__): c for c in (dict, list, str, int, float, bytes, bool)},
    **{(__name__, f.__name__): f for f in (_plain, _span, _trajectory, _cut_text)},
}
_GLOBALS = {id(obj) for obj in _ALLOWED.values()}


class _Encoder(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        if t is CutText:
            return _cut_text, (str.__str__(obj), obj.original)
        if t is Span:
            return _span, _span_args(
                obj, obj.error_message, obj.inputs, obj.outputs, obj.attributes, _decoder_name(obj)
            )
        if t is Trajectory:
            return _trajectory, _trajectory_args(obj)
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
        text = f"<unrepresentable {type(obj).__name__}: {error_text(exc)}>"
    return str, (text,)


def encode(value: Any) -> bytes:
    """Raises what pickling raised (a structure too deep, say); the caller decides what to do."""
    buf = io.BytesIO()
    _Encoder(buf, protocol=_PROTOCOL).dump(value)
    return buf.getvalue()


def pack_into(append: Callable[[bytes], Any], failed: Callable[[Exception], Any], event: Any) -> None:
    """Pack one event as one record and ``append`` it; ``failed`` gets what stopped it (only if
    even the event's plain copy cannot be pickled). A span carries the name of the tokenizer its
    ids decode with: the sidecar loads it to find the tokens of a secret (and for token2text,
    their text). Runs where the event
    ends, on the rollout's thread, so its objects die when the traced call returns, as untraced
    ones do (held in a queue, they would outlive collections and be promoted:
    benchmarks/RESULTS.md). One Python call per event: in a real loop each call layer costs as
    much as the work (benchmarks/RESULTS.md).

    The record is the event as a tuple of builtins (a span's call arguments bound, a rich result
    as its fields), pickled by this thread's own pickler; a payload the pickler cannot take (a
    cycle, a structure too deep, an object that fails when read) is retried as its plain copy
    (``_pack_plain``)."""
    try:
        if type(event) is Span:
            inputs, outputs = event.inputs, event.outputs
            decoder = _decoder_name(event) if event.decoder is not None or type(inputs) is CallArgs else None
            if type(inputs) is CallArgs:
                inputs = inputs.bind()
            if type(outputs) not in _PLAIN_TYPES:
                outputs = _fields_of(outputs)
            elif type(outputs) is tuple:  # (ToolResponse, reward, metrics), say
                outputs = [_fields_of(x) for x in outputs]
            record: Any = (
                SPAN_END,
                *_span_args(event, event.error_message, inputs, outputs, event.attributes, decoder),
            )
        elif event[KIND] == LEAF_SPAN:
            _, parent, name, span_kind, start_ns, end_ns, inputs, outputs, attributes, decoder, span_id = event
            if type(outputs) not in _PLAIN_TYPES:
                outputs = _fields_of(outputs)
            record = (
                LEAF_SPAN,
                parent.trajectory.id,
                parent.id,
                name,
                _KIND_VALUE[span_kind],
                start_ns,
                end_ns,
                inputs,
                outputs,
                attributes,
                None if decoder is None else tokenizer_name(decoder),
                span_id,
            )
        elif event[KIND] == TRAJECTORY_START or event[KIND] == TRAJECTORY_END:
            record = (event[KIND], *_trajectory_args(event[TRAJECTORY]))
        else:  # a reward, a training record, a running span
            record = event
        try:
            buffer, pickler = _LOCAL.pickler
        except AttributeError:
            buffer, pickler = _LOCAL.pickler = _new_pickler()
        try:
            buffer.seek(0)
            buffer.truncate()
            try:
                pickler.dump(record)
            except _TooLong:  # (rare: a huge value; what the sidecar would cut goes first)
                buffer, pickler = _LOCAL.pickler = _new_pickler()
                buffer.bounded = False
                pickler.dump(_cut_long(record, _cut.chars))
                buffer.bounded = True
            append(buffer.getvalue())
        except Exception:  # a payload the pickler cannot take
            del _LOCAL.pickler  # (its state after a failed dump is not to be trusted)
            _pack_plain(append, record)
    except Exception as exc:
        failed(exc)


class _Cut:
    bytes = 1 << 62  # records past this size are walked and cut (none until the tracer sets it)
    chars = 0


_cut = _Cut()


def cut_before_crossing(max_payload_chars: int | None) -> None:
    """The sidecar keeps ``max_payload_chars`` of a string (``PayloadShaper``): a record past a few
    MB has its longer strings cut before it is pickled and piped whole, keeping that many and a
    margin (a secret that spans the cut is still redacted whole in the sidecar)."""
    if max_payload_chars is None:
        _cut.bytes, _cut.chars = 1 << 62, 0
    else:
        _cut.chars = max_payload_chars + CUT_MARGIN_CHARS
        _cut.bytes = max(4 << 20, 8 * _cut.chars)


def _cut_long(value: Any, keep: int, depth: int = 0) -> Any:
    """``value`` with every string longer than ``keep`` a ``CutText`` (depth-limited walk)."""
    t = type(value)
    if t is str:
        return _cut_text(value[:keep], len(value)) if len(value) > keep else value
    if depth > 64:
        return value
    if t is tuple or t is list:
        return t(_cut_long(v, keep, depth + 1) for v in value)
    if t is dict:
        return {k: _cut_long(v, keep, depth + 1) for k, v in value.items()}
    if t is Span:
        return _span(
            *_span_args(
                value,
                value.error_message,
                _cut_long(value.inputs, keep, depth + 1),
                _cut_long(value.outputs, keep, depth + 1),
                value.attributes,
                _decoder_name(value),
            )
        )
    return value


class _TooLong(Exception):
    """A record grew past ``_cut.bytes`` as it was pickled."""


class _Bounded(io.BytesIO):
    """The pickler's buffer. A write that takes it past ``_cut.bytes`` raises ``_TooLong`` before it
    is copied: the pickler hands a long string's bytes over as a view of the string, so a 200 MB
    value costs no copy of itself before it is cut (``pack_into``)."""

    bounded = True

    def write(self, data: Any) -> int:
        if self.bounded and self.tell() + len(data) > _cut.bytes:
            raise _TooLong
        return super().write(data)


def _new_pickler() -> tuple[_Bounded, pickle.Pickler]:
    """A thread's pickler, kept: making one per event costs a sixth of packing a small span."""
    buffer = _Bounded()
    pickler = _Encoder(buffer, protocol=_PROTOCOL)
    pickler.fast = True  # no memo: events hold no shared references worth one (a cycle raises)
    return buffer, pickler


_LOCAL = threading.local()


def _pack_plain(append: Callable[[bytes], Any], record: tuple) -> None:
    """A record the pickler refused, with its payloads made plain (depth-limited, cycles cut; no
    redaction or truncation: the sidecar still does those); a span whose payloads fail even so
    goes without them."""
    plain = PayloadShaper(NoRedaction(), None).shape
    try:
        if record[KIND] == SPAN_START:
            span = record[SPAN]
            inputs = span.inputs.bind() if type(span.inputs) is CallArgs else span.inputs
            record = (
                SPAN_START,
                _span(
                    *_span_args(
                        span,
                        plain(span.error_message),
                        plain(inputs),
                        plain(span.outputs),
                        plain(span.attributes),
                        _decoder_name(span),
                    )
                ),
            )
        else:
            record = tuple(plain(x) for x in record)
        append(encode(record))
    except Exception as exc:
        if record[KIND] != SPAN_END:
            raise
        problem = unrecorded(exc)
        span = _span(*record[1:])
        error = span.error_message if isinstance(span.error_message, str) else None
        append(encode((SPAN_END, *_span_args(span, error, problem, None, {UNRECORDED: problem}))))


def pack(event: Any) -> bytes:
    """``pack_into`` for one event, returning its record (raises what stopped it)."""
    out: list[bytes] = []
    pack_into(out.append, _reraise, event)
    return out[0]


def _reraise(exc: Exception) -> None:
    raise exc


def join(records: list[bytes]) -> bytes:
    """``pack``'s records as one buffer of [length][data] (``unpack`` reads it). Written by the
    sending thread, not per event."""
    header = _RECORD.pack
    parts = []
    for data in records:
        parts.append(header(len(data)))
        parts.append(data)
    return b"".join(parts)


_RECORD = struct.Struct("<I")
_PLAIN_TYPES = (dict, list, str, int, float, type(None), bool, tuple)


def _fields_of(value: Any) -> Any:
    """A rich value (a pydantic result, a run's output view) as its fields; others as they are
    (the pickler's ``reducer_override`` then converts them). The converter is
    looked up here rather than through ``native``: one call layer fewer per span."""
    t = type(value)
    if t in _PLAIN_TYPES:
        return value
    convert = CONVERTERS.get(t) or converter_for(t)
    try:
        plain = convert(value)
    except Exception:  # a view that fails: the value goes by pickle, as its repr if need be
        return value
    return value if plain is UNKNOWN else plain


def _event(record: tuple) -> Any:
    kind = record[KIND]
    if kind == SPAN_END:
        return _span(*record[1:])
    if kind == LEAF_SPAN:  # its id, unless the traced process gave it one, is given here
        (trajectory_id, parent_id, name, span_kind, start_ns, end_ns, inputs, outputs, attributes, decoder, span_id) = (
            record[1:]
        )
        return _span(
            span_id if type(span_id) is str else new_id(),
            trajectory_id,
            parent_id,
            name,
            span_kind,
            start_ns,
            end_ns,
            STATUS_OK,
            None,
            None,
            inputs,
            outputs,
            attributes,
            False,
            decoder,
        )
    if kind in (TRAJECTORY_START, TRAJECTORY_END):
        return (kind, _trajectory(*record[1:]))
    return record


def _exactly(kind: type) -> Callable[[Any], Any]:
    """The builtin ``kind`` as the decoder calls it: only on a value that already is one (what the
    encoder writes), so a crafted record cannot make it allocate (``bytes(10**9)``, ``list(b"…")``)."""

    def build(value: Any = _MISSING) -> Any:
        if type(value) is not kind:
            raise pickle.UnpicklingError(f"trace wire refuses {kind.__name__}() of a {type(value).__name__}")
        return value

    return build


_MISSING: Any = object()
# (the others cannot be made to allocate more than the record holds)
_DECODED = {**_ALLOWED, **{("builtins", c.__name__): _exactly(c) for c in (list, bytes)}}


class _Decoder(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _DECODED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"trace wire refuses {module}.{name}")
        return found


def decode(data: bytes) -> Any:
    return _Decoder(io.BytesIO(data)).load()


def unpack(data: bytes) -> list[Any]:
    """The events of a ``join`` buffer, in order: one unpickler reads each record where it starts
    (records hold no memo, so nothing carries over from one to the next)."""
    stream = io.BytesIO(data)
    load, seek = _Decoder(stream).load, stream.seek
    events = []
    at, size, end = 0, _RECORD.size, len(data)
    while at < end:
        (length,) = _RECORD.unpack_from(data, at)
        seek(at + size)
        record = load()
        events.append(_span(*record[1:]) if record[KIND] == SPAN_END else _event(record))  # (most are spans)
        at += size + length
    return events
