"""GRPO's view of a group: each rollout's reward against the group's mean (and std)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rollscope.store.records import TrajectoryRecord


@dataclass
class GroupMember:
    record: TrajectoryRecord
    advantage: float | None  # reward - group mean
    normalized: float | None  # (reward - mean) / std, as GRPO scales it; None when std is 0


def group_advantages(records: list[TrajectoryRecord]) -> tuple[float | None, float | None, list[GroupMember]]:
    """(mean, std, members): rollouts without a reward get no advantage and do not count."""
    rewards = [r.reward for r in records if r.reward is not None]
    if not rewards:
        return None, None, [GroupMember(r, None, None) for r in records]
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    members = []
    for r in records:
        adv = None if r.reward is None else r.reward - mean
        members.append(GroupMember(r, adv, None if adv is None or std == 0 else adv / std))
    return mean, std, members
