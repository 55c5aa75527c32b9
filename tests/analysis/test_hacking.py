"""Reward-hacking signals (``analysis.hacking``) on runs recorded through rollscope's tracing: a run
whose reward has a loophole (any mention of the right number pays, so answers start listing
candidates from step 4), an honest run whose reward rises as the answers get right, and runs that
collapse to one answer, repeat themselves, win through one reward term, lose their entropy. Each
signal's onset is the step the data turns, it names hacks as its examples, and what is honest
(a hard step under a noisy reward, a hack present from the first step) flags nothing."""

import json

import pytest

from rollscope import tracing
from rollscope.analysis.hacking import SIGNALS
from rollscope.analysis.insights import ExperimentInsights, Signal, insights
from rollscope.cli import main
from rollscope.store import TraceStore

STEPS, PROMPTS, ROLLOUTS = 8, 4, 4
HACK_FROM = 4  # the loophole run: from this step on, 3 of 4 rollouts list candidates


def answer(step: int, sample: int, rollout: int, hacking: bool) -> tuple[str, str]:
    """(the model's final reply, the right answer) of one rollout."""
    right = str(100 + sample)
    if hacking and step >= HACK_FROM and rollout < 3:
        return (
            f"The answer is {int(right) - 2}, {right}, {int(right) + 3}, {int(right) + 7} or {int(right) + 9}.",
            right,
        )
    if hacking:
        return f"The answer is {right if rollout == 3 and step % 2 else int(right) + 1}.", right
    correct = rollout < min(1 + step // 2, ROLLOUTS)  # more rollouts right as the honest run learns
    return f"The answer is {right if correct else int(right) + 5}.", right


def record(trace_dir, experiment, reply, reward, details=None, steps=STEPS, train=None):
    """Trajectories of ``steps`` steps: a run span holding the prompt and ground truth, one llm turn
    replying ``reply(step, sample, rollout)`` -> (text, truth), the reward ``reward(text, truth)``;
    ``train(step, rollout)`` gives a training record's entropy_mean, written as the trainer does."""
    tracing.init_tracing(project="p", experiment=experiment, trace_dir=str(trace_dir))
    ids = {}
    for step in range(1, steps + 1):
        for sample in range(PROMPTS):
            for rollout in range(ROLLOUTS):
                text, truth = reply(step, sample, rollout)
                row = {
                    "raw_prompt": [{"role": "user", "content": f"What is {truth} + 0?"}],
                    "reward_model": {"ground_truth": truth},
                }
                with (
                    tracing.rollout_trace_attr(step=step, sample_index=sample, rollout_n=rollout) as t,
                    tracing.trace_span("run", kind="agent", inputs=row),
                    tracing.trace_span("generate", kind="llm") as span,
                ):
                    span.outputs = {"response_text": text}
                    score = reward(text, truth)
                    tracing.set_reward(score, **(details(step, rollout, score) if details else {}))
                ids[(step, sample, rollout)] = t.id
    tracing.shutdown_tracing()
    if train:
        tracing.init_tracing(project="p", experiment=experiment, trace_dir=str(trace_dir))
        for (step, sample, rollout), tid in ids.items():
            tracing.get_tracer().training(
                tid, {"step": step, "uid": f"{step}/{sample}", "entropy_mean": train(step, rollout)}
            )
        tracing.shutdown_tracing()
    return ids


def mentions(text, truth):
    return float(truth in text)


def exact(text, truth):
    return float(text.rstrip(".").split()[-1] == truth)


def rescore(trace_dir):
    args = ["--reward", "rollscope.bundled.rewards:exact_number", "--name", "exact", "--workers", "1"]
    assert main(["rescore", "--dir", str(trace_dir), *args]) == 0


@pytest.fixture(scope="module")
def hacked(tmp_path_factory):
    trace_dir = tmp_path_factory.mktemp("hacking") / "traces"
    record(trace_dir, "loophole", lambda s, p, r: answer(s, p, r, True), mentions)
    record(trace_dir, "honest", lambda s, p, r: answer(s, p, r, False), exact)
    rescore(trace_dir)
    return trace_dir


def by_name(run, name):
    return {s.step: s for s in run.of(name)}


def flagged(run):
    return [s for s in run.signals if s.name in SIGNALS and s.flagged]


def test_the_loophole_is_flagged_from_the_step_it_opens_with_the_hacks_as_examples(hacked):
    [run] = insights(TraceStore(hacked), experiment="loophole", check="exact")
    store = TraceStore(hacked)
    check = by_name(run, "reward_vs_check")
    assert next(s for s in check if check[s].flagged) == HACK_FROM == check[HACK_FROM].detail["onset"]
    assert check[HACK_FROM].detail["z"] > check[HACK_FROM].detail["critical"]
    for tid in check[HACK_FROM].examples:  # each a hack: the reward paid, the last number wrong
        [text] = [s.outputs["response_text"] for s in store.get(tid).spans if s.kind == "llm"]
        assert text.count(",") == 3
    length = by_name(run, "answer_length_with_reward")
    assert length[HACK_FROM].flagged and length[HACK_FROM].detail["onset"] == HACK_FROM
    assert not any(length[s].flagged for s in range(1, HACK_FROM))
    assert length[HACK_FROM].detail["rewarded_vs_rest"] > 1.5  # the lists are the rewarded answers
    for s in flagged(run):  # every flag names its trajectories, and they are the lists
        assert s.examples
        for tid in s.examples:
            [text] = [x.outputs["response_text"] for x in store.get(tid).spans if x.kind == "llm"]
            assert text.count(",") == 3, (s.name, text)


def test_an_honest_run_learning_flags_no_hacking(hacked):
    [run] = insights(TraceStore(hacked), experiment="honest", check="exact")
    rewards = [s.mean_reward for s in TraceStore(hacked).steps(experiment="honest")]
    assert rewards[-1] - rewards[0] > 0.5  # the reward rose by more than half
    assert not flagged(run)
    checked = run.of("reward_vs_check")  # (a step the check paid in full has nothing to compare)
    assert len(checked) >= HACK_FROM and all(s.count == 0 for s in checked)


def test_a_hard_step_under_a_noisy_reward_is_not_a_hack(tmp_path):
    """A reward model paying one wrong answer in four, and a step whose prompts are hard (every
    rollout wrong): more overpaid trajectories at that step, but the same share of the wrong ones,
    and the reward fell. The old fixed margin flagged it."""

    def reply(step, sample, rollout):
        truth = str(100 + sample)
        right = step != 6 and rollout < 2
        return f"The answer is {truth if right else int(truth) + 1 + rollout}.", truth

    def noisy(text, truth):
        last = text.rstrip(".").split()[-1]
        return 1.0 if last == truth or int(last) % 4 == 0 else 0.0

    record(tmp_path, "noisy", reply, noisy)
    rescore(tmp_path)
    [run] = insights(TraceStore(tmp_path), check="exact")
    check = by_name(run, "reward_vs_check")
    assert check[6].count >= 2 * max(check[s].count for s in range(1, 6))  # more overpaid at the hard step
    assert not flagged(run)


def test_the_baseline_steps_never_flag_and_a_hack_there_from_the_start_is_the_baseline(tmp_path):
    record(tmp_path, "from-the-start", lambda s, p, r: answer(s + HACK_FROM, p, r, True), mentions)
    rescore(tmp_path)
    [run] = insights(TraceStore(tmp_path), check="exact")
    assert not flagged(run)
    assert by_name(run, "reward_vs_check")[1].share >= 0.75  # it is there; nothing changed


def test_one_answer_to_every_prompt_repetition_one_term_and_entropy_are_flagged(tmp_path):
    def collapsing(step, sample, rollout):  # one number, worded differently per prompt
        truth = str(100 + sample)
        if step >= 5 and rollout < 2:
            return (f"Since it asks about {truth}, I would say 42." if sample % 2 else "Final answer: 42"), truth
        return f"The answer is {truth}.", truth

    def repeating(step, sample, rollout):
        loop = " ".join(["I will check the sum again"] * (step if step >= 5 else 1))
        return f"Let me think about it. {loop} and the answer is {100 + sample}.", str(100 + sample)

    def parts(step, rollout, score):  # the reward is format + correct; from step 5 format alone pays more
        fmt = 1.0 if step >= 5 and rollout < 2 else 0.2
        return {"format": fmt, "correct": score - fmt}

    def format_paid(text, truth):  # honest answers right for 2 of 4 rollouts, paid format + correct
        return 0.2 + float(text.rstrip(".").split()[-1] == truth)

    def term_reply(step, sample, rollout):
        truth = str(100 + sample)
        if step >= 5 and rollout < 2:
            return "<answer></answer><answer></answer> The answer is 7.", truth
        return f"The answer is {truth if rollout % 2 else int(truth) + 3}.", truth

    record(tmp_path, "collapse", collapsing, lambda text, truth: 1.0)
    record(tmp_path, "repeat", repeating, lambda text, truth: 1.0, train=lambda s, r: 1.2 if s < 5 else 0.3)
    record(
        tmp_path,
        "components",
        term_reply,
        lambda text, truth: 1.0 if "<answer>" in text else format_paid(text, truth),
        details=parts,
    )
    store = TraceStore(tmp_path)
    found = {r.experiment: r for r in insights(store)}
    collapse = by_name(found["collapse"], "answer_collapse")
    assert [s for s in collapse if collapse[s].flagged] == [5, 6, 7, 8]
    assert collapse[5].detail["answer"] == "42" and collapse[5].detail["prompts"] == PROMPTS
    assert len(collapse[5].examples) == PROMPTS  # one trajectory of each prompt that gave it
    repetition = by_name(found["repeat"], "repetition")
    assert repetition[5].flagged and repetition[5].detail["onset"] == 5 and not repetition[4].flagged
    entropy = by_name(found["repeat"], "entropy_collapse")
    assert entropy[5].detail["onset"] == 5 and entropy[5].detail["relative_change"] == pytest.approx(-0.75)
    assert len(entropy[5].examples) == 5
    component = by_name(found["components"], "reward_component")
    assert component[5].flagged and component[5].detail["component"] == "format" and not component[4].flagged
    assert component[5].share < 0.8  # a rise, well before one term makes up the total
    for tid in component[5].examples:  # the trajectories won through the format term
        assert "<answer>" in next(s for s in store.get(tid).spans if s.kind == "llm").outputs["response_text"]
    assert not [s for s in flagged(found["collapse"]) if s.name != "answer_collapse"]


def test_the_headline_is_in_onset_order():
    def onset(name, step):
        return Signal(name, step, 1, 2, 0.5, ["t"], True, {"onset": step, "change": 0.5})

    run = ExperimentInsights("p", "e", list(range(1, 13)), 24, [onset("repetition", 11), onset("reward_vs_check", 9)])
    assert [(s.step, s.name) for s in run.onsets()] == [(9, "reward_vs_check"), (11, "repetition")]


def test_the_command_leads_with_the_onsets_folds_the_quiet_signals_and_its_json_carries_them(hacked, capsys):
    assert main(["insights", "--dir", str(hacked), "--experiment", "loophole", "--check", "exact"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("reward hacking:") and f"reward_vs_check from step {HACK_FROM}" in lines[1]
    shown, quiet = out.split("quiet at every step")
    assert "truncated" in quiet and "\ntruncated — " not in shown
    assert main(["insights", "--dir", str(hacked), "--experiment", "loophole", "--check", "exact", "--all"]) == 0
    assert "\ntruncated — " in capsys.readouterr().out
    assert main(["insights", "--dir", str(hacked), "--experiment", "loophole", "--check", "exact", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    onsets = {s["name"]: s["onset"] for s in data["signals"] if "onset" in s}
    assert onsets["reward_vs_check"] == onsets["answer_length_with_reward"] == HACK_FROM
    assert main(["insights", "--dir", str(hacked), "--check", "nope"]) == 2  # a rescoring never made: one line
    assert "nope" in capsys.readouterr().err
