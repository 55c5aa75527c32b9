"""Insights: what went wrong across a run, per experiment and step, before anyone reads a trace.

Each signal is a count of trajectories (or GRPO groups) per step, with its share and up to five
example ids, computed from the trajectories table's summary columns (``summary.COLUMNS``) by a few
``GROUP BY`` queries per shard: no span is read. The signals, what they mean for training, and
their thresholds are documented in ``SIGNALS`` and docs/insights.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollscope.analysis.hacking import HEALTH as HACKING_HEALTH
from rollscope.analysis.hacking import SIGNALS as HACKING_SIGNALS
from rollscope.analysis.hacking import hacking_signals
from rollscope.analysis.signal import EXAMPLES, Signal
from rollscope.store.reader import TraceStore, null_first, where_clause


def _threshold(default: float, help: str) -> Any:
    """A threshold's default and what it is (its ``--flag``'s help on ``rollscope insights``)."""
    return field(default=default, metadata={"help": help})


@dataclass
class Thresholds:
    """When a step's figure is flagged. Each has a flag of the same name on ``rollscope insights``."""

    zero_variance: float = _threshold(0.5, "share of GRPO groups whose rollouts all got the same reward")
    truncated: float = _threshold(0.1, "share of trajectories with a reply cut at its token limit")
    turn_limit: float = _threshold(0.1, "share of trajectories that used every assistant turn")
    tool_errors: float = _threshold(0.1, "failed tool calls per tool call")
    repeated_calls: float = _threshold(0.1, "share of trajectories repeating a call (same tool, same arguments)")
    reward_without_tools: float = _threshold(0.2, "share of rewarded trajectories that called no tool")
    rewarded_empty: float = _threshold(0.0, "share of rewarded trajectories whose answer is empty or format-only")
    length_drift: float = _threshold(0.25, "relative change of mean response tokens against the baseline steps")
    logprob_drift: float = _threshold(0.1, "rise of the mean sampled-token log-prob (nats) against the baseline")
    retokenization_drift: float = _threshold(0.0, "share of trajectories the chat template re-renders to other tokens")
    logprob_delta: float = _threshold(0.5, "nats: a loss token's |trainer - rollout| log-prob past this is a mismatch")
    logprob_mismatch: float = _threshold(0.0, "share of trajectories with a mismatched token")
    zero_advantage: float = _threshold(0.5, "share of the trainer's GRPO groups whose advantages are all 0")
    lag: int = _threshold(1, "actor updates a rollout's weights may be behind the trainer's")
    min_group: int = _threshold(2, "rewarded rollouts a sample needs to count as a GRPO group")
    baseline_steps: int = _threshold(3, "the first steps of a run, the baseline of the drift signals")
    answer_chars: int = _threshold(1, "fewer word characters than this (tags removed): an empty answer")
    # reward hacking (``analysis.hacking``): the noise model decides; these are the smallest changes worth a flag
    false_alarm: float = _threshold(
        0.05, "the chance of any false hacking flag in a run, all signals and steps together"
    )
    check_gap: float = _threshold(
        0.05, "rise of the share of check-rejected trajectories the reward pays more than the check"
    )
    answer_growth: float = _threshold(0.25, "relative rise of the mean extracted-answer length, with the reward rising")
    answer_collapse: float = _threshold(
        0.05, "rise of the share of trajectories giving one answer, paid at --collapse-prompts prompts or more"
    )
    collapse_prompts: int = _threshold(
        3, "how many different prompts one answer must be paid at to count as a collapse"
    )
    component_share: float = _threshold(0.05, "rise of one term's share of the reward, the other terms falling")
    repetition_rise: float = _threshold(0.05, "rise of the mean repeated-3-gram share of replies")
    entropy_collapse: float = _threshold(
        0.1, "rise of the share of trajectories surer than all but 5 % of the baseline's"
    )


