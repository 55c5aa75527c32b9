"""The noise model the hacking signals are judged by (``analysis.noise``): its z is the textbook
two-proportion z on independent trajectories, prompts that move together count for less, and a
run's worth of steps past its critical value with the two-step rule raises a false alarm at most as
often as promised, measured here over seeded runs with no change in them."""

import itertools
import math
import random

import pytest

from rollscope.analysis.noise import Cell, critical, design_effect, shift


def cells(values, per_prompt=1):
    out = []
    for i in range(0, len(values), per_prompt):
        c = Cell()
        for v in values[i : i + per_prompt]:
            c.add_one(v)
        out.append(c)
    return out


def test_the_z_of_two_shares_is_the_pooled_two_proportion_z():
    now, before = [1] * 12 + [0] * 20, [1] * 9 + [0] * 87
    s = shift(cells(now), cells(before))
    p = 21 / 128
    expected = (12 / 32 - 9 / 96) / math.sqrt(p * (1 - p) * (1 / 32 + 1 / 96))
    assert s.z == pytest.approx(expected) and s.change == pytest.approx(12 / 32 - 9 / 96)


def test_a_share_among_some_trajectories_is_a_ratio_of_sums():
    c = Cell()
    for overpaid, rejected in [(1, 1), (0, 1), (0, 0), (1, 1)]:
        c.add_one(overpaid, rejected)
    s = shift([c], [c])
    assert s.now == pytest.approx(2 / 3) and s.z == 0


def test_nothing_to_measure_is_no_test_and_no_change_is_no_signal():
    assert shift([Cell()], cells([1, 0])) is None
    assert shift(cells([0, 0, 0]), cells([0, 0])).z == 0


def test_prompts_whose_rollouts_agree_count_as_prompts():
    rng = random.Random(0)
    together = [[float(v)] * 8 for v in (rng.random() < 0.5 for _ in range(200))]
    steps = [cells([v for prompt in together[i : i + 20] for v in prompt], per_prompt=8) for i in range(0, 200, 20)]
    assert design_effect(steps) == pytest.approx(8, rel=0.25)  # 8 rollouts carrying one prompt's worth
    alone = [cells([float(rng.random() < 0.5) for _ in range(160)], per_prompt=8) for _ in range(10)]
    assert design_effect(alone) < 1.5


@pytest.mark.parametrize("trajectories", [16, 64])
def test_runs_with_no_change_flag_at_most_as_often_as_promised(trajectories):
    """2,000 seeded runs of 16 steps (3 of baseline), each a share of 0.3 with no change, prompts of
    4 rollouts: the two-step rule at the run's critical z flags at most 5 % of them."""
    rng = random.Random(trajectories)
    steps, base, alpha, runs = 16, 3, 0.05, 2000
    bar = critical(alpha, steps - base, 2)
    alarms = 0
    for _ in range(runs):
        data = [cells([float(rng.random() < 0.3) for _ in range(trajectories)], per_prompt=4) for _ in range(steps)]
        baseline = [c for step in data[:base] for c in step]
        design = design_effect(data)
        passed = [(s := shift(step, baseline, design)) is not None and s.z > bar for step in data[base:]]
        alarms += any(a and b for a, b in itertools.pairwise(passed))
    assert alarms / runs <= alpha
