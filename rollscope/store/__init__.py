"""The embedded trace store: a directory of per-process SQLite shards, and its reader."""

from rollscope.store.reader import TraceStore
from rollscope.store.schema import resolve_dir
from rollscope.trajectory.diff import TrajectoryDiff, TurnDiff, diff_trajectories
from rollscope.trajectory.records import SpanRecord, TrajectoryRecord

__all__ = [
    "SpanRecord",
    "TraceStore",
    "TrajectoryDiff",
    "TrajectoryRecord",
    "TurnDiff",
    "diff_trajectories",
    "resolve_dir",
]
