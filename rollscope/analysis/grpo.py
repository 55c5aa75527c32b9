"""GRPO's view of a group: each rollout's reward against the group's mean (and std)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

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
