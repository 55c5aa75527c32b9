"""What a run is doing now: its running trajectories, how long since each last did something, and
which are stalled. The store records a span when it ends, so a trajectory's last activity is its
newest ended span (or its start); what follows that span is what it is in now."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rollscope.store.reader import TraceStore
from rollscope.trajectory.records import TrajectoryRecord


@dataclass
class Running:
    record: TrajectoryRecord
    running_s: float
    idle_s: float  # since its last span ended (or it started)
    last_ns: int  # when that was
    turns: int  # llm turns ended so far
    last: str  # what it did last, in words
    stalled: bool


def last_activity(record: TrajectoryRecord) -> tuple[int, str, int]:
    """(when the trajectory last did something, in ns; what, in words; llm turns ended so far)."""
    spans = [s for s in record.spans if s.end_ns is not None]
    turns = sum(1 for s in spans if s.kind == "llm")
    if not spans:
        return record.start_ns, "nothing ended since it started", 0
    last = max(spans, key=lambda s: s.end_ns)
    plural = "s" if turns != 1 else ""
    return last.end_ns, f"last: {last.name} ({last.kind}) ended, after {turns} llm turn{plural}", turns


def running(store: TraceStore, experiment: str | None = None, stall_s: float = 120.0) -> list[Running]:
    """The running trajectories, oldest first, each with its idle time and whether it passed ``stall_s``."""
    now = time.time_ns()
    out = []
    for record in store.trajectories(experiment=experiment, status="running", order_by="start"):
        last, what, turns = last_activity(record)
        last = last if last is not None else now  # (a start no reader can use and nothing ended: idle unknown)
        idle = (now - last) / 1e9
        started = record.start_ns if record.start_ns is not None else last  # (a start no reader can use)
        out.append(Running(record, (now - started) / 1e9, idle, last, turns, what, idle > stall_s))
    return out
