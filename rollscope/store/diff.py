"""Turn-by-turn comparison of two trajectories.

A "turn" is an LLM or tool span, in start order: what the model said and what the tools answered
are what differ between two rollouts of one prompt, so that is what gets lined up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollscope.store.records import SpanRecord, TrajectoryRecord

_TURN_KINDS = ("llm", "tool")
_TEXT_KEYS = ("response_text", "text", "content", "result", "output_text")


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


def _turns(record: TrajectoryRecord) -> list[SpanRecord]:
    return [s for s in record.spans if s.kind in _TURN_KINDS]


def diff_trajectories(left: TrajectoryRecord, right: TrajectoryRecord) -> TrajectoryDiff:
    summary = ("status", "reward", "num_llm_calls", "num_tool_calls", "num_errors")
    fields = {f: (getattr(left, f), getattr(right, f)) for f in summary if getattr(left, f) != getattr(right, f)}
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
                ("inputs", lambda s: s.inputs),
                ("output", turn_text),
                ("error", lambda s: s.error_message),
            ):
                if getter(ls) != getter(rs):
                    changed.append(name)
        turns.append(TurnDiff(i, ls, rs, changed))
    return TrajectoryDiff(left, right, fields, turns)
