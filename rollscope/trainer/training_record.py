"""What training did with each trajectory of a step, from the arrays of verl's batch: the record
joined to the stored trajectory (``verl_hook`` captures the arrays on verl's driver).

Per trajectory: the GRPO group (verl's ``uid``) with its size and reward mean/std, the advantage
(one value for GRPO, per token where an estimator gives different values per token), the policy
versions that generated its turns and how far behind the trainer they were, and the trainer's
log-probabilities of the response tokens (``old_log_probs``) beside the rollout server's, with
the loss mask. The log-prob difference Δ = trainer - rollout counts only tokens the loss uses
(``response_mask`` 1): a tool response or padding has no rollout log-prob (verl fills 0), so
its "difference" is an artefact of tens of nats, kept apart as ``masked_delta_max``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

# Per-token lists in a record; the rest are scalars (indexed columns in the store, tags elsewhere).
TOKEN_FIELDS = ("old_log_probs", "rollout_log_probs", "response_mask", "advantages")
_CONSTANT = 1e-6  # per-token advantages within this of each other are one value (GRPO's broadcast)


@dataclass
class StepArrays:
    """One training step's batch, as verl's driver holds it after computing advantages. Tensors
    are (rows, response length), right-padded; ``lengths`` is each row's response length."""

    step: int  # verl's global_steps: the trainer step that consumed these rollouts
    trajectory_ids: Sequence[Any]  # rollscope's id per row (None: a row rollscope did not trace)
    uids: Sequence[Any]
    response_mask: torch.Tensor
    advantages: torch.Tensor
    scores: torch.Tensor  # token_level_scores: verl's reward, on the last response token
    rewards: torch.Tensor  # token_level_rewards: the same after a KL penalty in the reward, if any
    lengths: torch.Tensor
    old_log_probs: torch.Tensor | None = None
    rollout_log_probs: torch.Tensor | None = None
    min_versions: Sequence[Any] = ()  # the weight version of each row's first and last turn
    max_versions: Sequence[Any] = ()
    estimator: str = "grpo"


def _version(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def records(step: StepArrays) -> list[tuple[str, dict[str, Any]]]:
    """(trajectory id, record) for every traced row of the step. Vectorised over the batch; the
    per-row work is slicing and ``tolist``."""
    rows = len(step.uids)
    mask = step.response_mask.float()
    scores = step.scores.float().sum(-1)
    rewards = step.rewards.float().sum(-1)
    group_stats = _group_stats(step.uids, scores)
    tokens = mask.sum(-1)
    advantage = (step.advantages.float() * mask).sum(-1) / tokens.clamp(min=1)
    spread = ((step.advantages.float() - advantage[:, None]).abs() * mask).amax(-1)
    positions = torch.arange(mask.shape[-1])[None, :]
    inside = positions < step.lengths[:, None]
    masked = inside & (mask == 0)
    deltas = _logprob_deltas(step, mask, tokens, masked)
    out = []
    for i in range(rows):
        tid = step.trajectory_ids[i]
        if tid is None:
            continue
        n = int(step.lengths[i])
        size, mean, std = group_stats[step.uids[i]]
        low, high = (_version(step.min_versions[i]) if len(step.min_versions) else None,
                     _version(step.max_versions[i]) if len(step.max_versions) else None)  # fmt: skip
        record: dict[str, Any] = {
            "step": step.step, "uid": str(step.uids[i]), "estimator": step.estimator,
            "group_size": size, "group_mean": mean, "group_std": std,
            "score": float(scores[i]), "reward": float(rewards[i]), "advantage": float(advantage[i]),
            # the trainer at step S updates the weights of version S-1: a rollout of those is on-policy
            "policy_version": low, "policy_version_max": high,
            "lag": None if low is None else step.step - 1 - low,
            "tokens": int(tokens[i]), "masked_tokens": int(masked[i].sum()), "length": n,
            "response_mask": step.response_mask[i, :n].int().tolist(),
        }  # fmt: skip
        if float(spread[i]) > _CONSTANT:
            record["advantages"] = step.advantages[i, :n].float().tolist()
        if step.old_log_probs is not None:
            record["old_log_probs"] = step.old_log_probs[i, :n].float().tolist()
        if step.rollout_log_probs is not None:
            record["rollout_log_probs"] = step.rollout_log_probs[i, :n].float().tolist()
        if deltas is not None and record["tokens"]:
            delta_max, delta_at, delta_mean, masked_max = deltas
            record["logprob_delta_max"] = float(delta_max[i])
            record["logprob_delta_position"] = int(delta_at[i])
            record["logprob_delta_mean"] = float(delta_mean[i])
            record["masked_delta_max"] = float(masked_max[i]) if record["masked_tokens"] else None
        out.append((str(tid), record))
    return out


def _group_stats(uids: Sequence[Any], scores: torch.Tensor) -> dict[Any, tuple[int, float, float | None]]:
    """Per GRPO group (verl's uid): its size, mean score and standard deviation (torch's
    unbiased std, as verl's GRPO takes it; None for a group of one)."""
    by_group: dict[Any, list[int]] = {}
    for i, uid in enumerate(uids):
        by_group.setdefault(uid, []).append(i)
    stats = {}
    for uid, members in by_group.items():
        values = scores[members]
        stats[uid] = (len(members), float(values.mean()), float(values.std()) if len(members) > 1 else None)
    return stats


def _logprob_deltas(step: StepArrays, mask: torch.Tensor, tokens: torch.Tensor,
                    masked: torch.Tensor) -> tuple[torch.Tensor, ...] | None:  # fmt: skip
    """Per row, how far the trainer's log-probs are from the rollout's: the largest gap over the
    tokens the loss counts and where it is, the mean gap there, and the largest gap over the
    masked tokens inside the response (tool output). None without both log-probs."""
    if step.old_log_probs is None or step.rollout_log_probs is None:
        return None
    delta = (step.old_log_probs.float() - step.rollout_log_probs.float()).abs()
    loss_delta = torch.where(mask > 0, delta, torch.zeros_like(delta))
    delta_max, delta_at = loss_delta.max(-1)
    delta_mean = loss_delta.sum(-1) / tokens.clamp(min=1)
    masked_max = torch.where(masked, delta, torch.zeros_like(delta)).amax(-1)
    return delta_max, delta_at, delta_mean, masked_max


def token_deltas(record: dict[str, Any]) -> list[float | None]:
    """Per response position: trainer - rollout log-prob where the loss uses the token, None where
    it does not (a tool response, a masked turn) or either side is missing."""
    old, rollout, mask = record.get("old_log_probs"), record.get("rollout_log_probs"), record.get("response_mask")
    if not old or not rollout or not mask:
        return []
    return [o - r if m else None for o, r, m in zip(old, rollout, mask, strict=False)]


def worst_tokens(record: dict[str, Any], k: int = 10) -> list[tuple[int, float]]:
    """The ``k`` loss tokens with the largest |Δ|, as (position in the response, Δ)."""
    found = [(i, d) for i, d in enumerate(token_deltas(record)) if d is not None]
    return sorted(found, key=lambda p: -abs(p[1]))[:k]
