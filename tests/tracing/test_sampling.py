"""Deterministic, GRPO-group-preserving sampling, across real worker processes."""

import subprocess
import sys
from pathlib import Path

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing._sampling import TraceSampler, select_samples

WORKER = str(Path(__file__).parent.parent / "_trace_worker.py")


def test_selection_depends_only_on_seed_step_and_index():
    batch = list(range(50))
    a = select_samples(batch, step=3, k=5, seed=1)
    assert a == select_samples(reversed(batch), step=3, k=5, seed=1) == select_samples(batch * 4, 3, 5, 1)
    assert len(a) == 5
    # the step and the seed each change the choice: over 20 of either, (nearly) every one differs
    assert len({frozenset(select_samples(batch, step=s, k=5, seed=1)) for s in range(20)}) >= 18
    assert len({frozenset(select_samples(batch, step=3, k=5, seed=seed)) for seed in range(20)}) >= 18
    assert select_samples(batch, step=3, k=None) == set(batch)
    assert select_samples(batch, step=3, k=500) == set(batch)


def test_unplanned_step_keeps_whole_groups():
    sampler = TraceSampler(k=2)
    decisions = [(s, sampler.should_trace(0, s)) for s in [5, 5, 9, 5, 9, 1, 1, 9]]
    assert {s for s, keep in decisions if keep} == {5, 9}
    assert all(keep for s, keep in decisions if s in (5, 9))


def test_negative_k_is_rejected(trace_dir):
    with pytest.raises(ValueError, match="max_samples_per_step_per_worker must be >= 0"):
        tracing.init_tracing(trace_dir=str(trace_dir), max_samples_per_step_per_worker=-1)


@pytest.mark.slow
def test_two_worker_processes_choose_the_same_samples(tmp_path):
    dirs = [tmp_path / "w0", tmp_path / "w1"]
    procs = [
        subprocess.Popen([sys.executable, WORKER, "sample", str(d), str(i), "3", "42", "4"]) for i, d in enumerate(dirs)
    ]
    assert [p.wait(120) for p in procs] == [0, 0]
    chosen = []
    for d in dirs:
        store = TraceStore(d)
        per_step = {}
        for t in store.trajectories():
            per_step.setdefault(t.step, {}).setdefault(t.sample_index, set()).add(t.rollout_n)
        chosen.append(per_step)
    assert chosen[0].keys() == {0, 1, 2, 3}
    for step, groups in chosen[0].items():
        assert len(groups) == 3  # K samples per step
        assert all(rollouts == {0, 1, 2, 3} for rollouts in groups.values())  # whole GRPO groups
        assert set(groups) == select_samples(range(100 + step, 108 + step), step, 3, seed=42)
    assert {s: set(g) for s, g in chosen[0].items()} == {s: set(g) for s, g in chosen[1].items()}


def test_a_reward_set_in_a_trajectory_not_chosen_is_not_recorded_and_raises_nothing(trace_dir, read_store):
    tracing.init_tracing(trace_dir=str(trace_dir), max_samples_per_step_per_worker=1)
    for sample in range(4):
        with tracing.rollout_trace_attr(step=1, sample_index=sample):
            tracing.set_reward(float(sample))
    [traced] = read_store().trajectories()
    assert traced.reward == float(traced.sample_index)
    with pytest.raises(RuntimeError, match="trajectory_id="):  # outside any trajectory: still said
        tracing.set_reward(1.0)
