"""The cost of joining what training did to each trajectory, on verl's driver, at a realistic batch
(default 1,024 trajectories x 2,048 response tokens, CPU tensors, as verl's driver holds them).

Side by side, alternating, on one batch (verl's own ``DataProto``):
- the hook on the trainer's thread (``verl_hook.capture_v0``: what runs before verl's actor update);
- the records it hands to its own thread (``training_record.records``: slicing, ``tolist``, group
  stats), which overlap the actor update instead of delaying it;
- verl's own GRPO ``compute_advantage`` on the same batch, driver work verl already does per step.

Goal: the trainer's-thread cost ≤ 1 % of a step. A step at this batch size on GPUs takes minutes;
the ratio to verl's own advantage computation is the figure measured here.

And what a record costs to store, per response token: the payload the store writes
(``store.schema.encode_payload``: JSON, zstd) of each record as recorded now (float32 decimals,
with the entropies and the reference's log-probs), beside the same record in the previous layout
(log-probs as float64 decimals, neither entropy nor reference), both of this batch.

usage: python benchmarks/bench_training_record.py [--rows 1024] [--tokens 2048] [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")


def batch(rows: int, tokens: int, n: int = 8):
    import numpy as np
    import torch
    from verl import DataProto

    torch.manual_seed(0)
    mask = (torch.rand(rows, tokens) > 0.3).long()
    scores = torch.zeros(rows, tokens)
    scores[:, -1] = (torch.rand(rows) > 0.5).float()
    # log-probs as a sampled token's are: mostly near 0, a tail of unlikely ones
    logp = -torch.distributions.Exponential(2.0).sample((rows, tokens))
    tensors = {
        "responses": torch.randint(0, 32000, (rows, tokens)),
        "response_mask": mask,
        "attention_mask": torch.ones(rows, 512 + tokens, dtype=torch.long),
        "token_level_scores": scores,
        "token_level_rewards": scores,
        "old_log_probs": logp,
        "rollout_log_probs": logp + 1e-3 * torch.randn_like(logp),
        "ref_log_prob": logp - 0.01 * torch.rand(rows, tokens),
    }
    uids = np.array([f"uid-{i // n}" for i in range(rows)], dtype=object)
    versions = np.array([3] * rows, dtype=object)
    extra = {
        "uid": uids,
        "rollscope_trajectory_id": np.array([f"t{i:06d}" for i in range(rows)], dtype=object),
        "min_global_steps": versions,
        "max_global_steps": versions,
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=extra)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from rollscope.store.schema import encode_payload
    from rollscope.trainer import verl_hook
    from rollscope.trainer.training_record import records

    data = batch(args.rows, args.tokens)
    entropy = torch.distributions.Exponential(1.0).sample((args.rows, args.tokens))
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"trace": {"backend": "none"}, "n": 8}},
            "algorithm": {"adv_estimator": "grpo"},
        }
    )
    trainer = SimpleNamespace(config=config, global_steps=4)
    hook, background, verl = [], [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO, num_repeat=8)
        verl.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        verl_hook._current.entropy = entropy  # as verl's old-log-prob pass left it
        verl_hook.capture_v0(trainer, data)
        hook.append(time.perf_counter() - t0)
        verl_hook.recorder.drain()  # its thread has sent the step's records: now time that work here
        t0 = time.perf_counter()
        captured = records(verl_hook.v0_step(data, 4, "grpo", entropy)())
        background.append(time.perf_counter() - t0)
    sample = captured[:64]
    tokens = sum(r["length"] for _, r in sample)
    now = sum(len(encode_payload(r)) for _, r in sample) / tokens
    previous = [
        {
            **{k: v for k, v in r.items() if k not in ("entropy", "ref_log_probs", "entropy_mean", "kl_mean")},
            **{k: torch.tensor(r[k]).double().float().tolist() for k in ("old_log_probs", "rollout_log_probs")},
        }
        for _, r in sample
    ]
    before = sum(len(encode_payload(r)) for r in previous) / tokens
    result = {
        "rows": args.rows,
        "tokens": args.tokens,
        "records": len(captured),
        "hook_ms": statistics.median(hook) * 1e3,
        "background_ms": statistics.median(background) * 1e3,
        "verl_compute_advantage_ms": statistics.median(verl) * 1e3,
        "bytes_per_token": now,
        "bytes_per_token_previous_layout": before,
    }
    result["hook_vs_verl_advantage"] = result["hook_ms"] / result["verl_compute_advantage_ms"]
    print(
        f"{args.rows} trajectories x {args.tokens} tokens: on the trainer's thread {result['hook_ms']:.3f} ms "
        f"({result['hook_vs_verl_advantage']:.2%} of verl's own compute_advantage, "
        f"{result['verl_compute_advantage_ms']:.0f} ms); records on the hook's thread "
        f"{result['background_ms']:.0f} ms (overlapping the actor update)"
    )
    print(
        f"stored per response token: {now:.2f} bytes (log-probs, rollout's, entropy, reference's, mask; float32 "
        f"decimals, zstd); the previous layout (float64 decimals, no entropy or reference) {before:.2f} bytes"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
