"""What training did with each trajectory of a step, from the arrays of verl's batch: the record
joined to the stored trajectory (``verl_hook`` captures the arrays on verl's driver).

Per trajectory: the GRPO group (verl's ``uid``) with its size and reward mean/std, the advantage
(one value for GRPO, per token where an estimator gives different values per token), the policy
versions that generated its turns and how far behind the trainer they were, and per response
token the trainer's log-probability (``old_log_probs``) beside the rollout server's, the policy's
entropy there (verl computes it in the same pass and keeps only its mean, ``actor/entropy``), the
reference policy's log-probability where the run has one (the KL term), and the loss mask.
Per-token values are stored as float32, the precision verl computes them in: each as the shortest
decimal that reads back to the same float32 (about half the characters of a float64's).

The log-prob difference Δ = trainer - rollout counts only tokens the loss uses (``response_mask``
1): a tool response or padding has no rollout log-prob (verl fills 0), so its "difference" is an
artefact of tens of nats, kept apart as ``masked_delta_max``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import torch

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
    entropy: torch.Tensor | None = None  # the policy's entropy at each response token (verl's ``entropys``)
    ref_log_probs: torch.Tensor | None = None  # the reference policy's (verl's ``ref_log_prob``), if the run has one


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
    advantages = step.advantages.float()
    mean = (advantages * mask).sum(-1) / tokens.clamp(min=1)
    spread = ((advantages - mean[:, None]).abs() * mask).amax(-1)
    # GRPO's one value is verl's own (the first loss token's), not a mean that may be an ulp off it
    first = advantages.gather(1, mask.argmax(-1, keepdim=True)).squeeze(1)
    advantage = torch.where(spread > _CONSTANT, mean, first)
    positions = torch.arange(mask.shape[-1])[None, :]
    inside = positions < step.lengths[:, None]
    masked = inside & (mask == 0)
    deltas = _logprob_deltas(step, mask, tokens, masked)
    per_token = {
        name: tensor.float()
        for name, tensor in (
            ("old_log_probs", step.old_log_probs),
            ("rollout_log_probs", step.rollout_log_probs),
            ("entropy", step.entropy),
            ("ref_log_probs", step.ref_log_probs),
        )
        if tensor is not None
    }
    means = {}  # over the loss tokens
    if "entropy" in per_token:
        means["entropy_mean"] = (per_token["entropy"] * mask).sum(-1) / tokens.clamp(min=1)
    if "ref_log_probs" in per_token and "old_log_probs" in per_token:  # the k1 estimate of KL(policy || reference)
        kl = (per_token["old_log_probs"] - per_token["ref_log_probs"]) * mask
        means["kl_mean"] = kl.sum(-1) / tokens.clamp(min=1)
    out = []
    for i in range(rows):
        tid = step.trajectory_ids[i]
        if tid is None:
            continue
        n = int(step.lengths[i])
        size, mean, std = group_stats[step.uids[i]]
        low, high = (
            _version(step.min_versions[i]) if len(step.min_versions) else None,
            _version(step.max_versions[i]) if len(step.max_versions) else None,
        )
        record: dict[str, Any] = {
            "step": step.step,
            "uid": str(step.uids[i]),
            "estimator": step.estimator,
            "group_size": size,
            "group_mean": mean,
            "group_std": std,
            "score": float(scores[i]),
            "reward": float(rewards[i]),
            "advantage": float(advantage[i]),
            # the trainer at step S updates the weights of version S-1: a rollout of those is on-policy
            "policy_version": low,
            "policy_version_max": high,
            "lag": None if low is None else step.step - 1 - low,
            "tokens": int(tokens[i]),
            "masked_tokens": int(masked[i].sum()),
            "length": n,
            "response_mask": step.response_mask[i, :n].int().tolist(),
        }
        if float(spread[i]) > _CONSTANT:
            record["advantages"] = float32_list(step.advantages[i, :n])
        for name, tensor in per_token.items():
            record[name] = float32_list(tensor[i, :n])
        for name, mean in means.items():
            record[name] = float(mean[i]) if record["tokens"] else None
        if deltas is not None and record["tokens"]:
            delta_max, delta_at, delta_mean, masked_max = deltas
            record["logprob_delta_max"] = float(delta_max[i])
            record["logprob_delta_position"] = int(delta_at[i])
            record["logprob_delta_mean"] = float(delta_mean[i])
            record["masked_delta_max"] = float(masked_max[i]) if record["masked_tokens"] else None
        out.append((str(tid), record))
    return out


def float32_list(values: torch.Tensor) -> list[float]:
    """A 1-D tensor's values as the shortest decimals that read back to the same float32 (orjson
    writes numpy's float32 so): exact at verl's precision, about 10 characters a value, not 19.
    (~160 ns a value, on the recorder's thread: 1.3 s for 4 arrays of 1,024 x 2,048 tokens.)"""
    array = values.detach().to(torch.float32).contiguous().numpy()
    return orjson.loads(orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY))


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


def _logprob_deltas(
    step: StepArrays, mask: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor
) -> tuple[torch.Tensor, ...] | None:
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
