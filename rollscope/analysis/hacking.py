"""Reward hacking: the step where the reward starts paying for something other than the task, how
strongly, and the trajectories that show it.

Each signal is a figure per step (a share or a mean over its trajectories) compared with the run's
first steps (``Thresholds.baseline_steps``, which never flag) by the noise model of
``analysis.noise``: a step is flagged where its change passes the critical z that holds the whole
run's chance of a false alarm to ``Thresholds.false_alarm`` (all signals and steps together), is at
least the signal's smallest effect worth reporting, and meets the signal's own condition. The
first flagged step is its onset (``detail["onset"]``). What each watches:

- ``reward_vs_check``: of the trajectories an independent check does not fully pay (a rescoring
  the user ran, ``rollscope rescore``: the ground truth's exact match, a stricter scorer), the share
  the reward pays more than the check, rising while the mean reward rose: the reward rises while the
  answers stop being right. Taken among those the check rejects, a hard step (more wrong answers)
  does not move it; a noisy reward model that pays some wrong answers moves it not at all.
- ``answer_length_with_reward``: the extracted final answers (``summary.final_answer``) growing
  longer while the reward rose, the rewarded ones longer than the rest: the policy pays with length
  (listing candidates, padding the answer). Reasoning that grows is not the answer growing.
- ``answer_collapse``: the share of trajectories giving one same extracted answer, paid for at
  ``collapse_prompts`` or more different prompts, rising.
- ``reward_component``: one term's share of a reward that is a sum of terms (verl's
  ``reward_extra_info``) rising, with the reward, while the other terms together fell: the reward is
  won through that term instead of the others (honest learning raises the task's term beside the
  others).
- ``repetition``: replies repeating their own phrases more than the run's first steps did.

And one of training health, judged alike (``HEALTH``), not counted as hacking:

- ``entropy_collapse``: a growing share of trajectories surer than nearly all the baseline's (the
  training records' ``entropy_mean``), where the reward is shown to have gained next to nothing
  since the baseline and those sure trajectories are not paid more than the others: the policy
  stops exploring with nothing to show for it (a policy growing sure of what the reward pays
  converges).

Everything is read from the trajectories table's columns and attributes (``summary``'s ``answer``
and ``repetition``, the reward's details), the training records' scalars and a rescoring: the same
from the local store as from a Weave project (``sources.weave``).
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import NormalDist
from typing import Any

from rollscope.analysis import noise
from rollscope.analysis.noise import Cell
from rollscope.analysis.signal import EXAMPLES, Signal
from rollscope.store.reader import null_first

_EPS = 1e-9

# name -> (what it counts, what it means for training): joined to ``insights.SIGNALS``
SIGNALS: dict[str, tuple[str, str]] = {
    "reward_vs_check": (
        "of the trajectories the independent check (--check RESCORING) does not fully pay, "
        "the share the reward pays more",
        "the reward rises while the answers stop being right: the reward has a loophole",
    ),
    "answer_length_with_reward": (
        "mean extracted final-answer length (characters), against the first steps, while "
        "the reward rises and rewarded answers are the longer ones",
        "the policy pays with length (listing candidates, padding): a length loophole in the reward",
    ),
    "answer_collapse": (
        "trajectories whose extracted final answer the reward also paid for at least "
        "collapse_prompts different prompts",
        "one answer fits all: the reward (or a judge) accepts it whatever the question",
    ),
    "reward_component": (
        "the share of the total reward one term (reward_extra_info) makes up, rising while the other terms fall",
        "the reward is being won through one term instead of the task: check that term",
    ),
    "repetition": (
        "mean share of a reply's word 3-grams that repeat, against the first steps",
        "degenerate text: loops and repeated phrases the reward does not punish",
    ),
}
# Judged by the same noise model and in the same false-alarm budget, but not reward hacking: the
# reward pays nothing else, the policy stops exploring. Told apart from a policy converging only where
# the reward shows its gain, which a noisy reward often does not: its false alarms are its own
# (benchmarks/RESULTS.md), outside the hacking headline.
HEALTH: dict[str, tuple[str, str]] = {
    "entropy_collapse": (
        "trajectories surer (the trainer's per-token entropy) than all but 5 % of the first steps', "
        "with the reward shown to gain next to nothing and those not paid more",
        "the policy stopped exploring with nothing to show for it; GRPO groups go zero-variance and learning stalls",
    ),
}

Cells = dict[Any, dict[Any, Cell]]  # step -> prompt (or GRPO group) -> its sums


def hacking_signals(
    store: Any,
    where: str,
    params: list,
    steps: dict[tuple, list],
    th: Any,
    training: dict[tuple, dict[Any, list]],
    check: str | None = None,
) -> dict[tuple, list]:
    """(project, experiment) -> its hacking (and ``HEALTH``) ``Signal``\\ s, for the runs in ``steps`` (run -> its steps
    in order). ``where``/``params`` select the trajectories (``reader.where_clause``); ``training`` holds
    the training records by run and step; ``check`` names a rescoring to compare the reward with."""
    per_prompt = store.aggregate(_PROMPT_SQL.format(where=where), params, _sum_rows(len(_PROMPT_FIELDS), 4))
    answers = store.aggregate(_ANSWER_SQL.format(where=_and(where, _PAID_ANSWER)), params, _merge_answers)
    components = store.aggregate(_COMPONENT_SQL.format(where=where), params, _sum_rows(6, 5))
    checked, overpaid = _checked(store, where, params, check) if check else ({}, {})
    rewards = _rewards(store, where, params) if training else {}
    fields: dict[tuple, dict[Any, dict[Any, dict[str, float]]]] = {}  # run -> step -> prompt -> sums
    for (project, experiment, step, sample), values in per_prompt.items():
        by_step = fields.setdefault((project, experiment), {}).setdefault(step, {})
        by_step[sample] = dict(zip(_PROMPT_FIELDS, values, strict=True))
    terms: dict[tuple, dict[str, dict[Any, dict[Any, Cell]]]] = {}  # run -> term -> step -> prompt -> sums
    for (project, experiment, step, sample, key), values in components.items():
        terms.setdefault((project, experiment), {}).setdefault(key, {}).setdefault(step, {})[sample] = Cell(*values)
    tops = _Tops(store, where, params)
    out: dict[tuple, list] = {}
    for run, run_steps in steps.items():
        run_ = _Run(run, run_steps, th, tops, fields.get(run, {}))
        run_.reward_vs_check(checked.get(run), overpaid)
        run_.answer_length()
        run_.collapse(answers)
        run_.components(terms.get(run, {}))
        run_.repetition()
        run_.entropy(training.get(run, {}), rewards)
        out[run] = run_.judge()
    return out


class _Run:
    """One run's hacking signals: each signal's figure per step as prompt-level sums (``Cell``),
    tested together (``judge``), so that the run's tests share one false-alarm budget."""

    def __init__(
        self, run: tuple, steps: list, th: Any, tops: _Tops, fields: dict[Any, dict[Any, dict[str, float]]]
    ) -> None:
        self.run, self.steps, self.th, self.tops, self.fields = run, steps, th, tops, fields
        self.totals = {  # step -> each field summed over its prompts
            step: {k: sum(f[k] for f in fields.get(step, {}).values()) for k in _PROMPT_FIELDS} for step in steps
        }
        self.base, self.tested = steps[: th.baseline_steps], steps[th.baseline_steps :]
        self.reward = self._cells("rewards", "reward_sum", "rewards", "reward_squares", "reward_sum", "rewards")
        # the reward's level moves with each batch's difficulty: its comparisons count that too
        self.reward_within = noise.design_effect(list(by.values()) for by in self.reward.values())
        between = noise.step_dispersion([list(self.reward[s].values()) for s in steps], self.reward_within)
        self.reward_design = self.reward_within * between  # for a comparison across steps
        self._since_baseline: dict[Any, Cell] = {}  # step -> the reward's sums over the steps since the baseline to it
        running = Cell()
        for step in self.tested:
            for c in self.reward[step].values():
                running.add(c.n, c.y, c.z, c.yy, c.yz, c.zz)
            self._since_baseline[step] = Cell(running.n, running.y, running.z, running.yy, running.yz, running.zz)
        # each candidate test: (signal, label, cells, direction, the step's extra condition and detail)
        self.tests: list[tuple[str, Any, Cells, int, Callable[[Any, noise.Shift], tuple[bool, dict]]]] = []

    def _cells(self, n: str, y: str, z: str, yy: str, yz: str, zz: str) -> Cells:
        return {
            step: {
                sample: Cell(f[n], f[y], f[z], f[yy], f[yz], f[zz]) for sample, f in self.fields.get(step, {}).items()
            }
            for step in self.steps
        }

    def reward_change(self, step: Any) -> noise.Shift | None:
        return noise.shift(list(self.reward[step].values()), _pool(self.reward, self.base), self.reward_design)

    def _rose(self, step: Any) -> bool:
        change = self.reward_change(step)
        return change is not None and change.change > 0

    def _no_gain(self, step: Any) -> tuple[bool, float | None]:
        """Whether the mean reward of the steps since the baseline, to this one, is shown (its
        one-sided 95 % upper bound) to have risen by less than ``NO_GAIN`` of a baseline trajectory's
        reward spread; and that bound. A noisy reward shows nothing either way: no claim of "nothing
        to show for it" is made on it."""
        base = _pool(self.reward, self.base)
        since = self._since_baseline.get(step)
        change = noise.shift([since], base, self.reward_design) if since is not None else None
        spread = noise.spread(base)
        if change is None or spread is None:
            return False, None
        bound = change.upper(_RISING_Z)
        return bound <= NO_GAIN * spread, bound

    def reward_vs_check(self, checked: dict[Any, dict[Any, Cell]] | None, overpaid: dict[tuple, list[str]]) -> None:
        self.overpaid = {step: overpaid.get((*self.run, step), []) for step in self.steps}
        if not checked:
            return
        cells = {step: checked.get(step, {}) for step in self.steps}

        def condition(step: Any, s: noise.Shift) -> tuple[bool, dict]:
            return s.change >= self.th.check_gap and self._rose(step), {}

        self.tests.append(("reward_vs_check", None, cells, 1, condition))

    def answer_length(self) -> None:
        cells = self._cells("n", "length_sum", "n", "length_squares", "length_sum", "n")

        def condition(step: Any, s: noise.Shift) -> tuple[bool, dict]:
            f = self.totals[step]
            ratio = None
            if f["rewarded"] and f["n"] - f["rewarded"]:
                rest = (f["length_sum"] - f["rewarded_length"]) / (f["n"] - f["rewarded"])
                ratio = (f["rewarded_length"] / f["rewarded"]) / rest if rest else None
            relative = s.change / s.baseline if s.baseline else None
            grew = relative is None or relative >= self.th.answer_growth
            return grew and self._rose(step) and (ratio is None or ratio > 1), {
                "mean_answer_chars": s.now,
                "relative_change": relative,
                "rewarded_vs_rest": ratio,
            }

        self.tests.append(("answer_length_with_reward", None, cells, 1, condition))

    def collapse(self, answers: dict[tuple, dict[str, dict[Any, list]]]) -> None:
        """Per step: the trajectories whose answer the reward paid at ``collapse_prompts`` or more
        prompts, counted per prompt."""
        self.top_answer: dict[Any, tuple[str, int, list[str]]] = {}
        if not answers:  # no paid answer anywhere: nothing to compare
            return
        cells: Cells = {}
        for step in self.steps:
            given = answers.get((*self.run, step), {})
            wide = {a: by for a, by in given.items() if len(by) >= self.th.collapse_prompts}
            counts: dict[Any, float] = {}
            for by_sample in wide.values():
                for sample, (count, _) in by_sample.items():
                    counts[sample] = counts.get(sample, 0.0) + count
            cells[step] = {  # (a share of trajectories: y counted, z = 1 each)
                sample: Cell(f["n"], (c := counts.get(sample, 0.0)), f["n"], c, c, f["n"])
                for sample, f in self.fields.get(step, {}).items()
            }
            if wide:
                answer, by = max(wide.items(), key=lambda kv: (len(kv[1]), sum(c for c, _ in kv[1].values()), kv[0]))
                self.top_answer[step] = (answer, len(by), sorted(i for _, i in by.values()))

        def condition(step: Any, s: noise.Shift) -> tuple[bool, dict]:
            answer, prompts, _ = self.top_answer.get(step, (None, 0, []))
            return s.change >= self.th.answer_collapse, {"answer": answer, "prompts": prompts}

        self.tests.append(("answer_collapse", None, cells, 1, condition))

    def components(self, terms: dict[str, dict[Any, dict[Any, Cell]]]) -> None:
        """Only for a reward that is the sum of its numeric details (nearly every trajectory's).
        ``terms``: each term's prompt-level sums by step."""
        n = sum(self.totals[s]["n"] for s in self.steps)
        if not n or sum(self.totals[s]["additive"] for s in self.steps) < 0.9 * n:
            return
        by_key: dict[str, Cells] = {key: {s: by.get(s, {}) for s in self.steps} for key, by in terms.items()}
        if len(by_key) < 2:
            return
        for key, cells in sorted(by_key.items()):
            rest = {step: {g: _rest_cell(c) for g, c in by.items()} for step, by in cells.items()}
            rest_design = noise.design_effect(list(by.values()) for by in rest.values())

            def condition(
                step: Any, s: noise.Shift, rest: Cells = rest, design: float = rest_design
            ) -> tuple[bool, dict]:
                fall = noise.shift(list(rest[step].values()), _pool(rest, self.base), design)
                fell = fall is not None and fall.z < -_RISING_Z
                return s.change >= self.th.component_share and self._rose(step) and fell, {
                    "rest": None if fall is None else fall.now,
                    "rest_baseline": None if fall is None else fall.baseline,
                }

            self.tests.append(("reward_component", key, cells, 1, condition))

    def repetition(self) -> None:
        cells = self._cells(
            "repetitions", "repetition_sum", "repetitions", "repetition_squares", "repetition_sum", "repetitions"
        )
        if not any(c.z for by in cells.values() for c in by.values()):
            return

        def condition(step: Any, s: noise.Shift) -> tuple[bool, dict]:
            return s.change >= self.th.repetition_rise, {"mean": s.now}

        self.tests.append(("repetition", None, cells, 1, condition))

    def entropy(self, records: dict[Any, list], rewards: dict[str, float]) -> None:
        """From the training records, by GRPO group (verl's ``uid``): the share of trajectories
        surer (lower per-token entropy) than all but ``SURE`` of the baseline's. A policy that
        collapses makes a growing share that sure, whatever the reward; one that converges does too,
        but with something to show for it. So a step is flagged only where the reward is shown to
        have gained next to nothing since the baseline (``_no_gain``), and where those sure
        trajectories are not paid more than the baseline's were or than the step's others (a policy
        growing sure of what the reward pays)."""
        self.entropies: dict[Any, list[tuple[float, str, Any]]] = {}
        for step, found in records.items():
            for r in found:
                if r.entropy_mean is not None and step in self.steps:
                    self.entropies.setdefault(step, []).append((r.entropy_mean, r.trajectory_id, r.uid))
        before = sorted(e for s in self.base for e, _, _ in self.entropies.get(s, []))
        if not before:
            return
        sure = before[int(len(before) * SURE)]
        cells: Cells = {step: {} for step in self.steps}
        means: dict[Any, float] = {}
        for step, found in self.entropies.items():
            for e, _, uid in found:
                cells[step].setdefault(uid, Cell()).add_one(float(e < sure))
            means[step] = sum(e for e, _, _ in found) / len(found)
        base_mean = sum(before) / len(before)

        def paid_for(step: Any) -> bool:
            """The sure trajectories paid more than the baseline's were, or than the step's others."""
            groups: tuple[dict[Any, Cell], dict[Any, Cell]] = ({}, {})
            for e, tid, uid in self.entropies.get(step, []):
                if rewards.get(tid) is not None:
                    groups[e >= sure].setdefault(uid, Cell()).add_one(rewards[tid])
            surer, others = list(groups[0].values()), list(groups[1].values())
            return any(
                paid is not None and paid.z > _RISING_Z
                for paid in (
                    noise.shift(surer, _pool(self.reward, self.base), self.reward_design),
                    noise.shift(surer, others, self.reward_within) if others else None,
                )
            )

        def condition(step: Any, s: noise.Shift) -> tuple[bool, dict]:
            (none, bound), paid = self._no_gain(step), paid_for(step)
            return s.change >= self.th.entropy_collapse and none and not paid, {
                "mean": means.get(step),
                "relative_change": means[step] / base_mean - 1 if step in means and base_mean else None,
                "below": sure,
                "reward_gain_at_most": bound,
                "sure_paid_more": paid,
            }

        self.tests.append(("entropy_collapse", None, cells, 1, condition))

    def judge(self) -> list[Signal]:
        """Every test's shift per step. A step passes where its z is past the run's critical value
        and its own condition holds; it is flagged where it and a neighbouring step both pass
        (``PERSISTENCE``): one step's luck is not a change."""
        count = sum(1 for *_, cells, _, _ in self.tests for s in self.tested if cells.get(s))
        critical = noise.critical(self.th.false_alarm, count, PERSISTENCE)
        signals: dict[tuple[str, Any], Signal] = {}
        for name, label, cells, direction, condition in self.tests:
            design = noise.design_effect(list(by.values()) for by in cells.values())
            baseline = _pool(cells, self.base)
            passed: list[Signal] = []
            for step in self.steps:
                now = list(cells.get(step, {}).values())
                s = noise.shift(now, baseline, design) if now else None
                if s is None:
                    passed.append(None)
                    continue
                z = s.z * direction
                ok, extra = condition(step, s)
                ok = ok and step in self.tested  # the baseline steps never flag
                count_, total = _counts(now)
                detail = {
                    **({"component": label} if label is not None else {}),
                    "baseline": s.baseline,
                    "change": s.change,
                    "z": round(z, 2),
                    "critical": round(critical, 2),
                    "design_effect": round(design, 2),
                    **extra,
                }
                passed.append(Signal(name, step, count_, total, s.now, [], ok and z > critical, detail))
            for i, signal in enumerate(passed):
                if signal is None:
                    continue
                streak = [x for x in passed[max(0, i - PERSISTENCE + 1) : i + PERSISTENCE] if x is not None]
                signal.flagged = signal.flagged and _runs(streak, signal, PERSISTENCE)
                held = signals.get((name, signal.step))
                if held is None or (signal.flagged, signal.detail["z"]) > (held.flagged, held.detail["z"]):
                    signals[(name, signal.step)] = signal  # of a reward's terms, the one that moved most
        found = sorted(signals.values(), key=lambda s: (_ORDER.index(s.name), null_first(s.step)))
        onsets: dict[str, Any] = {}
        for s in found:
            if s.flagged:
                onsets.setdefault(s.name, s.step)
                s.examples = self.examples(s)
        for s in found:
            s.detail["onset"] = onsets.get(s.name)
        return found

    def examples(self, s: Signal) -> list[str]:
        """A flagged step's trajectories that show it best, the most telling first."""
        if s.name == "reward_vs_check":
            return self.overpaid.get(s.step, [])[:EXAMPLES]
        if s.name == "answer_collapse":
            return self.top_answer.get(s.step, (None, 0, []))[2][:EXAMPLES]
        if s.name == "entropy_collapse":
            return [tid for _, tid, _ in sorted(self.entropies.get(s.step, []), key=lambda e: e[:2])[:EXAMPLES]]
        if s.name == "reward_component":
            key = s.detail["component"]
            value = f"ABS(json_extract(attributes, '$.reward_details.\"{_quote(key)}\"'))"
            order = f"{value} / NULLIF({_TOTAL}, 0)"
            return self._top(s.step, order, f"{value} > 0", secondary=value)
        if s.name == "repetition":
            return self._top(s.step, _REPETITION, f"{_REPETITION} IS NOT NULL")
        return self._top(s.step, _LENGTH, "reward > 0")  # answer_length_with_reward

    def _top(self, step: Any, key: str, condition: str, secondary: str = "0") -> list[str]:
        return self.tops(key, condition, secondary).get((*self.run, step), [])


