"""One prompt (``sample_index``) across a run's steps: how its GRPO group did each time it was drawn.

Per (project, experiment, step): the group's size, reward mean and spread, the mean response
tokens, turns and tool calls, and — where the trainer recorded it — the advantages it trained on
and the policy version that generated it. A prompt whose group is solved (or failed) by every
rollout step after step teaches nothing: that is visible here at a glance.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from rollscope.store.reader import TraceStore, null_first


@dataclass
class PromptStep:
    project: str | None
    experiment: str | None
    step: Any
    rollouts: int
    rewarded: int
    mean_reward: float | None
    std_reward: float | None  # population spread of the group's rewards (0: every rollout alike)
    mean_tokens: float
    mean_turns: float
    mean_tool_calls: float
    advantages: list[float] = field(default_factory=list)  # the trainer's, where recorded
    policy_versions: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    @property
    def zero_variance(self) -> bool:
        return self.rewarded >= 2 and self.std_reward == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "experiment": self.experiment,
            "step": self.step,
            "rollouts": self.rollouts,
            "rewarded": self.rewarded,
            "mean_reward": self.mean_reward,
            "std_reward": self.std_reward,
            "mean_tokens": self.mean_tokens,
            "mean_turns": self.mean_turns,
            "mean_tool_calls": self.mean_tool_calls,
            "zero_variance": self.zero_variance,
            "advantages": self.advantages,
            "policy_versions": self.policy_versions,
            "ids": self.ids,
        }


def prompt_history(
    store: TraceStore,
    sample_index: Any,
    *,
    experiment: str | None = None,
    project: str | None = None,
    validate: bool = False,
) -> list[PromptStep]:
    """The prompt's group at every step it was drawn, by experiment then step. Replays are left out."""
    records = store.trajectories(
        sample_index=sample_index,
        experiment=experiment,
        project=project,
        validate=validate,
        replays=False,
        order_by="experiment",
        limit=None,
    )
    by_step: dict[tuple, list] = {}
    for r in records:
        by_step.setdefault((r.project, r.experiment, r.step), []).append(r)
    training = {t.trajectory_id: t for t in store.training_records(project=project, experiment=experiment)}
    out = []
    for (proj, exp, step), group in sorted(by_step.items(), key=lambda kv: tuple(map(null_first, kv[0]))):
        rewards = [r.reward for r in group if r.reward is not None]
        joined = [training[r.id] for r in group if r.id in training]
        n = len(group)
        out.append(
            PromptStep(
                proj,
                exp,
                step,
                n,
                len(rewards),
                statistics.fmean(rewards) if rewards else None,
                statistics.pstdev(rewards) if rewards else None,
                sum(r.num_tokens for r in group) / n,
                sum(r.num_llm_calls for r in group) / n,
                sum(r.num_tool_calls for r in group) / n,
                [t.advantage for t in joined if t.advantage is not None],
                sorted({t.policy_version for t in joined if t.policy_version is not None}),
                [r.id for r in group],
            )
        )
    return out
