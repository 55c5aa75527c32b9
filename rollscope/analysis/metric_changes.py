"""What a training run's logged metrics did at the steps the signals flag: the trainer's own view
(KL, entropy, reward, response length, whatever it logged to W&B) beside rollscope's.

A metric *jumps* at a step when its change from the step before is more than ``jump`` times its
usual change (the median absolute step-to-step change over the run): a scale-free test, so one
threshold serves a KL of 1e-3 and a response length of 400. The series come in as plain
``{step: value}`` mappings (``sources.wandb_history.RunHistory.series``): nothing here reads W&B.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass

from rollscope.analysis.insights import ExperimentInsights

JUMP = 3.0  # a change this many times the metric's usual change is a jump


@dataclass
class MetricChange:
    metric: str
    step: int
    value: float
    change: float | None  # from the step logged before it (None: its first step)
    usual: float | None  # the metric's median |change| between logged steps (None: under 3 steps)
    jump: bool
    signals: list[str]  # the signals flagged at this step

    @property
    def ratio(self) -> float | None:
        """The change in units of the usual change (None where either is unknown or usual is 0)."""
        if self.change is None or not self.usual:
            return None
        return abs(self.change) / self.usual

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def metric_changes(
    series: dict[str, dict[int, float]], run: ExperimentInsights, *, jump: float = JUMP, chosen: tuple[str, ...] = ()
) -> list[MetricChange]:
    """Per metric, in step order: every step where it jumped, and, for the ``chosen`` metrics,
    every step a signal flagged in ``run`` too (jump or not). Steps outside the run's are left out."""
    flagged: dict[int, list[str]] = {}
    for s in run.signals:
        if s.flagged and type(s.step) is int:
            flagged.setdefault(s.step, []).append(s.name)
    steps = {s for s in run.steps if type(s) is int}
    out: list[MetricChange] = []
    for name in sorted(series):
        points = sorted(series[name].items())
        changes = [b - a for (_, a), (_, b) in itertools.pairwise(points)]
        usual = statistics.median(abs(c) for c in changes) if len(changes) >= 2 else None
        for i, (step, value) in enumerate(points):
            change = changes[i - 1] if i else None
            jumped = change is not None and usual is not None and abs(change) > jump * usual and change != 0
            if step in steps and (jumped or (name in chosen and step in flagged)):
                out.append(MetricChange(name, step, value, change, usual, jumped, sorted(flagged.get(step, []))))
    return out
