"""``rollscope rescore``: a stored run's rewards recomputed under another reward function, and what
that would have changed for GRPO, before a new run is paid for.

The function is verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``
(a float, or a dict with ``score`` and components; it may be async), or a function of one
argument, the stored trajectory (``TrajectoryRecord``, spans loaded). ``solution_str`` is what the
run's own reward was given: the reward span's recorded solution (``rollscope run``), else verl's
(the response ids decoded with the run's tokenizer, tool responses included, as verl's reward
manager decodes them), else the model's replies joined.

Rewards are computed in worker processes (``workers``), a step at a time; each group's
advantages are derived again (GRPO: reward against the group's mean) and compared with the
original's: groups whose advantage changed sign for some rollout, groups that became (or stopped
being) zero-variance — no gradient either way —, trajectories whose reward moved. The rescoring
is stored beside the run (``store.rescorings``), never over it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rollscope._imports import import_function
from rollscope.analysis.grpo import advantages
from rollscope.datasets.rows import reward_inputs
from rollscope.store import TraceStore, rescorings
from rollscope.store.groups import groups_by_step
from rollscope.store.rescorings import RescoredReward
from rollscope.trajectory.records import TrajectoryRecord

_EPS = 1e-9  # rewards closer than this are the same reward


@dataclass
class GroupChange:
    """One group's rewards and advantages under the original reward and the rescoring."""

    step: int | None
    sample_index: str | None
    experiment: str | None
    members: list[dict[str, Any]]  # id, rollout_n, original, reward, advantage_before, advantage_after
    flipped: bool  # some rollout's advantage changed sign
    zero_variance_before: bool
    zero_variance_after: bool
    moved: int  # rollouts whose reward changed


@dataclass
class StepReport:
    step: int | None
    experiment: str | None
    groups: int = 0
    trajectories: int = 0
    moved: int = 0
    flipped: int = 0
    became_zero_variance: int = 0
    stopped_zero_variance: int = 0
    failed: int = 0
    mean_before: float | None = None
    mean_after: float | None = None


@dataclass
class RescoreReport:
    name: str
    reward: str  # the function's spec
    workers: int
    seconds: float = 0.0
    trajectories: int = 0
    failed: int = 0
    first_error: str | None = None
    steps: list[StepReport] = field(default_factory=list)
    changed: list[GroupChange] = field(default_factory=list)  # groups with a flip or a zero-variance change
    path: str = ""

    def totals(self) -> dict[str, int]:
        keys = ("groups", "moved", "flipped", "became_zero_variance", "stopped_zero_variance")
        return {k: sum(getattr(s, k) for s in self.steps) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "totals": self.totals()}


def rescore(
    store: TraceStore,
    reward: str,
    *,
    name: str | None = None,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    **filters: Any,
) -> RescoreReport:
    """Recompute the rewards of the trajectories matching ``filters`` with ``reward``
    (``module:function`` or ``file.py:function``), store them as rescoring ``name`` (default: the
    function's name) and report what changed. ``workers``: processes (default: the CPUs; 0 or 1:
    in this process)."""
    fn = import_function(reward, "reward")  # a bad spec fails here, before any work
    by_trajectory = _takes_trajectory(fn, reward)
    name = rescorings.check_name(name or getattr(fn, "__name__", "rescoring"))
    workers = (os.cpu_count() or 1) if workers is None else max(workers, 1)
    report = RescoreReport(name, reward, workers)
    started = time.monotonic()
    scored: list[RescoredReward] = []
    # Workers read each trajectory's spans themselves (from their own reader of the store, where a
    # remote source keeps what it fetched): this process lists the trajectories, they do the
    # reading and the scoring.
    pool = (
        ProcessPoolExecutor(workers, initializer=_load, initargs=(reward, str(store.path), by_trajectory))
        if workers > 1
        else None
    )
    score = (
        _in_pool(pool, workers)
        if pool is not None
        else lambda records: [_call(fn, _item(r, by_trajectory)) for r in records]
    )
    try:
        for this_step in groups_by_step(store, **filters):
            records = [r for g in this_step for r in g]
            results = score(records)
            new = {r.id: res for r, res in zip(records, results, strict=True)}
            report.steps.append(_step_report(this_step, new, report))
            scored += [
                RescoredReward(
                    r.id,
                    r.step,
                    None if r.sample_index is None else str(r.sample_index),
                    r.reward,
                    new[r.id][0],
                    new[r.id][1],
                )
                for r in records
            ]
            report.trajectories += len(records)
            if progress is not None:
                progress(report.trajectories)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    report.seconds = time.monotonic() - started
    meta = {
        "reward": reward,
        "filters": {k: v for k, v in filters.items() if v is not None},
        "report": report.to_dict(),
    }
    report.path = store.save_rescoring(name, meta, scored)
    return report