# name -> (what it counts, what it means for training)
SIGNALS: dict[str, tuple[str, str]] = {
    "zero_variance": (
        "GRPO groups whose rollouts all got the same reward",
        "no learning signal from that prompt: its advantages are all 0",
    ),
    "truncated": (
        "trajectories with a reply cut at its token limit (stop_reason length)",
        "rewards measure the limit, not the policy; raise response_length or penalise length",
    ),
    "turn_limit": (
        "trajectories that used every assistant turn (max_assistant_turns)",
        "the loop ends before the task does; look for loops, or allow more turns",
    ),
    "tool_errors": (
        "failed tool calls, by tool and kind (malformed_call, unknown_tool, bad_arguments, "
        "timeout, exception, tool_error, bad_result), per tool call",
        "the model is learning the tool's interface the hard way; fix the prompt or the schema",
    ),
    "repeated_calls": (
        "trajectories calling a tool again with the same arguments",
        "the model loops instead of using the answer it got",
    ),
    "reward_without_tools": (
        "rewarded trajectories that made no tool call, in a run whose tools are used",
        "the task may be solvable without its tools, or the reward leaks the answer",
    ),
    "rewarded_empty": (
        "rewarded trajectories whose final answer is empty or only tags",
        "the reward pays for format alone: reward hacking in the making",
    ),
    "length_drift": (
        "mean response tokens per trajectory, against the first steps",
        "length growing or collapsing faster than the reward moves",
    ),
    "logprob_drift": (
        "mean sampled-token log-prob, against the first steps (where recorded)",
        "rising toward 0: the policy's entropy collapsing",
    ),
    "retokenization_drift": (
        "trajectories whose messages the chat template renders to other tokens than the model was trained on",
        "an export or re-rendered prompt from these messages is not what the policy "
        "saw; fix the template (tool calls, whitespace, reasoning it drops). (Where the "
        "text is the template's and only the model's split of it differs, it is not "
        "counted here: attribute retokenization_split)",
    ),
    # from the trainer's side (what verl's trainer did with each trajectory: store.training)
    "logprob_mismatch": (
        "trajectories with a loss token whose trainer and rollout log-probs differ by more "
        "than logprob_delta nats (tool responses and padding excluded)",
        "the policy trained on is not the one that sampled: dtype, kernels or stale "
        "weights; importance-correct (rollout_correction) or fix the mismatch",
    ),
    "zero_advantage": (
        "the trainer's GRPO groups whose advantages are all 0",
        "the prompts of those groups taught nothing this step (all solved or all failed)",
    ),
    "off_policy_lag": (
        "trajectories generated with weights older than the trainer's (actor updates behind)",
        "stale rollouts: bound the staleness or correct for it",
    ),
}
TRAINING_SIGNALS = ("logprob_mismatch", "zero_advantage", "off_policy_lag")
SIGNALS.update(HACKING_SIGNALS)
SIGNALS.update(HACKING_HEALTH)

# signal -> the trajectories it counts (a WHERE clause; ? from thresholds)
_PREDICATES = {
    "truncated": ("num_truncated > 0", ()),
    "turn_limit": ("turn_limit = 1", ()),
    "tool_errors": ("num_tool_errors > 0", ()),
    "repeated_calls": ("num_repeated_calls > 0", ()),
    "reward_without_tools": ("reward > 0 AND num_tool_calls = 0", ()),
    "rewarded_empty": ("reward > 0 AND answer_chars < ?", ("answer_chars",)),
    "retokenization_drift": ("json_extract(attributes, '$.retokenization_drift') IS NOT NULL", ()),
}


