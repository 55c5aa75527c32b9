"""Turn-by-turn comparison of two trajectories.

A "turn" is an LLM or tool span, in start order: what the model said and what the tools answered
are what differ between two rollouts of one prompt, so that is what gets lined up. Identifiers made
per call (a request id, a tool instance id, anything shaped like a UUID) differ between any two
rollouts; they are compared apart (``ids``) and never make two turns diverge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rollscope.store.records import SpanRecord, TrajectoryRecord

_TURN_KINDS = ("llm", "tool")
_TEXT_KEYS = ("response_text", "text", "content", "result", "output_text")
_ID_KEYS = frozenset({"request_id", "instance_id", "id", "call_id", "tool_call_id", "session_id", "trace_id"})
_ID_SHAPED = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
ID = "<id>"


def without_ids(value: Any) -> Any:
    """``value`` with per-call identifiers replaced by ``<id>``: what two rollouts can share."""
    if isinstance(value, dict):
        return {k: ID if k in _ID_KEYS and isinstance(v, str | int) else without_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    if isinstance(value, str):
        return _ID_SHAPED.sub(ID, value)
    return value


def ids_of(value: Any) -> list[Any]:
    """The per-call identifiers ``without_ids`` hides, in order."""
    found: list[Any] = []
    if isinstance(value, dict):
        for k, v in value.items():
            found.extend([v] if k in _ID_KEYS and isinstance(v, str | int) else ids_of(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(ids_of(v))
    elif isinstance(value, str):
        found.extend(_ID_SHAPED.findall(value))
    return found


def turn_text(span: SpanRecord) -> str | None:
    """The most readable output of a turn: decoded text when present, else the raw output."""
    out = span.outputs
    if isinstance(out, dict):
        for key in _TEXT_KEYS:
            if isinstance(out.get(key), str):
                return out[key]
    if out is None:
        return None
    return out if isinstance(out, str) else repr(out)


@dataclass
class TurnDiff:
    index: int
    left: SpanRecord | None
    right: SpanRecord | None
    changed: list[str] = field(default_factory=list)
    ids_differ: bool = False  # only per-call identifiers differ (not a divergence)

    @property
    def same(self) -> bool:
        return not self.changed


@dataclass
class TrajectoryDiff:
    left: TrajectoryRecord
    right: TrajectoryRecord
    fields: dict[str, tuple[Any, Any]]
    turns: list[TurnDiff]

    @property
    def first_divergence(self) -> int | None:
        return next((t.index for t in self.turns if t.changed), None)

    @property
    def first_divergent_model_turn(self) -> int | None:
        """The first diverging row counted in model turns: how many llm turns precede it (itself
        included when it is one), minus one; None when nothing diverges."""
        first = self.first_divergence
        if first is None:
            return None
        before = [t for t in self.turns[: first + 1] if (t.left or t.right) is not None
                  and (t.left or t.right).kind == "llm"]  # type: ignore[union-attr]  # fmt: skip
        return max(len(before) - 1, 0)


def _turns(record: TrajectoryRecord) -> list[SpanRecord]:
    return [s for s in record.spans if s.kind in _TURN_KINDS]


# What the trainer did, compared when either side has it (a replay has none: the original's shows)
_TRAINING_FIELDS = ("advantage", "policy_version", "step", "uid")


def diff_trajectories(left: TrajectoryRecord, right: TrajectoryRecord) -> TrajectoryDiff:
    summary = ("status", "reward", "num_llm_calls", "num_tool_calls", "num_errors")
    fields = {f: (getattr(left, f), getattr(right, f)) for f in summary if getattr(left, f) != getattr(right, f)}
    trained = (left.training, right.training)
    if trained != (None, None):
        for f in _TRAINING_FIELDS:
            pair = tuple(None if t is None else getattr(t, f) for t in trained)
            if pair[0] != pair[1]:
                fields[f"training.{f}"] = pair
    a, b = _turns(left), _turns(right)
    turns = []
    for i in range(max(len(a), len(b))):
        ls = a[i] if i < len(a) else None
        rs = b[i] if i < len(b) else None
        changed: list[str] = []
        if ls is None or rs is None:
            changed.append("missing")
        else:
            for name, getter in (
                ("name", lambda s: s.name),
                ("status", lambda s: s.status),
                ("inputs", lambda s: without_ids(s.inputs)),
                ("output", lambda s: without_ids(turn_text(s))),
                ("error", lambda s: without_ids(s.error_message)),
            ):
                if getter(ls) != getter(rs):
                    changed.append(name)
        ids_differ = ls is not None and rs is not None and ids_of(ls.inputs) != ids_of(rs.inputs)
        turns.append(TurnDiff(i, ls, rs, changed, ids_differ))
    return TrajectoryDiff(left, right, fields, turns)
