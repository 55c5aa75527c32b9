"""What the rich values RL code passes become in a trace: plain Python data, decided once per type.

numpy scalars are Python numbers and arrays (nested) lists; torch tensors the same; dataclasses and
pydantic models dicts of their fields; enums their value (or ``Type.NAME``); datetimes ISO text;
bytes a readable marker. Both the wire (on the rollout's thread, ``_wire``) and the shaper (off it,
``_payload``) convert through ``native``, so a value reads back the same whichever path it took.
docs/tracing.md ("What a value becomes") is the table of this module.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import sys
import uuid
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

# The longest list (or array, counted in elements) kept whole; a longer one keeps its head.
MAX_ITEMS = 100_000
BYTES_PREFIX = 32  # how many of a bytes value's bytes its marker shows

UNKNOWN = object()
CONVERTERS: dict[type, Callable[[Any], Any]] = {}


def native(v: Any) -> Any:
    """Plain Python structure for well-known rich objects, or UNKNOWN (also when converting fails).

    An object may say how it is traced with a ``__trace_view__()`` method: the hot path then
    records the object, and the view is computed later, off the rollout's thread.
    """
    t = type(v)
    convert = CONVERTERS.get(t) or converter_for(t)
    try:
        return convert(v)
    except Exception:
        return UNKNOWN


def converter_for(t: type) -> Callable[[Any], Any]:
    """How ``native`` converts instances of ``t`` (it may raise; UNKNOWN when it cannot):
    decided once per type and kept in ``CONVERTERS`` (the checks themselves, a pydantic class's
    ``__getattr__`` among them, cost more than the conversion)."""
    convert = CONVERTERS[t] = _converter_for(t)
    return convert


def _converter_for(t: type) -> Callable[[Any], Any]:
    view = getattr(t, "__trace_view__", None)
    if view is not None:
        return view
    if isinstance(t, type) and issubclass(t, type):
        return _unknown  # a class: its repr, whatever its metaclass offers
    if hasattr(t, "__pydantic_fields__") and hasattr(t, "__pydantic_fields_set__"):
        return _pydantic_fields
    if dataclasses.is_dataclass(t):
        return _dataclass_fields
    package = getattr(t, "__module__", "").split(".")[0]
    if package == "numpy":
        return _numpy_converter(t)
    if package == "torch" and hasattr(t, "numel") and hasattr(t, "tolist"):
        return _tensor
    if package == "pandas":
        return _pandas_converter(t)
    for base, convert in _BY_BASE:
        if issubclass(t, base):
            return convert
    return _unknown


def _pydantic_fields(v: Any) -> dict[str, Any]:
    """pydantic v2: the fields as set (model_dump costs ten times as much)."""
    extra = v.__pydantic_extra__
    return {**v.__dict__, **extra} if extra else dict(v.__dict__)


def _dataclass_fields(v: Any) -> dict[str, Any]:
    return {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}


def _numpy_converter(t: type) -> Callable[[Any], Any]:
    np = sys.modules["numpy"]
    if issubclass(t, np.ndarray):
        return _array
    if issubclass(t, np.generic):
        return _numpy_scalar
    return _unknown  # a dtype, a random generator, ...: their repr


def _numpy_scalar(v: Any) -> Any:
    return v.item()  # np.float32(1.0) -> 1.0; np.str_ -> str; np.datetime64 -> datetime


def _array(a: Any) -> Any:
    """An array as nested lists (an object array element by element: the shaper walks them), or,
    past ``MAX_ITEMS`` elements, its head with its dtype and shape."""
    if a.size <= MAX_ITEMS:
        return a.tolist()
    return _truncated(str(a.dtype), list(a.shape), a.size, a.reshape(-1)[:MAX_ITEMS].tolist())


def _tensor(t: Any) -> Any:
    t = t.detach()
    n = t.numel()
    if n <= MAX_ITEMS:
        return t.cpu().tolist()
    return _truncated(str(t.dtype).removeprefix("torch."), list(t.shape), n, t.reshape(-1)[:MAX_ITEMS].cpu().tolist())


def _truncated(dtype: str, shape: list[int], size: int, head: list[Any]) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "values": head, "truncated": size - len(head)}


def _pandas_converter(t: type) -> Callable[[Any], Any]:
    pd = sys.modules["pandas"]
    if issubclass(t, pd.DataFrame):
        return lambda df: df.head(MAX_ITEMS).to_dict(orient="records")
    if issubclass(t, pd.Series | pd.Index):
        return lambda s: s[:MAX_ITEMS].tolist()
    for base, convert in _BY_BASE:  # Timestamp is a datetime, Timedelta a timedelta
        if issubclass(t, base):
            return convert
    return _unknown


def _enum(v: enum.Enum) -> Any:
    """A member mixed with a builtin (StrEnum, IntEnum) is its value; any other ``Type.NAME``."""
    if isinstance(v, str | int | float):
        return v._value_
    return f"{type(v).__name__}.{v.name}"


def bytes_marker(b: bytes | bytearray | memoryview) -> str:
    """What a bytes value is stored as: its length and its first ``BYTES_PREFIX`` bytes, escaped
    (``<5 bytes: b'\\xffabc\\x00'>``)."""
    view = memoryview(b)
    try:
        head = bytes(view.cast("B")[:BYTES_PREFIX])
    except TypeError:  # not contiguous
        head = view.tobytes()[:BYTES_PREFIX]
    return f"<{view.nbytes} bytes: {head!r}{'…' if view.nbytes > BYTES_PREFIX else ''}>"


def error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception, whatever its ``__str__`` does (markers name it)."""
    try:
        message = str(exc)
    except Exception:
        message = "?"
    return f"{type(exc).__name__}: {message}"[:200]


def _unknown(v: Any) -> Any:
    return UNKNOWN


_BY_BASE: tuple[tuple[type | tuple[type, ...], Callable[[Any], Any]], ...] = (
    (enum.Enum, _enum),
    ((datetime.date, datetime.time), lambda v: v.isoformat()),  # a datetime is a date
    (datetime.timedelta, lambda v: v.total_seconds()),
    ((decimal.Decimal, uuid.UUID, complex), str),  # a Decimal's text is exact
    (PurePath, lambda v: v.__fspath__()),
    ((bytes, bytearray, memoryview), bytes_marker),
)