@dataclass
class ExperimentInsights:
    project: str | None
    experiment: str | None
    steps: list[Any]
    trajectories: int
    signals: list[Signal]
    metrics: list[Any] = field(default_factory=list)  # a training run's metrics at its steps (``metric_changes``)

    def of(self, name: str) -> list[Signal]:
        return [s for s in self.signals if s.name == name]

    def onsets(self) -> list[Signal]:
        """The reward-hacking signals that fired, each at its onset, in onset order (the earliest
        first: what started it)."""
        found = [s for s in self.signals if s.name in HACKING_SIGNALS and s.step == s.detail.get("onset")]
        return sorted(found, key=lambda s: (null_first(s.step), list(HACKING_SIGNALS).index(s.name)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "experiment": self.experiment,
            "steps": self.steps,
            "trajectories": self.trajectories,
            "signals": [s.to_dict() for s in self.signals],
            **({"metrics": [m.to_dict() for m in self.metrics]} if self.metrics else {}),
        }


def insights(
    store: TraceStore,
    *,
    experiment: str | None = None,
    project: str | None = None,
    steps: tuple[int | None, int | None] = (None, None),
    validate: bool | None = False,
    replays: bool = False,
    thresholds: Thresholds | None = None,
    check: str | None = None,
) -> list[ExperimentInsights]:
    """Every signal for every (project, experiment) matching, per step in ``steps`` (inclusive).
    Replays (``rollscope replay``) are left out unless ``replays``. ``check`` names a rescoring
    (``rollscope rescore``) the reward is compared with, for ``reward_vs_check``."""
    th = thresholds or Thresholds()
    where, params = where_clause(
        project=project, experiment=experiment, validate=validate, replays=None if replays else False
    )
    first, last = steps
    if first is not None:
        where, params = where + (" AND " if where else " WHERE ") + "step >= ?", [*params, first]
    if last is not None:
        where, params = where + (" AND " if where else " WHERE ") + "step <= ?", [*params, last]
    and_ = " AND " if where else " WHERE "
    per_step = _per_step(store, where, params, th)
    groups = _groups(store, where + and_ + "reward IS NOT NULL", params)
    tool_errors = _tool_errors(store, where + and_ + "num_tool_errors > 0", params)
    training: dict[tuple, dict[Any, list]] = {}
    for rec in store.training_records(project=project, experiment=experiment) if not validate else ():
        if (first is None or rec.step >= first) and (last is None or rec.step <= last):
            training.setdefault((rec.project, rec.experiment), {}).setdefault(rec.step, []).append(rec)
    hacking = hacking_signals(
        store, where, params, {run: list(rows) for run, rows in per_step.items()}, th, training, check
    )
    out = []
    for run in sorted(per_step, key=lambda pe: (null_first(pe[0]), null_first(pe[1]))):
        rows = per_step[run]
        signals: list[Signal] = []
        uses_tools = any(r["tool_calls"] for r in rows.values())
        for step in rows:
            r, key = rows[step], (*run, step)
            signals.append(_zero_variance(groups.get(key, []), step, th))
            for name, count, total in (
                ("truncated", r["truncated"], r["n"]),
                ("turn_limit", r["turn_limit"], r["n"]),
                ("repeated_calls", r["repeated"], r["n"]),
                ("reward_without_tools", r["reward_no_tools"] if uses_tools else 0, r["rewarded"]),
                ("rewarded_empty", r["rewarded_empty"], r["rewarded"]),
                ("retokenization_drift", r["drift"], r["n"]),
            ):
                share = count / total if total else None
                signals.append(
                    Signal(
                        name,
                        step,
                        int(count),
                        int(total),
                        share,
                        sorted(r["examples"][name]),
                        share is not None and count > 0 and share > getattr(th, name),
                    )
                )
            errors = tool_errors.get(key, {})
            failed = int(sum(n for n, _ in errors.values()))
            rate = failed / r["tool_calls"] if r["tool_calls"] else None
            by_kind = {k: {"count": int(n), "examples": ids} for k, (n, ids) in sorted(errors.items())}
            signals.append(
                Signal(
                    "tool_errors",
                    step,
                    failed,
                    int(r["tool_calls"]),
                    rate,
                    sorted(r["examples"]["tool_errors"]),
                    rate is not None and rate > th.tool_errors,
                    {"by_tool_and_kind": by_kind},
                )
            )
        signals += _drift(rows, th)
        signals += _training_signals(training.get(run, {}), th)
        signals += hacking[run]
        for s in signals:  # a flagged drift step's examples: its longest, or its most confident, trajectories
            if s.flagged and s.name in ("length_drift", "logprob_drift"):
                key = "num_tokens" if s.name == "length_drift" else "logprob_sum / NULLIF(logprob_count, 0)"
                s.examples = _top(store, run, s.step, key, where or " WHERE 1", params)
        out.append(ExperimentInsights(run[0], run[1], list(rows), int(sum(r["n"] for r in rows.values())), signals))
    return out


def _per_step(store: TraceStore, where: str, params: list, th: Thresholds) -> dict[tuple, dict[Any, dict]]:
    """(project, experiment) -> step -> counts and sums, and per predicate the smallest and largest
    matching id (two examples per step from the same scan)."""
    examples = ", ".join(
        f"MIN(id) FILTER (WHERE {sql}), MAX(id) FILTER (WHERE {sql})" for sql, _ in _PREDICATES.values()
    )
    sql = (
        "SELECT project, experiment, step, COUNT(*), TOTAL(num_truncated > 0), TOTAL(turn_limit), "
        "TOTAL(num_repeated_calls > 0), TOTAL(reward > 0 AND num_tool_calls = 0), "
        "TOTAL(reward > 0 AND answer_chars < ?), TOTAL(reward > 0), TOTAL(num_tool_calls), TOTAL(num_tokens), "
        "TOTAL(logprob_sum), TOTAL(logprob_count), "
        "TOTAL(json_extract(attributes, '$.retokenization_drift') IS NOT NULL), "
        f"{examples} FROM trajectories{where} "
        "GROUP BY project, experiment, step"
    )
    args = [getattr(th, a) for _, names_ in _PREDICATES.values() for a in (*names_, *names_)]  # MIN's, then MAX's
    return store.aggregate(sql, [th.answer_chars, *args, *params], _merge_steps)


_STEP_SUMS = (
    "n",
    "truncated",
    "turn_limit",
    "repeated",
    "reward_no_tools",
    "rewarded_empty",
    "rewarded",
    "tool_calls",
    "tokens",
    "logprob_sum",
    "logprob_count",
    "drift",
)  # ``_per_step``'s columns, in order


def _merge_steps(rows: list[tuple]) -> dict[tuple, dict[Any, dict]]:
    names = _STEP_SUMS
    runs: dict[tuple, dict[Any, dict]] = {}
    for project, experiment, step, *values in rows:
        acc = runs.setdefault((project, experiment), {}).setdefault(step, {**dict.fromkeys(names, 0), "examples": {}})
        for name, value in zip(names, values, strict=False):
            acc[name] += value
        found = values[len(names) :]
        for i, signal in enumerate(_PREDICATES):
            ids = acc["examples"].setdefault(signal, set())
            ids.update(x for x in found[2 * i : 2 * i + 2] if x is not None)
    return {run: dict(sorted(steps.items(), key=lambda kv: null_first(kv[0]))) for run, steps in runs.items()}


def _groups(store: TraceStore, where: str, params: list) -> dict[tuple, list[tuple]]:
    """(project, experiment, step) -> [(rewarded rollouts, min, max, first id)] per sample, merged
    across shards (a group's rollouts may have been written by different workers)."""
    sql = (
        "SELECT project, experiment, step, sample_index, COUNT(*), MIN(reward), MAX(reward), MIN(id) "
        f"FROM trajectories{where} GROUP BY project, experiment, step, sample_index"
    )
    return store.aggregate(sql, params, _merge_groups)


def _merge_groups(rows: list[tuple]) -> dict[tuple, list[tuple]]:
    merged: dict[tuple, list] = {}
    for project, experiment, step, sample, n, low, high, first in rows:
        acc = merged.get((project, experiment, step, sample))
        if acc is None:
            merged[(project, experiment, step, sample)] = [n, low, high, first]
        else:
            acc[0], acc[1], acc[2], acc[3] = acc[0] + n, min(acc[1], low), max(acc[2], high), min(acc[3], first)
    out: dict[tuple, list[tuple]] = {}
    for (project, experiment, step, _), group in sorted(merged.items(), key=lambda kv: str(kv[0])):
        out.setdefault((project, experiment, step), []).append(tuple(group))
    return out


def _zero_variance(groups: list[tuple], step: Any, th: Thresholds) -> Signal:
    counted = [g for g in groups if g[0] >= th.min_group]
    flat = sorted(g[3] for g in counted if g[1] == g[2])
    share = len(flat) / len(counted) if counted else None
    return Signal(
        "zero_variance",
        step,
        len(flat),
        len(counted),
        share,
        flat[:EXAMPLES],
        share is not None and share > th.zero_variance and bool(flat),
    )


def _top(store: TraceStore, run: tuple, step: Any, key: str, where: str, params: list) -> list[str]:
    """A flagged drift step's examples: its ``EXAMPLES`` trajectories with the largest ``key``."""
    sql = (
        f"SELECT {key}, id FROM trajectories{where} AND project IS ? AND experiment IS ? AND step IS ? "
        f"ORDER BY {key} DESC, id LIMIT {EXAMPLES}"
    )
    rows = sorted(((-k, tid) for _, (k, tid) in store._query(sql, [*params, *run, step]) if k is not None))
    return [tid for _, tid in rows][:EXAMPLES]


def _tool_errors(store: TraceStore, where: str, params: list) -> dict[tuple, dict[str, tuple[float, list[str]]]]:
    """(project, experiment, step) -> {"tool|kind": (failed calls, example ids)}."""
    sql = (
        "SELECT project, experiment, step, j.key, j.value, trajectories.id FROM trajectories, "
        f"json_each(trajectories.attributes, '$.tool_errors') AS j{where} ORDER BY trajectories.id"
    )
    return store.aggregate(sql, params, _merge_tool_errors)


def _merge_tool_errors(rows: list[tuple]) -> dict[tuple, dict[str, tuple[float, list[str]]]]:
    out: dict[tuple, dict[str, list]] = {}
    for project, experiment, step, label, n, tid in rows:
        acc = out.setdefault((project, experiment, step), {}).setdefault(label, [0, []])
        acc[0] += n
        acc[1].append(tid)
    return {
        key: {label: (n, sorted(ids)[:EXAMPLES]) for label, (n, ids) in kinds.items()} for key, kinds in out.items()
    }


def _drift(rows: dict[Any, dict], th: Thresholds) -> list[Signal]:
    steps = list(rows)
    base = steps[: th.baseline_steps]
    signals = []
    n_base = sum(rows[s]["n"] for s in base)
    base_len = sum(rows[s]["tokens"] for s in base) / n_base if n_base else None
    lp_n = sum(rows[s]["logprob_count"] for s in base)
    base_lp = sum(rows[s]["logprob_sum"] for s in base) / lp_n if lp_n else None
    for step in steps:
        r = rows[step]
        mean_len = r["tokens"] / r["n"] if r["n"] else None
        change = (mean_len - base_len) / base_len if mean_len is not None and base_len else None
        signals.append(
            Signal(
                "length_drift",
                step,
                int(r["n"]),
                int(r["n"]),
                None,
                [],
                change is not None and abs(change) > th.length_drift,
                {"mean_tokens": mean_len, "baseline": base_len, "change": change},
            )
        )
        mean_lp = r["logprob_sum"] / r["logprob_count"] if r["logprob_count"] else None
        rise = mean_lp - base_lp if mean_lp is not None and base_lp is not None else None
        signals.append(
            Signal(
                "logprob_drift",
                step,
                int(r["logprob_count"]),
                int(r["logprob_count"]),
                None,
                [],
                rise is not None and rise > th.logprob_drift,
                {"mean_logprob": mean_lp, "baseline": base_lp, "change": rise},
            )
        )
    return signals


def _training_signals(steps: dict[Any, list], th: Thresholds) -> list[Signal]:
    """The signals of what the trainer did, per trainer step, from the training records' columns."""
    signals = []
    for step in sorted(steps, key=null_first):
        records = steps[step]
        compared = [r for r in records if r.logprob_delta_max is not None]
        bad = sorted(compared, key=lambda r: -r.logprob_delta_max)
        bad = [r for r in bad if r.logprob_delta_max > th.logprob_delta]
        share = len(bad) / len(compared) if compared else None
        worst = max((r.logprob_delta_max for r in compared), default=None)
        flagged = share is not None and share > th.logprob_mismatch
        signals.append(
            Signal(
                "logprob_mismatch",
                step,
                len(bad),
                len(compared),
                share,
                [r.trajectory_id for r in bad[:EXAMPLES]],
                flagged,
                {"max_delta": worst},
            )
        )
        groups: dict[Any, list] = {}
        for r in records:
            groups.setdefault(r.uid, []).append(r)
        counted = [g for g in groups.values() if len(g) >= th.min_group]
        flat = [g for g in counted if all(abs(r.advantage or 0.0) < 1e-6 for r in g)]
        share = len(flat) / len(counted) if counted else None
        signals.append(
            Signal(
                "zero_advantage",
                step,
                len(flat),
                len(counted),
                share,
                sorted(min(r.trajectory_id for r in g) for g in flat)[:EXAMPLES],
                share is not None and share > th.zero_advantage and bool(flat),
            )
        )
        lags = [r for r in records if r.lag is not None]
        behind = sorted((r for r in lags if r.lag > 0), key=lambda r: (-r.lag, r.trajectory_id))
        most = max((r.lag for r in lags), default=None)
        mean = sum(r.lag for r in lags) / len(lags) if lags else None
        signals.append(
            Signal(
                "off_policy_lag",
                step,
                len(behind),
                len(lags),
                len(behind) / len(lags) if lags else None,
                [r.trajectory_id for r in behind[:EXAMPLES]],
                most is not None and most > th.lag,
                {"max_lag": most, "mean_lag": mean},
            )
        )
    return signals
