"""What the trainer did, as the viewer and the CLI show it: a trajectory's training facts and
trained-on tokens by trainer-rollout Δ (masked apart), the per-step advantage boxes and lag, a
prompt's history, the insights of the trainer's side, and the diff of a trajectory with another."""

import json
import re

import pytest

from rollscope.analysis.history import prompt_history
from rollscope.analysis.insights import insights
from rollscope.cli import main
from rollscope.store import TraceStore
from rollscope.viewer.server import Viewer


def _planted(store):
    [t] = store.trajectories(step=1, sample_index=0, rollout_n=2)
    return store.get(t.id)


def test_a_trajectory_page_shows_its_training_and_colours_its_tokens_by_delta(trained_store):
    store = TraceStore(trained_store)
    t = _planted(store)
    status, _, body = Viewer(str(trained_store)).handle(f"/t/{t.id}")
    page = body.decode()
    assert status == 200 and 'id="training"' in page and 'id="training-tokens"' in page
    assert re.search(r'id="advantage">' + re.escape(f"{t.training.advantage:.3g}"), page)
    assert "past 0.5 nats" in page  # its max |Δ| 1.5 passes the mismatch threshold
    tokens = [c.split() for c in re.findall(r'<span class="tok dtok ([\w ]+)"', page)]
    delta = [c[0] for c in tokens]
    assert len(tokens) == 6 and delta[2:4] == ["dx", "dx"]  # the tool response: masked, apart
    assert all(c[-1] == "m" for c in tokens[2:4]) and "m" not in tokens[0] + tokens[4]
    assert delta[4] == "d4" and set(delta[:2] + delta[5:]) == {"d0"}  # Δ 1.5 at position 4; 0 elsewhere
    entropy, kl, advantage = ([c[i] for c in tokens] for i in (1, 2, 3))
    assert entropy[5] == "e0" and set(entropy[:5]) == {"e3"}  # 0.01 nats at position 5, 1.0 elsewhere
    assert kl[1] == kl[4] == "k4" and kl[2:4] == ["kx", "kx"] and {kl[0], kl[5]} == {"k2"}  # 0.8, 1.48, 0.02 nats
    assert len(set(advantage[:2] + advantage[4:])) == 1 and advantage[2:4] == ["ax", "ax"]  # GRPO: one value
    for name in ("delta", "entropy", "kl", "advantage", "trainer"):  # a switch for each, the first chosen
        assert f'id="ov-{name}"' in page
    assert 'id="ov-delta" checked' in page
    assert re.search(r'title="#5 · id [^"]*entropy 0\.01 · reference -0\.52 · KL 0\.02 · advantage', page)
    worst = re.search(r'<table class="list worst ov-worst worst-delta">.*?</table>', page, re.S).group(0)
    assert re.findall(r"<tr><td>(\d+)</td>", worst)[0] == "4"
    surest = re.search(r'<table class="list worst ov-worst worst-entropy">.*?</table>', page, re.S).group(0)
    assert re.findall(r"<tr><td>(\d+)</td>", surest)[0] == "5"  # (each overlay its own table: entropy's lowest)


def test_steps_page_draws_advantage_boxes_lag_and_the_worst_delta(trained_store):
    page = Viewer(str(trained_store)).handle("/steps")[2].decode()
    for title in (
        "advantage per step",
        "GRPO groups with every advantage 0",
        "off-policy lag",
        "max |trainer - rollout| log-prob",
    ):
        assert title in page
    assert page.count('class="step-box"') == 3  # one box per step


def test_prompt_history_follows_one_sample_across_steps(trained_store):
    store = TraceStore(trained_store)
    history = prompt_history(store, 0, experiment="trained")
    assert [h.step for h in history] == [0, 1, 2] and all(h.rollouts == 4 for h in history)
    for h in history:
        rewards = [t.reward for t in store.trajectories(step=h.step, sample_index=0, experiment="trained")]
        assert h.mean_reward == pytest.approx(sum(rewards) / 4) and len(h.advantages) == 4
        assert h.policy_versions == ([0] if h.step == 2 else [h.step - 1])
    page = Viewer(str(trained_store)).handle("/prompt?sample=0&experiment=trained")[2].decode()
    assert page.count("<tr class=") == 3