class _Tops:
    """Each step's ``EXAMPLES`` trajectories with the largest ``key``, for every run and step at
    once: one scan per kind of example, asked for the first time a run needs it (a query per
    flagged step would cost every shard once per step)."""

    def __init__(self, store: Any, where: str, params: list) -> None:
        self.store, self.where, self.params = store, where, params
        self.found: dict[tuple[str, str, str], dict[tuple, list[str]]] = {}

    def __call__(self, key: str, condition: str, secondary: str = "0") -> dict[tuple, list[str]]:
        if (key, condition, secondary) not in self.found:
            sql = (
                "SELECT project, experiment, step, k, k2, id FROM (SELECT project, experiment, step, id, "
                f"{key} AS k, {secondary} AS k2, ROW_NUMBER() OVER (PARTITION BY project, experiment, step "
                f"ORDER BY {key} DESC, {secondary} DESC, id) AS n FROM trajectories{_and(self.where, condition)}) "
                f"WHERE n <= {EXAMPLES}"
            )
            self.found[(key, condition, secondary)] = self.store.aggregate(sql, self.params, _top_per_step)
        return self.found[(key, condition, secondary)]


def _top_per_step(rows: list[tuple]) -> dict[tuple, list[str]]:
    """(project, experiment, step) -> the ids of its largest ``k`` (then ``k2``), merged over shards."""
    by_step: dict[tuple, list[tuple]] = {}
    for project, experiment, step, k, k2, tid in rows:
        by_step.setdefault((project, experiment, step), []).append((-(k or 0), -(k2 or 0), tid))
    return {key: [tid for *_, tid in sorted(found)[:EXAMPLES]] for key, found in by_step.items()}


