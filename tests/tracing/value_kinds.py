"""Every kind of value RL code hands a traced call, with what a trace must hold of it: the fixed
table the backends' tests read back (docs/tracing.md, "What a value becomes"), and ``plain``, the
expected form of any value, written here independently of rollscope's converters."""

import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from pathlib import PurePosixPath

import numpy as np
import pandas as pd
import pydantic
import torch


class Color(enum.Enum):
    RED = 1


class Mode(str, enum.Enum):
    GREEDY = "greedy"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Step:
    reward: np.float32
    ids: tuple


class Message(pydantic.BaseModel):
    role: str
    content: str


class BadRepr:
    def __repr__(self):
        raise ValueError("no repr for you")


class BadIteration(dict):
    def __iter__(self):
        raise RuntimeError("changed while read")

    items = keys = values = __iter__


def _object_array(items):
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _cyclic():
    loop: list = [1]
    loop.append(loop)
    return loop


def cut_cycle(depth: int = 0) -> list:
    """A list that holds itself, as stored when it sits ``depth`` levels down a payload: walked to
    the depth where cycles are looked for (12), then cut where it repeats."""
    cut: list = [1, "<cycle: list>"]
    for _ in range(12 - depth):
        cut = [1, cut]
    return cut


BIG = 100_000  # rollscope.tracing._values.MAX_ITEMS

# (name, value, what the trace holds)
TABLE = [
    ("np.int64", np.int64(7), 7),
    ("np.int32", np.int32(-3), -3),
    ("np.uint8", np.uint8(255), 255),
    ("np.float32", np.float32(1.0), 1.0),
    ("np.float64", np.float64(2.5), 2.5),
    ("np.bool_", np.bool_(True), True),
    ("np.str_", np.str_("hi"), "hi"),
    ("float array", np.arange(3.0), [0.0, 1.0, 2.0]),
    ("int matrix", np.arange(4, dtype=np.int16).reshape(2, 2), [[0, 1], [2, 3]]),
    (
        "object array of messages",
        _object_array([{"role": "user", "content": "hi"}]),
        [{"role": "user", "content": "hi"}],
    ),
    ("dict of numpy floats", {"acc": np.float32(0.5), "n": np.int64(2)}, {"acc": 0.5, "n": 2}),
    ("tuple", (1, "a", np.float64(0.25)), [1, "a", 0.25]),
    ("torch int tensor", torch.tensor([[1, 2], [3, 4]]), [[1, 2], [3, 4]]),
    ("torch float tensor", torch.tensor([0.5, -1.0]), [0.5, -1.0]),
    ("torch scalar", torch.tensor(3), 3),
    ("torch bfloat16", torch.tensor([1.5], dtype=torch.bfloat16), [1.5]),
    (
        "long tensor, cut",
        torch.zeros(BIG + 5, dtype=torch.int8),
        {"dtype": "int8", "shape": [BIG + 5], "values": [0] * BIG, "truncated": 5},
    ),
    (
        "long array, cut",
        np.ones((2, BIG), dtype=np.float32),
        {"dtype": "float32", "shape": [2, BIG], "values": [1.0] * BIG, "truncated": BIG},
    ),
    ("long list of numbers (a context's token ids), whole", list(range(BIG + 2)), list(range(BIG + 2))),
    ("long list of other values, cut", [None] * (BIG + 2), [*[None] * BIG, "…[truncated 2 items]"]),
    ("dataclass", Step(np.float32(0.75), (1, 2)), {"reward": 0.75, "ids": [1, 2]}),
    ("pydantic model", Message(role="user", content="hi"), {"role": "user", "content": "hi"}),
    ("enum", Color.RED, "Color.RED"),
    ("str enum", Mode.GREEDY, "greedy"),
    ("int enum", Level.HIGH, 3),
    ("datetime", datetime.datetime(2026, 12, 2, 11, 30, 5), "2026-12-02T11:30:05"),
    ("aware datetime", datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc), "2026-01-02T00:00:00+00:00"),
    ("date", datetime.date(2026, 12, 2), "2026-12-02"),
    ("timedelta", datetime.timedelta(seconds=90), 90.0),
    ("Decimal", decimal.Decimal("1.10"), "1.10"),
    ("UUID", uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
    ("path", PurePosixPath("/data/x.parquet"), "/data/x.parquet"),
    ("set", {3, 1, 2}, [1, 2, 3]),
    ("frozenset", frozenset({"b", "a"}), ["a", "b"]),
    ("bytes", b"\xff\x00abc", "<5 bytes: b'\\xff\\x00abc'>"),
    ("long bytes", bytes(range(40)), "<40 bytes: " + repr(bytes(range(32))) + "…>"),
    ("bytearray", bytearray(b"ab"), "<2 bytes: b'ab'>"),
    ("pandas series", pd.Series([1.5, 2.5]), [1.5, 2.5]),
    ("pandas frame", pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}), [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]),
    ("pandas timestamp", pd.Timestamp("2026-12-02 11:30"), "2026-12-02T11:30:00"),
    ("nan", math.nan, "nan"),
    ("infinities", [math.inf, -math.inf, np.float32("inf")], ["inf", "-inf", "inf"]),
    ("int past 64 bits", 2**70, str(2**70)),
    ("lone surrogate", "a\ud800b", "a\\ud800b"),
    ("surrogate-escaped bytes", b"ok \xff\xfe".decode("utf-8", "surrogateescape"), "ok \\udcff\\udcfe"),
    ("surrogate in a key", {"k\udc80": 1}, {"k\\udc80": 1}),
    ("repr raises", BadRepr(), "<unrepresentable BadRepr: ValueError: no repr for you>"),
    (
        "iteration raises",
        {"ok": 1, "bad": BadIteration(a=1)},
        {"ok": 1, "bad": "<unreadable BadIteration: RuntimeError: changed while read>"},
    ),
    ("cycle", _cyclic(), cut_cycle()),
]


def plain(v):
    """What a trace holds of ``v``, for the kinds the property test draws (short strings: below
    redaction's 8 characters; sets of one type)."""
    if isinstance(v, str):
        return v.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer):
        return int(v) if -(2**63) <= int(v) < 2**63 else str(int(v))
    if isinstance(v, float | np.floating):
        return float(v) if math.isfinite(v) else str(float(v))
    if isinstance(v, bytes):
        shown = repr(v[:32]) + ("…" if len(v) > 32 else "")
        return f"<{len(v)} bytes: {shown}>"
    if isinstance(v, np.ndarray | torch.Tensor):
        return plain(v.tolist())
    if isinstance(v, enum.Enum):
        return v.value if isinstance(v, int | str) else f"{type(v).__name__}.{v.name}"
    if isinstance(v, datetime.datetime | datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if dataclasses.is_dataclass(v):
        return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, pydantic.BaseModel):
        return {k: plain(x) for k, x in v.__dict__.items()}
    if isinstance(v, dict):
        return {plain(k): plain(x) for k, x in v.items()}
    if isinstance(v, set | frozenset):
        return [plain(x) for x in sorted(v, key=repr)]
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    return v