def _step_report(this_step: list[list[TrajectoryRecord]], new: dict[str, tuple], report: RescoreReport) -> StepReport:
    first = this_step[0][0]
    out = StepReport(first.step, first.experiment, groups=len(this_step))
    before_all, after_all = [], []
    for group in this_step:
        old = [r.reward for r in group]
        now = [new[r.id][0] for r in group]
        before_all += [v for v in old if v is not None]
        after_all += [v for v in now if v is not None]
        _, std_before, adv_before = advantages(old)
        _, std_after, adv_after = advantages(now)
        moved = sum(
            1
            for a, b in zip(old, now, strict=True)
            if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > _EPS)
        )
        flipped = any(
            a[0] is not None and b[0] is not None and a[0] * b[0] < 0 and min(abs(a[0]), abs(b[0])) > _EPS
            for a, b in zip(adv_before, adv_after, strict=True)
        )
        zero_before = _zero_variance(old, std_before)
        zero_after = _zero_variance(now, std_after)
        out.trajectories += len(group)
        out.moved += moved
        out.flipped += flipped
        out.became_zero_variance += zero_after and not zero_before
        out.stopped_zero_variance += zero_before and not zero_after
        for r in group:
            if new[r.id][0] is None:
                out.failed += 1
                report.failed += 1
                report.first_error = report.first_error or new[r.id][1].get("error")
        if flipped or zero_before != zero_after:
            members = [
                {
                    "id": r.id,
                    "rollout_n": r.rollout_n,
                    "original": a,
                    "reward": b,
                    "advantage_before": x[0],
                    "advantage_after": y[0],
                }
                for r, a, b, x, y in zip(group, old, now, adv_before, adv_after, strict=True)
            ]
            report.changed.append(
                GroupChange(
                    first.step,
                    None if group[0].sample_index is None else str(group[0].sample_index),
                    first.experiment,
                    members,
                    flipped,
                    zero_before,
                    zero_after,
                    moved,
                )
            )
    out.mean_before = sum(before_all) / len(before_all) if before_all else None
    out.mean_after = sum(after_all) / len(after_all) if after_all else None
    return out


def _zero_variance(rewards: list[float | None], std: float | None) -> bool:
    """No gradient from this group: two or more rewarded rollouts, all with the same reward."""
    return std is not None and std <= _EPS and sum(r is not None for r in rewards) >= 2


def _takes_trajectory(fn: Callable[..., Any], spec: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if "solution_str" in params:
        return False
    required = [
        p for p in params.values() if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) == 1:
        return True
    raise ValueError(
        f"reward {spec!r}: takes ({', '.join(params)}); give verl's compute_score(data_source, "
        "solution_str, ground_truth, extra_info=None) or a function of one trajectory"
    )


def _item(record: TrajectoryRecord, by_trajectory: bool) -> tuple[str, Any]:
    return ("trajectory", record) if by_trajectory else ("verl", reward_inputs(record))


_worker: dict[str, Any] = {}  # in a worker process: the reward, a reader of the store, its signature


def _load(spec: str, store_path: str, by_trajectory: bool) -> None:
    _worker.update(fn=import_function(spec, "reward"), store=TraceStore(store_path), by_trajectory=by_trajectory)


def _score_in_worker(ids: list[str]) -> list[tuple[float | None, dict]]:
    fn, store, by_trajectory = _worker["fn"], _worker["store"], _worker["by_trajectory"]
    return [_call(fn, _item(store.get(i), by_trajectory)) for i in ids]


def _in_pool(pool: ProcessPoolExecutor, workers: int) -> Callable[[list[TrajectoryRecord]], list[tuple]]:
    def score(records: list[TrajectoryRecord]) -> list[tuple]:
        ids = [r.id for r in records]
        size = max(1, min(256, -(-len(ids) // (workers * 4))))
        chunks = [ids[i : i + size] for i in range(0, len(ids), size)]
        return [res for part in pool.map(_score_in_worker, chunks) for res in part]

    return score


def _call(fn: Callable[..., Any], item: tuple[str, Any]) -> tuple[float | None, dict[str, Any]]:
    """(reward, its components) of one trajectory; a function that fails gives (None, the error)."""
    kind, value = item
    try:
        result = fn(value) if kind == "trajectory" else fn(**value)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        if isinstance(result, dict):
            return float(result["score"]), {k: v for k, v in result.items() if k != "score"}
        return float(result), {}
    except Exception as exc:  # a reward that fails on one trajectory is counted, not the end of the rescoring
        return None, {"error": f"{type(exc).__name__}: {exc}"}


async def _awaited(result: Any) -> Any:
    return await result