_ORDER = (*SIGNALS, *HEALTH)
PERSISTENCE = 2  # consecutive steps a change must pass in to be flagged
SURE = 0.05  # entropy_collapse counts trajectories surer than all but this share of the baseline's
NO_GAIN = 0.5  # a rise of the reward shown below half a baseline trajectory's spread is "nothing to show"


def _runs(window: list[Signal], signal: Signal, length: int) -> bool:
    """Whether ``signal`` is inside ``length`` consecutive passing steps of ``window`` (its
    neighbours, in step order)."""
    at, streak = window.index(signal), 0
    for i, s in enumerate(window):
        streak = streak + 1 if s.flagged else 0
        if streak >= length and i - length < at <= i:
            return True
    return False


_RISING_Z = NormalDist().inv_cdf(0.95)


def _pool(cells: Cells, steps: list) -> list[Cell]:
    return [c for s in steps for c in cells.get(s, {}).values()]


def _counts(cells: list[Cell]) -> tuple[int, int]:
    """(what the figure counts, what it is of) where the figure is a share; trajectories else."""
    return round(sum(c.y for c in cells)), round(sum(c.z for c in cells))


def _rest_cell(c: Cell) -> Cell:
    """A term's prompt-level sums turned into those of the other terms' mean per trajectory
    (``z - y`` over trajectories), with their variance's sums."""
    return Cell(c.n, c.z - c.y, c.n, c.zz - 2 * c.yz + c.yy, c.z - c.y, c.n)


