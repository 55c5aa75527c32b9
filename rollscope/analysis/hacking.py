"""Reward hacking: the step where the reward starts paying for something other than the task, how
strongly, and the trajectories that show it.

Each signal compares a step with the run's first steps (``Thresholds.baseline_steps``), as the
drift signals do, and is flagged where it moved past its threshold; the first flagged step is its
onset (``detail["onset"]``). What each watches:

- ``reward_vs_check``: the share of trajectories the reward pays more than an independent check
  does (a rescoring the user ran, ``rollscope rescore``: the ground truth's exact match, a
  stricter scorer) rising: the reward rises while the answers stop being right.
- ``answer_length_with_reward``: final answers growing longer as the reward rises, the rewarded
  ones longer than the rest: the policy pays with length (listing candidates, padding).
- ``answer_collapse``: one same final answer given to many different prompts.
- ``reward_component``: one component of a reward that is a sum of components (verl's
  ``reward_extra_info``) coming to make up the total.
- ``repetition``: replies repeating their own phrases more than the run's first steps did.
- ``entropy_collapse``: the trainer's per-token entropy (the training records' ``entropy_mean``)
  falling far below the first steps' while the reward does not rise: the policy stops exploring
  with nothing to show for it.

Everything is read from the trajectories table's columns and attributes (``summary``'s ``answer``
and ``repetition``, the reward's details), the training records' scalars and a rescoring: the same
from the local store as from a Weave project (``sources.weave``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollscope.analysis.signal import EXAMPLES, Signal
from rollscope.store.reader import null_first

_EPS = 1e-9

# name -> (what it counts, what it means for training): joined to ``insights.SIGNALS``
SIGNALS: dict[str, tuple[str, str]] = {
    "reward_vs_check": (
        "trajectories the reward pays more than the independent check (--check RESCORING) does",
        "the reward rises while the answers stop being right: the reward has a loophole",
    ),
    "answer_length_with_reward": (
        "mean final-answer length (word characters), against the first steps, while "
        "the reward rises and rewarded answers are the longer ones",
        "the policy pays with length (listing candidates, padding): a length loophole in the reward",
    ),
    "answer_collapse": (
        "rewarded trajectories whose final answer the reward also paid for at least collapse_prompts different prompts",
        "one answer fits all: the reward (or a judge) accepts it whatever the question",
    ),
    "reward_component": (
        "the share of the total reward one component (reward_extra_info) makes up",
        "the reward is being won through one term alone: check that term",
    ),
    "repetition": (
        "mean share of a reply's word 3-grams that repeat, against the first steps",
        "degenerate text: loops and repeated phrases the reward does not punish",
    ),
    "entropy_collapse": (
        "mean per-token entropy of the trainer's pass, against the first steps",
        "the policy stopped exploring; GRPO groups go zero-variance and learning stalls",
    ),
}


def hacking_signals(
    store: Any,
    where: str,
    params: list,
    steps: dict[tuple, list],
    th: Any,
    training: dict[tuple, dict[Any, list]],
    check: str | None = None,
) -> dict[tuple, list]:
    """(project, experiment) -> its hacking ``Signal``\\ s, for the runs in ``steps`` (run -> its steps
    in order). ``where``/``params`` select the trajectories (``reader.where_clause``); ``training`` holds
    the training records by run and step; ``check`` names a rescoring to compare the reward with."""
    per_step = store.aggregate(_STEP_SQL.format(where=where), params, _sum_rows(len(_STEP_FIELDS)))
    answers = store.aggregate(
        _ANSWER_SQL.format(where=where, and_=" AND " if where else " WHERE "), params, _merge_answers
    )
    components = store.aggregate(
        _COMPONENT_SQL.format(where=where, and_=" AND " if where else " WHERE "), params, _sum_rows(3)
    )
    checked = _checked(store, where, params, check) if check else {}
    out: dict[tuple, list] = {}
    for run, run_steps in steps.items():
        base = run_steps[: th.baseline_steps]
        rows = {
            s: dict(zip(_STEP_FIELDS, per_step.get((*run, s), [0.0] * len(_STEP_FIELDS)), strict=True))
            for s in run_steps
        }
        found: list[Signal] = []
        base_reward = _mean(rows, base, "reward_sum", "n")
        reward_change = {
            s: rows[s]["reward_sum"] / rows[s]["n"] - base_reward if rows[s]["n"] and base_reward is not None else None
            for s in run_steps
        }
        rising = {s: change is not None and change > th.reward_rise for s, change in reward_change.items()}
        found += _reward_vs_check(checked.get(run), run_steps, base, th)
        found += _answer_length(store, run, rows, run_steps, base, th, where, params, reward_change, rising)
        found += _collapse(answers, run, run_steps, rows, th)
        found += _components(components, run, rows, run_steps, base, th)
        found += _relative(
            rows,
            run_steps,
            base,
            "repetition",
            "repetition_sum",
            "repetition_count",
            lambda mean, baseline: mean - baseline > th.repetition_rise,
        )
        found += _entropy(training.get(run, {}), th, rising)
        onsets: dict[str, Any] = {}  # the first flagged step of each signal (``found`` is in step order)
        for s in found:
            if s.flagged:
                onsets.setdefault(s.name, s.step)
        for s in found:
            s.detail["onset"] = onsets.get(s.name)
        out[run] = found
    return out


_STEP_FIELDS = (
    "n",
    "reward_sum",
    "rewarded",
    "answer_sum",
    "rewarded_answer_sum",
    "repetition_sum",
    "repetition_count",
    "additive",
)
_REPETITION = "json_extract(attributes, '$.repetition')"
_COMPONENTS = (
    "(SELECT TOTAL(k.value) FROM json_each(trajectories.attributes, '$.reward_details') AS k "
    "WHERE k.type IN ('integer', 'real') AND k.key != 'score')"
)
_STEP_SQL = (
    "SELECT project, experiment, step, COUNT(*), TOTAL(reward), TOTAL(reward > 0), TOTAL(answer_chars), "
    "TOTAL(CASE WHEN reward > 0 THEN answer_chars END), " + f"TOTAL({_REPETITION}), COUNT({_REPETITION}), "
    f"TOTAL(reward IS NOT NULL AND json_extract(attributes, '$.reward_details') IS NOT NULL "
    f"AND ABS(reward - {_COMPONENTS}) < 1e-6) "
    "FROM trajectories{where} GROUP BY project, experiment, step"
)
_ANSWER_SQL = (
    "SELECT project, experiment, step, json_extract(attributes, '$.answer') AS answer, sample_index, COUNT(*), "
    "MIN(id) FROM trajectories{where}{and_}json_extract(attributes, '$.answer') IS NOT NULL AND reward > 0 "
    "GROUP BY project, experiment, step, answer, sample_index"
)
_COMPONENT_SQL = (
    "SELECT project, experiment, step, j.key, TOTAL(ABS(j.value)), COUNT(*), 0 FROM trajectories, "
    "json_each(trajectories.attributes, '$.reward_details') AS j{where}{and_}j.type IN ('integer', 'real') "
    "AND j.key != 'score' GROUP BY project, experiment, step, j.key"
)


def _sum_rows(width: int) -> Callable[[list[tuple]], dict[tuple, list[float]]]:
    """Merge per-shard rows keyed by their leading columns, summing the last ``width``."""

    def merge(rows: list[tuple]) -> dict[tuple, list[float]]:
        out: dict[tuple, list[float]] = {}
        for row in rows:
            key, values = tuple(row[:-width]), row[-width:]
            acc = out.setdefault(key, [0.0] * width)
            for i, v in enumerate(values):
                acc[i] += v or 0
        return out

    return merge


def _merge_answers(rows: list[tuple]) -> dict[tuple, dict[str, list]]:
    """(project, experiment, step) -> answer -> [trajectories, prompts (a set), example ids]."""
    out: dict[tuple, dict[str, list]] = {}
    for project, experiment, step, answer, sample, n, first in rows:
        acc = out.setdefault((project, experiment, step), {}).setdefault(answer, [0, set(), []])
        acc[0] += n
        acc[1].add(str(sample))
        acc[2].append(first)
    return out


def _mean(rows: dict[Any, dict], steps: list, total: str, count: str) -> float | None:
    n = sum(rows[s][count] for s in steps)
    return sum(rows[s][total] for s in steps) / n if n else None


def _checked(store: Any, where: str, params: list, name: str) -> dict[tuple, dict[Any, list[tuple]]]:
    """(project, experiment) -> step -> [(id, the run's reward, the check's)] of the rescoring
    ``name``, for the trajectories selected."""
    rescoring = store.rescoring(name)
    runs = store.aggregate(
        f"SELECT id, project, experiment FROM trajectories{where}",
        params,
        lambda rows: {tid: (p, e) for tid, p, e in rows},
    )
    out: dict[tuple, dict[Any, list[tuple]]] = {}
    for tid, r in rescoring.rewards.items():
        if tid in runs and r.original is not None and r.reward is not None:
            out.setdefault(runs[tid], {}).setdefault(r.step, []).append((tid, r.original, r.reward))
    return out


def _reward_vs_check(checked: dict[Any, list[tuple]] | None, steps: list, base: list, th: Any) -> list:
    if not checked:
        return []

    def share(step: Any) -> float | None:
        rows = checked.get(step, [])
        return sum(o > c + _EPS for _, o, c in rows) / len(rows) if rows else None

    shares = [share(s) for s in base]
    known = [x for x in shares if x is not None]
    baseline = sum(known) / len(known) if known else None
    out = []
    for step in steps:
        rows = checked.get(step, [])
        over = sorted((c - o, tid) for tid, o, c in rows if o > c + _EPS)
        now = share(step)
        change = now - baseline if now is not None and baseline is not None else None
        reward = sum(o for _, o, _ in rows) / len(rows) if rows else None
        check = sum(c for _, _, c in rows) / len(rows) if rows else None
        out.append(
            Signal(
                "reward_vs_check",
                step,
                len(over),
                len(rows),
                now,
                [tid for _, tid in over[:EXAMPLES]],
                change is not None and change > th.check_gap,
                {"reward": reward, "check": check, "baseline": baseline, "change": change},
            )
        )
    return out


def _answer_length(
    store: Any,
    run: tuple,
    rows: dict[Any, dict],
    steps: list,
    base: list,
    th: Any,
    where: str,
    params: list,
    reward_change: dict[Any, float | None],
    rising: dict[Any, bool],
) -> list:
    baseline = _mean(rows, base, "answer_sum", "n")
    out = []
    for step in steps:
        r = rows[step]
        mean = r["answer_sum"] / r["n"] if r["n"] else None
        change = (mean - baseline) / baseline if mean is not None and baseline else None
        unrewarded = r["n"] - r["rewarded"]
        ratio = None
        if r["rewarded"] and unrewarded and r["answer_sum"] > r["rewarded_answer_sum"]:
            rest = (r["answer_sum"] - r["rewarded_answer_sum"]) / unrewarded
            ratio = (r["rewarded_answer_sum"] / r["rewarded"]) / rest
        flagged = change is not None and change > th.answer_growth and rising[step] and (ratio is None or ratio > 1)
        examples = _longest_rewarded(store, run, step, where, params) if flagged else []
        out.append(
            Signal(
                "answer_length_with_reward",
                step,
                int(r["n"]),
                int(r["n"]),
                None,
                examples,
                flagged,
                {
                    "mean_answer_chars": mean,
                    "baseline": baseline,
                    "change": change,
                    "rewarded_vs_rest": ratio,
                    "reward_change": reward_change[step],
                },
            )
        )
    return out


def _longest_rewarded(store: Any, run: tuple, step: Any, where: str, params: list) -> list[str]:
    sql = (
        f"SELECT answer_chars, id FROM trajectories{where or ' WHERE 1'} AND project IS ? AND experiment IS ? "
        f"AND step IS ? AND reward > 0 ORDER BY answer_chars DESC, id LIMIT {EXAMPLES}"
    )
    found = sorted((-chars, tid) for _, (chars, tid) in store._query(sql, [*params, *run, step]))
    return [tid for _, tid in found][:EXAMPLES]


def _collapse(answers: dict[tuple, dict[str, list]], run: tuple, steps: list, rows: dict[Any, dict], th: Any) -> list:
    """Per step: the rewarded trajectories whose answer was paid for at ``collapse_prompts`` or
    more prompts, the most widespread such answer in the detail."""
    out = []
    for step in steps:
        given = answers.get((*run, step), {})
        n = int(rows[step]["n"])
        if not given or not n:
            continue
        wide = {a: v for a, v in given.items() if len(v[1]) >= th.collapse_prompts}
        count = sum(v[0] for v in wide.values())
        top = max(wide.items(), key=lambda kv: (len(kv[1][1]), kv[1][0], kv[0]), default=None)
        flagged = count / n > th.answer_collapse
        out.append(
            Signal(
                "answer_collapse",
                step,
                int(count),
                n,
                count / n,
                sorted(top[1][2])[:EXAMPLES] if top else [],
                flagged,
                {"answer": top[0] if top else None, "prompts": len(top[1][1]) if top else 0},
            )
        )
    return out


def _components(
    components: dict[tuple, list[float]], run: tuple, rows: dict[Any, dict], steps: list, base: list, th: Any
) -> list:
    """Only for a reward that is the sum of its numeric details (nearly every trajectory's)."""
    n = sum(rows[s]["n"] for s in steps)
    if not n or sum(rows[s]["additive"] for s in steps) < 0.9 * n:
        return []
    by_step: dict[Any, dict[str, float]] = {}
    for (project, experiment, step, key), (total, _, _) in components.items():
        if (project, experiment) == run:
            by_step.setdefault(step, {})[key] = total
    if len({k for totals in by_step.values() for k in totals}) < 2:
        return []

    def shares(chosen: list) -> dict[str, float]:
        totals: dict[str, float] = {}
        for s in chosen:
            for key, total in by_step.get(s, {}).items():
                totals[key] = totals.get(key, 0.0) + total
        whole = sum(totals.values())
        return {k: v / whole for k, v in totals.items()} if whole else {}

    baseline = shares(base)
    out = []
    for step in steps:
        now = shares([step])
        if not now:
            continue
        key, share = max(now.items(), key=lambda kv: (kv[1], kv[0]))
        before = baseline.get(key, 0.0)
        flagged = share > th.component_share and before < th.component_share
        out.append(
            Signal(
                "reward_component",
                step,
                int(rows[step]["n"]),
                int(rows[step]["n"]),
                share,
                [],
                flagged,
                {"component": key, "baseline": before},
            )
        )
    return out


def _relative(
    rows: dict[Any, dict],
    steps: list,
    base: list,
    name: str,
    total: str,
    count: str,
    past: Callable[[float, float], bool],
) -> list:
    baseline = _mean(rows, base, total, count)
    out = []
    for step in steps:
        r = rows[step]
        if not r[count]:
            continue
        mean = r[total] / r[count]
        flagged = baseline is not None and past(mean, baseline)
        out.append(
            Signal(
                name,
                step,
                int(r[count]),
                int(r["n"]),
                None,
                [],
                flagged,
                {"mean": mean, "baseline": baseline, "change": None if baseline is None else mean - baseline},
            )
        )
    return out


def _entropy(steps: dict[Any, list], th: Any, rising: dict[Any, bool]) -> list:
    """From the training records: each step's mean of their ``entropy_mean`` against the first
    steps'. A fall is flagged only at a step whose reward did not rise with it (``rising``): a
    policy growing sure of what the reward pays is converging, not collapsing."""
    ordered = sorted((s for s in steps if any(r.entropy_mean is not None for r in steps[s])), key=null_first)
    if not ordered:
        return []

    def entropies(step: Any) -> list[tuple[float, str]]:
        return [(r.entropy_mean, r.trajectory_id) for r in steps[step] if r.entropy_mean is not None]

    base = [e for s in ordered[: th.baseline_steps] for e, _ in entropies(s)]
    baseline = sum(base) / len(base)
    out = []
    for step in ordered:
        found = entropies(step)
        mean = sum(e for e, _ in found) / len(found)
        change = (mean - baseline) / baseline if baseline else None
        flagged = change is not None and change < -th.entropy_drop and not rising.get(step, False)
        lowest = [tid for _, tid in sorted(found)[:EXAMPLES]] if flagged else []
        out.append(
            Signal(
                "entropy_collapse",
                step,
                len(found),
                len(found),
                None,
                lowest,
                flagged,
                {"mean": mean, "baseline": baseline, "change": change, "reward_rising": rising.get(step, False)},
            )
        )
    return out
