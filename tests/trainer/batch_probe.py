"""What verl's v0 trainer held, read in its own process for the trainer tests to compare the stored
training records with: loaded by verl itself (``VERL_USE_EXTERNAL_MODULES=tests.trainer.batch_probe``,
with ``ROLLSCOPE_TEST_PROBE_DIR`` naming where each step is saved).

It wraps ``RayPPOTrainer``'s old-log-prob pass (the per-token entropies, which verl drops once
averaged) and its actor update (the batch the update trains on) and saves, per step, the rows'
trajectory ids and verl's own tensors with ``torch.save``. It reads nothing of rollscope's.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

MODULE = "verl.trainer.ppo.ray_trainer"
DIRECTORY = os.environ.get("ROLLSCOPE_TEST_PROBE_DIR")
KEYS = ("responses", "response_mask", "advantages", "old_log_probs", "rollout_log_probs", "ref_log_prob")


def _patch(module) -> None:
    import torch

    cls = module.RayPPOTrainer
    old_log_prob, update_actor = cls._compute_old_log_prob, cls._update_actor
    seen: dict = {}

    @functools.wraps(old_log_prob)
    def probed_old_log_prob(self, batch):
        result = old_log_prob(self, batch)
        seen["entropys"] = result[0].batch["entropys"].clone()
        return result

    @functools.wraps(update_actor)
    def probed_update_actor(self, batch):
        saved = {k: batch.batch[k].clone() for k in KEYS if k in batch.batch.keys()}  # noqa: SIM118 (a TensorDict)
        saved["entropys"] = seen.pop("entropys")
        saved["trajectory_ids"] = list(batch.non_tensor_batch["rollscope_trajectory_id"])
        torch.save(saved, Path(DIRECTORY) / f"step-{self.global_steps}.pt")
        return update_actor(self, batch)

    cls._compute_old_log_prob, cls._update_actor = probed_old_log_prob, probed_update_actor


class _OnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if DIRECTORY:
    sys.meta_path.insert(0, _OnImport())