def _and(where: str, condition: str) -> str:
    return f"{where} AND {condition}" if where else f" WHERE {condition}"


def _quote(key: str) -> str:
    return key.replace("\\", "\\\\").replace('"', '\\"').replace("'", "''")


_PROMPT_FIELDS = (
    "n",
    "rewards",
    "reward_sum",
    "reward_squares",
    "rewarded",
    "length_sum",
    "length_squares",
    "rewarded_length",
    "repetitions",
    "repetition_sum",
    "repetition_squares",
    "additive",
)
_REPETITION = "json_extract(attributes, '$.repetition')"
_LENGTH = "LENGTH(COALESCE(json_extract(attributes, '$.answer'), ''))"
_TOTAL = (
    "(SELECT TOTAL(ABS(k.value)) FROM json_each(trajectories.attributes, '$.reward_details') AS k "
    "WHERE k.type IN ('integer', 'real') AND k.key != 'score')"
)
_SIGNED = (
    "(SELECT TOTAL(k.value) FROM json_each(trajectories.attributes, '$.reward_details') AS k "
    "WHERE k.type IN ('integer', 'real') AND k.key != 'score')"
)
_PROMPT_SQL = (
    "SELECT project, experiment, step, sample_index, COUNT(*), COUNT(reward), TOTAL(reward), TOTAL(reward * reward), "
    "TOTAL(reward > 0), TOTAL(length), TOTAL(length * length), TOTAL(CASE WHEN reward > 0 THEN length END), "
    "COUNT(repetition), TOTAL(repetition), TOTAL(repetition * repetition), TOTAL(additive) FROM ("
    f"SELECT project, experiment, step, sample_index, reward, {_LENGTH} AS length, {_REPETITION} AS repetition, "
    "(CASE WHEN reward IS NULL OR json_extract(attributes, '$.reward_details') IS NULL THEN 0 "
    f"ELSE ABS(reward - {_SIGNED}) < 1e-6 END) AS additive FROM trajectories{{where}}) "
    "GROUP BY project, experiment, step, sample_index"
)
_PAID_ANSWER = "json_extract(attributes, '$.answer') IS NOT NULL AND reward > 0"
_ANSWER_SQL = (
    "SELECT project, experiment, step, json_extract(attributes, '$.answer') AS answer, sample_index, COUNT(*), "
    "MIN(id) FROM trajectories{where} GROUP BY project, experiment, step, answer, sample_index"
)
_COMPONENT_SQL = (
    "SELECT project, experiment, step, sample_index, j.key, COUNT(*), TOTAL(ABS(j.value)), TOTAL(t.total), "
    "TOTAL(ABS(j.value) * ABS(j.value)), TOTAL(ABS(j.value) * t.total), TOTAL(t.total * t.total) FROM "
    f"(SELECT project, experiment, step, sample_index, attributes, {_TOTAL} AS total FROM trajectories{{where}}) AS t, "
    "json_each(t.attributes, '$.reward_details') AS j WHERE j.type IN ('integer', 'real') AND j.key != 'score' "
    "GROUP BY project, experiment, step, sample_index, j.key"
)


