"""A store's GRPO groups (the rollouts of one prompt at one step), read a step at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rollscope.store.reader import TraceStore
from rollscope.trajectory.records import TrajectoryRecord


def groups_by_step(store: TraceStore, **filters: Any) -> Iterator[list[list[TrajectoryRecord]]]:
    """Each step's GRPO groups matching ``filters`` (the filters of ``traces ls``), a step (of one
    project and experiment) at a time: memory holds one step's trajectories, never the store's."""
    for stats in store.steps(**filters):
        records = store.trajectories(
            **{**filters, "project": stats.project, "experiment": stats.experiment, "step": stats.step}, order_by="step"
        )
        if stats.step is None:
            records = [r for r in records if r.step is None]
        store.load_spans([r.id for r in records])  # a remote source's, a step's in a few requests
        by_sample: dict[str, list[TrajectoryRecord]] = {}
        for r in records:
            by_sample.setdefault(repr(r.sample_index), []).append(r)
        if by_sample:
            yield list(by_sample.values())


def step_groups(store: TraceStore, **filters: Any) -> Iterator[list[TrajectoryRecord]]:
    """``groups_by_step``'s groups, one by one."""
    for groups in groups_by_step(store, **filters):
        yield from groups
