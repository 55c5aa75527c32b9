"""Deterministic trace sampling by whole GRPO groups.

verl picks the samples to trace with an unseeded ``np.random.choice`` per worker, so two workers
(or two runs) trace different samples and nothing can be reproduced. Here a sample's priority is a
hash of (seed, step, sample_index); the K samples of a batch with the smallest priority are traced,
with all of their rollouts, since rollouts of one sample share its sample_index.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any


def sample_priority(seed: int, step: Any, sample_index: Any) -> int:
    digest = hashlib.blake2b(f"{seed}\x1f{step}\x1f{sample_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def select_samples(sample_indices: Iterable[Any], step: Any, k: int | None, seed: int = 0) -> set[Any]:
    """The sample indices to trace in this batch: depends on (seed, step, sample_index) only."""
    unique = set(sample_indices)
    if k is None or k >= len(unique):
        return unique
    ranked = sorted(unique, key=lambda s: (sample_priority(seed, step, s), repr(s)))
    return set(ranked[: max(k, 0)])


class TraceSampler:
    """Per-worker sampling state: the plan for each recent step.

    Callers that see the whole batch (verl's worker hook, the runner) call ``plan``; a trajectory
    opened without a plan for its step falls back to keeping the first K distinct samples seen
    (order-dependent, so planning is preferred).
    """

    _KEEP_STEPS = 8

    def __init__(self, k: int | None, seed: int = 0) -> None:
        if k is not None and k < 0:
            raise ValueError(f"max_samples_per_step_per_worker must be >= 0, got {k}")
        self.k = k
        self.seed = seed
        self._plans: OrderedDict[Any, set[Any]] = OrderedDict()
        self._seen: OrderedDict[Any, set[Any]] = OrderedDict()

    def plan(self, step: Any, sample_indices: Iterable[Any]) -> set[Any]:
        chosen = select_samples(sample_indices, step, self.k, self.seed)
        self._remember(self._plans, step, chosen)
        return chosen

    def has_plan(self, step: Any) -> bool:
        return step in self._plans

    def should_trace(self, step: Any, sample_index: Any) -> bool:
        if self.k is None:
            return True
        planned = self._plans.get(step)
        if planned is not None:
            return sample_index in planned
        seen = self._seen.get(step)
        if seen is None:
            seen = self._remember(self._seen, step, set())
        if sample_index in seen:
            return True
        if len(seen) < self.k:
            seen.add(sample_index)
            return True
        return False

    def _remember(self, table: OrderedDict, step: Any, value: set[Any]) -> set[Any]:
        table[step] = value
        table.move_to_end(step)
        while len(table) > self._KEEP_STEPS:
            table.popitem(last=False)
        return value
