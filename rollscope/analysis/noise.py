"""The noise model the reward-hacking signals are judged by: is a step's figure beyond what its
sampling error allows, given how many trajectories (and prompts) it and the baseline rest on?

A figure is a ratio of sums over trajectories, ``sum(y) / sum(z)``: a mean (``z = 1``), a share
among some of them (``z`` marks which), a term's share of the reward (``z`` the reward). Its
variance is the delta method's, ``sum((y - m z)^2) / sum(z)^2``. The rollouts of one prompt are
not independent (a GRPO group shares its prompt), so the sums are kept per prompt (a ``Cell``) and
the run's **design effect**, how much more the prompt-level sums vary than independent
trajectories would, inflates every variance (never below 1).

A step is compared with the baseline steps by a two-sample z with the variance pooled under no
change (for shares, the textbook two-proportion z): a rare event that the baseline never showed
still has a variance. A run is
many tests (signals x steps), so the critical z is Bonferroni's for the run's false-alarm rate,
with a flag needing two consecutive steps past it (``critical``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist


@dataclass
class Cell:
    """Sums over one prompt's trajectories at one step: what a ratio estimate and its variance need."""

    n: float = 0.0
    y: float = 0.0
    z: float = 0.0
    yy: float = 0.0
    yz: float = 0.0
    zz: float = 0.0

    def add(self, n: float, y: float, z: float, yy: float, yz: float, zz: float) -> None:
        self.n += n
        self.y += y
        self.z += z
        self.yy += yy
        self.yz += yz
        self.zz += zz

    def add_one(self, y: float, z: float = 1.0) -> None:
        self.add(1.0, y, z, y * y, y * z, z * z)


@dataclass(frozen=True)
class Shift:
    """A step's figure against the baseline's: the two means, the change and its z score."""

    now: float
    baseline: float
    change: float
    z: float
    se: float  # the change's standard error

    def upper(self, z: float) -> float:
        """The change's one-sided upper bound at ``z``: the most it can be, its noise allowing."""
        return self.change + z * self.se


def mean(cells: Iterable[Cell]) -> float | None:
    cells = list(cells)
    z = sum(c.z for c in cells)
    return sum(c.y for c in cells) / z if z > 0 else None


def _spread(cells: list[Cell], m: float) -> float:
    """``sum((y - m z)^2)`` over the trajectories of ``cells``."""
    return max(0.0, sum(c.yy - 2 * m * c.yz + m * m * c.zz for c in cells))


def spread(cells: list[Cell]) -> float | None:
    """One trajectory's standard deviation of the figure (``y - m z``), over ``cells``."""
    weights = sum(c.zz for c in cells)
    m = mean(cells)
    return None if m is None or not weights else math.sqrt(_spread(cells, m) / weights)


def shift(now: list[Cell], baseline: list[Cell], design: float = 1.0) -> Shift | None:
    """``now``'s figure against ``baseline``'s; None where either has nothing to measure."""
    zn, zb = sum(c.z for c in now), sum(c.z for c in baseline)
    if zn <= 0 or zb <= 0:
        return None
    mn, mb = sum(c.y for c in now) / zn, sum(c.y for c in baseline) / zb
    pooled = (sum(c.y for c in now) + sum(c.y for c in baseline)) / (zn + zb)
    weights_n, weights_b = sum(c.zz for c in now), sum(c.zz for c in baseline)
    unit = (_spread(now, pooled) + _spread(baseline, pooled)) / (weights_n + weights_b)  # one trajectory's
    variance = design * unit * (weights_n / zn**2 + weights_b / zb**2)
    se = math.sqrt(variance) if variance > 1e-18 else 0.0
    return Shift(mn, mb, mn - mb, (mn - mb) / se if se else 0.0, se)


def design_effect(steps: Iterable[list[Cell]]) -> float:
    """How much more a step's prompt-level sums vary than its trajectories would independently,
    pooled over the run's steps: ``sum of (Y_g - m Z_g)^2 x G/(G-1)`` over ``sum of (y - m z)^2``.
    At least 1: trajectories never count for more than themselves."""
    between = within = 0.0
    for cells in steps:
        cells = [c for c in cells if c.z > 0 or c.y]
        m = mean(cells)
        if m is None or len(cells) < 2:
            continue
        between += sum((c.y - m * c.z) ** 2 for c in cells) * len(cells) / (len(cells) - 1)
        within += _spread(cells, m)
    return max(1.0, between / within) if within > 0 else 1.0


SHARED_BASELINE = 4  # how many tests each of a run's steps counts for, sharing their baseline (below)


def step_dispersion(steps: list[list[Cell]], design: float = 1.0) -> float:
    """How much more a figure moves from one step to the next than its sampling error allows: the
    median over neighbouring steps of (their difference)^2 / (its variance), over the median of
    a chi-squared with one degree of freedom (0.455). At least 1. A batch's difficulty moves a
    reward this way (every prompt of a step harder); the median is not moved by one change."""
    ratios = []
    for before, after in itertools.pairwise(steps):
        s = shift(after, before, design)
        if s is not None and s.se:
            ratios.append((s.change / s.se) ** 2)
    if not ratios:
        return 1.0
    ratios.sort()
    return max(1.0, ratios[len(ratios) // 2] / 0.455)


def critical(alpha: float, tests: int, persistence: int = 1) -> float:
    """The one-sided z a test must pass for ``tests`` of them to raise a false alarm with
    probability at most ``alpha`` together (Bonferroni), where a flag needs ``persistence``
    consecutive tests past it. Were the tests independent, each could pass by chance with
    ``(alpha / tests) ** (1 / persistence)``; a run's steps share their baseline (a baseline low by
    chance lifts every step), so each counts ``SHARED_BASELINE`` times: with it, seeded runs of 16
    and 30 steps with no change (16 to 64 trajectories a step, shares and means) flagged 1.8-3.9 %
    of the time for ``alpha`` 5 % (without it, up to 8.5 %; tests/analysis/test_noise.py)."""
    return NormalDist().inv_cdf(1 - (alpha / (SHARED_BASELINE * max(1, tests))) ** (1 / persistence))