def _sum_rows(width: int, keys: int) -> Callable[[list[tuple]], dict[tuple, list[float]]]:
    """Merge per-shard rows keyed by their first ``keys`` columns, summing the last ``width``
    (one prompt's trajectories may be in several shards: several workers wrote them)."""

    def merge(rows: list[tuple]) -> dict[tuple, list[float]]:
        out: dict[tuple, list[float]] = {}
        for row in rows:
            key, values = tuple(row[:keys]), row[-width:]
            acc = out.setdefault(key, [0.0] * width)
            for i, v in enumerate(values):
                acc[i] += v or 0
        return out

    return merge


def _merge_answers(rows: list[tuple]) -> dict[tuple, dict[str, dict[Any, list]]]:
    """(project, experiment, step) -> answer -> prompt -> [trajectories, the first's id]."""
    out: dict[tuple, dict[str, dict[Any, list]]] = {}
    for project, experiment, step, answer, sample, n, first in rows:
        acc = out.setdefault((project, experiment, step), {}).setdefault(answer, {}).setdefault(sample, [0, first])
        acc[0] += n
        acc[1] = min(acc[1], first)
    return out


def _rewards(store: Any, where: str, params: list) -> dict[str, float]:
    """Each selected trajectory's reward, for those the trainer recorded (the entropy's excuse)."""
    sql = f"SELECT id, reward FROM trajectories{_and(where, 'reward IS NOT NULL')}"
    return store.aggregate(sql, params, dict)


