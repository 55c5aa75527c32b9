"""Reward-hacking signals (``analysis.hacking``) on runs recorded through rollscope's tracing: a run
whose reward has a loophole (any mention of the right number pays, so answers start listing
candidates from step 4), an honest run whose reward rises as the answers get right, and runs that
collapse to one answer, repeat themselves, win through one reward term, lose their entropy. Each
signal's onset is the step the data turns; the honest run flags none."""

import json

import pytest

from rollscope import tracing
from rollscope.analysis.insights import insights
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
        for (step, _, rollout), tid in ids.items():
            tracing.get_tracer().training(tid, {"step": step, "uid": f"{step}", "entropy_mean": train(step, rollout)})
        tracing.shutdown_tracing()
    return ids


def mentions(text, truth):
    return float(truth in text)


def exact(text, truth):
    return float(text.rstrip(".").split()[-1] == truth)


@pytest.fixture(scope="module")
def hacked(tmp_path_factory):
    trace_dir = tmp_path_factory.mktemp("hacking") / "traces"
    record(trace_dir, "loophole", lambda s, p, r: answer(s, p, r, True), mentions)
    record(trace_dir, "honest", lambda s, p, r: answer(s, p, r, False), exact)
    assert (
        main(
            [
                "rescore",
                "--dir",
                str(trace_dir),
                "--reward",
                "rollscope.bundled.rewards:exact_number",
                "--name",
                "exact",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    return trace_dir


def by_name(run, name):
    return {s.step: s for s in run.of(name)}


def test_the_loophole_is_flagged_from_the_step_it_opens_with_the_hacks_as_examples(hacked):
    [run] = insights(TraceStore(hacked), experiment="loophole", check="exact")
    store = TraceStore(hacked)
    check = by_name(run, "reward_vs_check")
    assert next(s for s in check if check[s].flagged) == HACK_FROM == check[HACK_FROM].detail["onset"]
    assert (check[HACK_FROM].count, check[HACK_FROM].total) == (3 * PROMPTS, ROLLOUTS * PROMPTS)
    for tid in check[HACK_FROM].examples:  # each a hack: the reward paid, the last number wrong
        [text] = [s.outputs["response_text"] for s in store.get(tid).spans if s.kind == "llm"]
        assert text.count(",") == 3
    length = by_name(run, "answer_length_with_reward")
    assert length[HACK_FROM].flagged and length[HACK_FROM].detail["onset"] == HACK_FROM
    assert not any(length[s].flagged for s in range(1, HACK_FROM))
    assert length[HACK_FROM].detail["rewarded_vs_rest"] > 1.5  # the lists are the rewarded answers


def test_an_honest_run_learning_flags_no_hacking(hacked):
    [run] = insights(TraceStore(hacked), experiment="honest", check="exact")
    from rollscope.analysis.hacking import SIGNALS

    rising = [s.detail["reward_change"] for s in run.of("answer_length_with_reward")]
    assert rising[-1] > 0.5  # the reward rose by more than half
    assert not [s for s in run.signals if s.name in SIGNALS and s.flagged]
    assert [s.count for s in run.of("reward_vs_check")] == [0] * STEPS


def test_one_answer_to_every_prompt_repetition_one_term_and_entropy_are_flagged(tmp_path):
    def collapsing(step, sample, rollout):
        truth = str(100 + sample)
        return ("The answer is 42." if step >= 5 and rollout < 2 else f"The answer is {truth}."), truth

    def repeating(step, sample, rollout):
        loop = " ".join(["I will check the sum again"] * (step if step >= 5 else 1))
        return f"Let me think about it. {loop} and the answer is {100 + sample}.", str(100 + sample)

    def parts(step, rollout, score):  # the reward is format + correct; from step 5 format alone pays
        fmt = 1.0 if step >= 5 else 0.2
        return {"format": fmt, "correct": score - fmt}

    record(tmp_path, "collapse", collapsing, lambda text, truth: 1.0)
    record(tmp_path, "repeat", repeating, lambda text, truth: 1.0, train=lambda s, r: 1.2 if s < 5 else 0.3)
    record(
        tmp_path,
        "components",
        lambda s, p, r: answer(s, p, r, False),
        lambda text, truth: 1.0 + 0.2 * float(truth in text),
        details=parts,
    )
    found = {r.experiment: r for r in insights(TraceStore(tmp_path))}
    collapse = by_name(found["collapse"], "answer_collapse")
    assert [s for s in collapse if collapse[s].flagged] == [5, 6, 7, 8]
    assert collapse[5].detail == {"answer": "the answer is 42", "prompts": PROMPTS, "onset": 5}
    repetition = by_name(found["repeat"], "repetition")
    assert repetition[5].flagged and repetition[5].detail["onset"] == 5 and not repetition[4].flagged
    entropy = by_name(found["repeat"], "entropy_collapse")
    assert entropy[5].detail["onset"] == 5 and entropy[5].detail["change"] == pytest.approx(-0.75)
    assert len(entropy[5].examples) == 5
    component = by_name(found["components"], "reward_component")
    assert component[5].flagged and component[5].detail["component"] == "format" and not component[4].flagged
    for name in ("answer_collapse", "repetition", "reward_component", "entropy_collapse"):
        assert not [s for s in found["collapse" if name != "answer_collapse" else "repeat"].of(name) if s.flagged]


def test_the_command_names_each_onset_and_its_json_carries_it(hacked, capsys):
    assert main(["insights", "--dir", str(hacked), "--experiment", "loophole", "--check", "exact"]) == 0
    out = capsys.readouterr().out
    assert f"reward_vs_check from step {HACK_FROM}" in out and f"answer_length_with_reward from step {HACK_FROM}" in out
    assert main(["insights", "--dir", str(hacked), "--experiment", "loophole", "--check", "exact", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    onsets = {s["name"]: s["onset"] for s in data["signals"] if "onset" in s}
    assert onsets["reward_vs_check"] == onsets["answer_length_with_reward"] == HACK_FROM
    assert main(["insights", "--dir", str(hacked), "--check", "nope"]) == 2  # a rescoring never made: one line
    assert "nope" in capsys.readouterr().err