def test_insights_flag_the_planted_mismatch_and_the_lagging_step(trained_store):
    [run] = insights(TraceStore(trained_store), experiment="trained")
    mismatch = {s.step: s for s in run.of("logprob_mismatch")}
    assert (mismatch[1].count, mismatch[1].flagged, mismatch[0].count) == (1, True, 0)
    assert mismatch[1].examples == [_planted(TraceStore(trained_store)).id]
    lag = {s.step: s for s in run.of("off_policy_lag")}
    assert (lag[2].count, lag[2].detail["max_lag"], lag[1].count) == (8, 1, 0)
    assert not lag[2].flagged  # one update behind is within the default bound (--lag 1)


def test_traces_show_prompt_and_diff_on_the_command_line(trained_store, capsys):
    store = TraceStore(trained_store)
    t = _planted(store)
    assert main(["traces", "show", t.id, "--dir", str(trained_store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["training"]["advantage"] == pytest.approx(t.training.advantage)
    assert shown["training"]["logprob_delta_max"] == pytest.approx(1.5)
    assert main(["traces", "show", t.id, "--dir", str(trained_store), "--tokens"]) == 0
    out = capsys.readouterr().out
    assert "trained-on tokens" in out and "#4" in out and "policy version 0" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if re.match(r"\s*\d+\s+'", line)}
    # position, token, loss, trainer, rollout, Δ, entropy, reference, KL, advantage
    assert rows["5"][2:] == ["1", "-0.5", "-0.5", "0", "0.01", "-0.52", "0.02", f"{t.training.advantage:.4g}"]
    assert rows["2"][2:] == ["masked", "-0.5", "-0", "-", "1", "-0.52", "-", "-"]  # the tool response
    assert rows["4"][5] == "-1.5" and rows["1"][8] == "0.8"  # the planted Δ and KL
    assert main(["traces", "prompt", "0", "--dir", str(trained_store), "--json"]) == 0
    assert [h["step"] for h in json.loads(capsys.readouterr().out)] == [0, 1, 2]
    [other] = store.trajectories(step=1, sample_index=0, rollout_n=1)
    diff = store.diff(t.id, other.id)
    assert diff.fields["training.advantage"] == (t.training.advantage, store.get(other.id).training.advantage)


def test_a_replay_shows_the_originals_advantage_and_version_beside_its_own_reward(trained_store):
    """A replay (``rollscope replay``) trains on nothing: its page and its diff with the original
    carry the original's advantage and policy version beside the replay's reward."""
    from rollscope import tracing

    store = TraceStore(trained_store)
    original = _planted(store)
    tracing.init_tracing(project="proj", experiment="trained", trace_dir=str(trained_store))
    with tracing.rollout_trace_attr(step=1, sample_index=0, rollout_n=2, name="tool_agent", replay_of=original.id) as r:
        tracing.set_reward(0.25)
    tracing.shutdown_tracing()
    page = Viewer(str(trained_store)).handle(f"/t/{r.id}")[2].decode()
    banner = re.search(r'<p class="banner" id="original-training">(.*?)</p>', page, re.S).group(1)
    assert f"advantage {original.training.advantage:.3g}" in banner and "policy version 0" in banner
    assert "reward is 0.25" in banner
    diff = TraceStore(trained_store).diff(original.id, r.id)
    assert diff.fields["training.advantage"] == (original.training.advantage, None)
    assert diff.fields["training.policy_version"] == (0, None)


def test_the_insights_page_names_a_flagged_step_as_a_step_with_a_link_to_it(trained_store):
    """The step a signal is flagged at reads as a step, never as a count: ``step 1``, a link to
    that step's trajectories."""
    viewer = Viewer(str(trained_store))
    status, _, body = viewer.handle("/insights?experiment=trained")
    viewer.store().close()
    page = body.decode()
    assert status == 200 and "<th>flagged at</th>" in page
    row = page[page.index('id="signal-logprob_mismatch"') :]
    cell = row[row.index('class="flagged-steps"') : row.index("</td>", row.index('class="flagged-steps"'))]
    assert 'href="/?step=1&experiment=trained"' in cell and ">step 1</a>" in cell, cell
