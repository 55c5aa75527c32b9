"""GRPO's view of a group: each rollout's reward against the group's mean (and std)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rollscope.store.reader import TraceStore
from rollscope.trajectory.records import TrajectoryRecord


@dataclass
class GroupMember:
    record: TrajectoryRecord
    advantage: float | None  # reward - group mean
    normalized: float | None  # (reward - mean) / std, as GRPO scales it; None when std is 0


Advantage = tuple[float | None, float | None]  # (reward - mean, normalised by std)


def advantages(rewards: list[float | None]) -> tuple[float | None, float | None, list[Advantage]]:
    """(mean, std, [(reward - mean, (reward - mean) / std)] per reward): rewards that are None get
    no advantage and do not count; the normalised one is None when std is 0."""
    known = [r for r in rewards if r is not None]
    if not known:
        return None, None, [(None, None)] * len(rewards)
    mean = statistics.fmean(known)
    std = statistics.pstdev(known) if len(known) > 1 else 0.0
    out = [(None, None) if r is None else (r - mean, None if std == 0 else (r - mean) / std) for r in rewards]
    return mean, std, out


def group_advantages(records: list[TrajectoryRecord]) -> tuple[float | None, float | None, list[GroupMember]]:
    """(mean, std, members): rollouts without a reward get no advantage and do not count."""
    mean, std, each = advantages([r.reward for r in records])
    return mean, std, [GroupMember(r, adv, norm) for r, (adv, norm) in zip(records, each, strict=True)]


def groups_by_step(store: TraceStore, **filters: Any) -> Iterator[list[list[TrajectoryRecord]]]:
    """Each step's GRPO groups matching ``filters`` (the filters of ``traces ls``), a step (of one
    project and experiment) at a time: memory holds one step's trajectories, never the store's."""
    for stats in store.steps(**filters):
        records = store.trajectories(**{**filters, "project": stats.project, "experiment": stats.experiment,
                                        "step": stats.step}, order_by="step")  # fmt: skip
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