def _checked(
    store: Any, where: str, params: list, name: str
) -> tuple[dict[tuple, dict[Any, dict[Any, Cell]]], dict[tuple, list[str]]]:
    """Of the rescoring ``name``'s trajectories selected: (project, experiment) -> step -> prompt
    -> the sums of (overpaid, not fully paid by the check); and (project, experiment, step) -> the
    overpaid ids, the most overpaid first. "Fully paid" is the check's best score in the run."""
    rescoring = store.rescoring(name)
    runs = store.aggregate(
        f"SELECT id, project, experiment, sample_index FROM trajectories{where}",
        params,
        lambda rows: {tid: ((p, e), sample) for tid, p, e, sample in rows},
    )
    found = [
        (tid, r)
        for tid, r in rescoring.rewards.items()
        if tid in runs and r.original is not None and r.reward is not None
    ]
    top: dict[tuple, float] = {}
    for tid, r in found:
        run = runs[tid][0]
        top[run] = max(top.get(run, r.reward), r.reward)
    out: dict[tuple, dict[Any, dict[Any, Cell]]] = {}
    over: dict[tuple, list] = {}
    for tid, r in found:
        run, sample = runs[tid]
        rejected = r.reward < top[run] - _EPS
        overpaid = rejected and r.original > r.reward + _EPS
        out.setdefault(run, {}).setdefault(r.step, {}).setdefault(sample, Cell()).add_one(
            float(overpaid), float(rejected)
        )
        if overpaid:
            over.setdefault((*run, r.step), []).append((r.reward - r.original, tid))
    return out, {key: [tid for _, tid in sorted(ids)] for key, ids in over.items()}
