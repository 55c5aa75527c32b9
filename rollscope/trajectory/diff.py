"""Turn-by-turn comparison of two trajectories.

A turn is one LLM call with the tool calls that answer it (those after it, before the next LLM
call), in start order: row K of a diff is model turn K on either side, its calls under it, so a
tool call is never lined up with an LLM call. Identifiers made per call (a request id, a tool
instance id, anything shaped like a UUID) differ between any two rollouts; they are left out of
the comparison (``without_ids``) and never make two turns diverge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rollscope.trajectory.records import SpanRecord, TrajectoryRecord

_TEXT_KEYS = ("response_text", "text", "content", "result", "output_text")
# (``span``: the turn a prompt stored as what it adds continues, ``prompt_base``'s: another id in another rollout)
_ID_KEYS = frozenset({"request_id", "instance_id", "id", "call_id", "tool_call_id", "session_id", "trace_id", "span"})
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
    left: SpanRecord | None  # each side's LLM call of this turn (None: that side has no such turn)
    right: SpanRecord | None
    left_tools: list[SpanRecord] = field(default_factory=list)  # the tool calls that answered it
    right_tools: list[SpanRecord] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

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
        """The first diverging turn counted in model turns (a leading row of tool calls made
        before any LLM call is not one); None when nothing diverges."""
        first = self.first_divergence
        if first is None:
            return None
        before = [t for t in self.turns[: first + 1] if (t.left or t.right) is not None]
        return max(len(before) - 1, 0)


def turns_of(record: TrajectoryRecord) -> list[tuple[SpanRecord | None, list[SpanRecord]]]:
    """(LLM call, the tool calls after it) per turn, in the record's span order; tool calls made
    before any LLM call form a first turn without one."""
    found: list[tuple[SpanRecord | None, list[SpanRecord]]] = []
    for span in record.spans:
        if span.kind == "llm":
            found.append((span, []))
        elif span.kind == "tool":
            if not found:
                found.append((None, []))
            found[-1][1].append(span)
    return found


# What the trainer did, compared when either side has it (a replay has none: the original's shows)
_TRAINING_FIELDS = ("advantage", "policy_version", "step", "uid")
_COMPARED = (
    ("name", lambda s: s.name),
    ("status", lambda s: s.status),
    ("inputs", lambda s: without_ids(s.inputs)),
    ("output", lambda s: without_ids(turn_text(s))),
    ("error", lambda s: without_ids(s.error_message)),
)


def _call(span: SpanRecord) -> tuple[Any, ...]:
    """What a tool call did, per-call ids aside."""
    return tuple(getter(span) for _, getter in _COMPARED)


def diff_trajectories(left: TrajectoryRecord, right: TrajectoryRecord) -> TrajectoryDiff:
    summary = ("status", "reward", "num_llm_calls", "num_tool_calls", "num_errors")
    fields = {f: (getattr(left, f), getattr(right, f)) for f in summary if getattr(left, f) != getattr(right, f)}
    trained = (left.training, right.training)
    if trained != (None, None):
        for f in _TRAINING_FIELDS:
            pair = tuple(None if t is None else getattr(t, f) for t in trained)
            if pair[0] != pair[1]:
                fields[f"training.{f}"] = pair
    a, b = turns_of(left), turns_of(right)
    turns = []
    for i in range(max(len(a), len(b))):
        (ls, ltools), (rs, rtools) = (a[i] if i < len(a) else (None, [])), (b[i] if i < len(b) else (None, []))
        changed: list[str] = []
        if i >= len(a) or i >= len(b) or (ls is None) != (rs is None):
            changed.append("missing")
        elif ls is not None and rs is not None:
            changed += [name for name, getter in _COMPARED if getter(ls) != getter(rs)]
        if "missing" not in changed and [_call(t) for t in ltools] != [_call(t) for t in rtools]:
            changed.append("tool calls")
        turns.append(TurnDiff(i, ls, rs, ltools, rtools, changed))
    return TrajectoryDiff(left, right, fields, turns)
