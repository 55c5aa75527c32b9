"""verl's own ``main_ppo`` (the v0 trainer: ``AgentLoopManager`` and verl's plain
``AgentLoopWorker`` as Ray actors), rollscope's tool loop and calculator named through verl's keys,
``trace.backend=local,mlflow`` and nothing else: every trajectory of every step is stored, complete,
with the reward verl computed for it — the same numbers verl's own batch dump holds — and with what
the trainer did with it (group, advantage, policy version, the trainer's log-probs), each field
recomputed here from sources the join does not use: the stored rewards, the LLM spans' log-probs
and weight versions, verl's GRPO formula."""

import os
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from rollscope.store import TraceStore
from rollscope.trajectory.records import last_user_message
from tests.trainer.main_ppo import PROMPTS, ROLLOUTS, STEPS, question, train

pytestmark = pytest.mark.slow


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_model):
    """The run, with a reference policy (a KL loss, so verl computes ``ref_log_prob``), and verl's
    own batch of every step saved by ``tests.trainer.batch_probe`` in ``probe/``."""
    root = tmp_path_factory.mktemp("main_ppo_local")
    (root / "probe").mkdir()
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{root}/mlruns.db",
        "VERL_USE_EXTERNAL_MODULES": "tests.trainer.batch_probe",
        "ROLLSCOPE_TEST_PROBE_DIR": str(root / "probe"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    return train(
        root,
        demo_model,
        "trainer.use_v1=False",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        backend="local,mlflow",
        env=env,
    )


@pytest.fixture(scope="module")
def stored(run):
    store = TraceStore(run.trace_dir)
    return [(t, t.tree()) for t in store.trajectories(limit=None)]


def test_every_trajectory_of_every_step_is_stored_with_verls_attributes(run, stored):
    assert len(run.dump) == STEPS * PROMPTS * ROLLOUTS
    keys = Counter((t.step, t.sample_index) for t, _ in stored)
    assert sorted({step for step, _ in keys}) == list(range(1, STEPS + 1))
    assert set(keys.values()) == {ROLLOUTS}  # whole GRPO groups
    assert sum(keys.values()) == len(run.dump)
    for t, _ in stored:
        assert (t.experiment, t.project, t.validate, t.status) == ("demo-train", "rollscope-demo", False, "ok")
        assert t.agent_name == "rollscope_tool_agent" and t.attributes["opened_by"] == "verl"
    assert sorted(t.rollout_n for t, _ in stored) == sorted(list(range(ROLLOUTS)) * STEPS * PROMPTS)


def test_each_trajectory_is_complete_run_turns_and_tool_calls(stored):
    tool_calls = 0
    for t, tree in stored:
        [root] = tree
        assert root.name == "ToolAgentLoop.run"
        kinds = [c.kind for c in root.children]
        # verl's count: the prompt, each assistant turn, each turn of tool responses it appended
        # (none when they would overflow response_length: then the calls ran, the loop ended)
        turns = root.outputs["num_turns"]
        assert kinds.count("llm") == t.num_llm_calls >= 1
        assert kinds.count("llm") <= turns - 1 <= kinds.count("llm") + kinds.count("tool")
        assert kinds[0] == "llm" and ("llm", "llm") not in pairwise(kinds)  # a turn, its tool calls, the next
        tool_calls += kinds.count("tool")
    assert tool_calls > 0


def test_rewards_are_verls_numbers_for_each_trajectory(run, stored, demo_model):
    """Each stored trajectory matched to verl's dumped row by step, prompt and decoded response:
    the reward and its components are the ones verl's reward function returned."""
    tokenizer = AutoTokenizer.from_pretrained(demo_model)
    dumped = Counter(
        (r["step"], question(r["input"]), r["output"], r["score"], r["correct"], r["used_calculator"]) for r in run.dump
    )
    traced = Counter()
    for t, [root] in stored:
        details = t.attributes["reward_details"]
        assert details["source"] == "verl_reward"
        response = tokenizer.decode(root.outputs["response_ids"], skip_special_tokens=True)
        traced[
            (
                t.step,
                question(last_user_message(root.inputs["raw_prompt"])),
                response,
                t.reward,
                details["correct"],
                details["used_calculator"],
            )
        ] += 1
    assert traced == dumped


def _llm_spans(tree):
    [root] = tree
    return [c for c in root.children if c.kind == "llm"]


def test_every_trajectory_carries_its_group_and_advantage_as_verl_computed_them(run, stored):
    """The group is verl's uid (one per prompt and step, the prompt's rollouts in it); its mean
    and std and each advantage are what verl's GRPO formula gives for the stored rewards."""
    by_uid: dict[str, list] = {}
    for t, _ in stored:
        record = t.training
        assert record is not None and record.step == t.step and record.values["estimator"] == "grpo"
        assert record.values["score"] == t.reward  # verl's reward, as the worker recorded it
        by_uid.setdefault(record.uid, []).append(t)
    assert len(by_uid) == STEPS * PROMPTS
    for members in by_uid.values():
        assert len({(t.step, t.sample_index) for t in members}) == 1 and len(members) == ROLLOUTS
        rewards = torch.tensor([t.reward for t in members])
        mean, std = rewards.mean(), rewards.std()
        for t in members:
            assert t.training.group_size == ROLLOUTS
            assert t.training.group_mean == pytest.approx(float(mean)) and t.training.group_std == pytest.approx(
                float(std)
            )
            assert t.training.advantage == pytest.approx(float((t.reward - mean) / (std + 1e-6)), abs=1e-5)
    dumped = Counter((r["step"], r["score"]) for r in run.dump)  # verl's own dump of the batch
    assert Counter((t.training.step, t.training.values["score"]) for t, _ in stored) == dumped


def test_export_carries_the_trainers_group_and_advantage_and_pairs_each_group_that_differs(run, stored, tmp_path):
    """``rollscope export`` on the trainer's store: a Parquet row per trajectory with verl's uid as
    its group and verl's advantage; a DPO pair for exactly the groups whose rewards differ."""
    import json

    import pyarrow.parquet as pq

    from rollscope.datasets import export

    with TraceStore(run.trace_dir) as store:
        export(store, tmp_path / "run.parquet", "parquet")
        pairs = export(store, tmp_path / "dpo.jsonl", "dpo")
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "run.parquet").to_pylist()}
    assert len(rows) == len(stored)
    for t, _ in stored:
        row = rows[t.id]
        assert (row["group_id"], row["advantage"], row["reward"]) == (t.training.uid, t.training.advantage, t.reward)
        assert row["policy_version"] == t.training.policy_version and row["messages"][0]["role"] in ("system", "user")
    by_uid: dict[str, set] = {}
    for t, _ in stored:
        by_uid.setdefault(t.training.uid, set()).add(t.reward)
    differing = sum(len(rewards) > 1 for rewards in by_uid.values())
    lines = [json.loads(line) for line in (tmp_path / "dpo.jsonl").read_text().splitlines()]
    assert pairs.rows == len(lines) == differing > 0
    assert all(rows[p["chosen_id"]]["reward"] > rows[p["rejected_id"]]["reward"] for p in lines)


def test_rescoring_with_verls_own_reward_reproduces_it_and_an_inversion_flips_a_known_group(run, stored, tmp_path):
    """``rollscope rescore`` on the trainer's store: verl's reward function, given what verl gave it
    (the response ids decoded as its reward manager decodes them), gives every stored reward back;
    the same reward inverted for one question flips exactly that group's advantages."""
    from rollscope.datasets.rescore import rescore
    from rollscope.store import rescorings

    with TraceStore(run.trace_dir) as store:
        same = rescore(store, "rollscope.bundled.rewards:calculator_drill", name="same", workers=2)
    assert same.trajectories == len(stored) and same.failed == 0 and same.totals()["moved"] == 0
    assert {i: r.reward for i, r in rescorings.load(run.trace_dir, "same").rewards.items()} == {
        t.id: t.reward for t, _ in stored
    }
    by_group: dict[tuple, list] = {}
    for t, _ in stored:
        by_group.setdefault((t.step, t.sample_index), []).append(t)
    step, sample = next(k for k, g in sorted(by_group.items()) if len({t.reward for t in g}) > 1)

    def truth_of(t):
        return next(s for s in t.spans if s.kind == "agent").inputs["reward_model"]["ground_truth"]

    truth = truth_of(by_group[(step, sample)][0])
    reward = tmp_path / "inverted.py"
    reward.write_text(
        "from rollscope.bundled.rewards import calculator_drill\n\n"
        "def inverted(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    score = calculator_drill(data_source, solution_str, ground_truth)['score']\n"
        f"    return 1.0 - score if ground_truth == {truth!r} else score\n"
    )
    with TraceStore(run.trace_dir) as store:
        report = rescore(store, f"{reward}:inverted", workers=1, step=step)
    flipped = [g for g in report.changed if g.flipped]
    same_truth = {
        k for k, g in by_group.items() if k[0] == step and len({t.reward for t in g}) > 1 and truth_of(g[0]) == truth
    }
    assert {(g.step, int(g.sample_index)) for g in flipped} == same_truth
    for t, _ in stored:  # the run's own rewards untouched
        assert TraceStore(run.trace_dir).get(t.id).reward == t.reward


def test_retention_keeps_exactly_the_anomalous_groups_of_the_trainers_run(run, stored, tmp_path):
    """``traces compact --retain`` (every kind but outliers, no sample) on a copy of the trainer's
    store: the groups kept are those with equal rewards, a failed tool call, an error span or a cut
    reply, counted from the stored trajectories; kept trajectories keep their training records."""
    import shutil

    from rollscope.cli import main

    copy = tmp_path / "traces"
    shutil.copytree(run.trace_dir, copy)
    assert (
        main(["traces", "compact", "--dir", str(copy), "--retain", "zero_variance+tool_error+error+truncated,sample=0"])
        == 0
    )
    by_group: dict[tuple, list] = {}
    for t, _ in stored:
        by_group.setdefault((t.step, t.sample_index), []).append(t)
    expected = {
        k
        for k, g in by_group.items()
        if len({t.reward for t in g}) == 1
        or any(t.num_tool_errors or t.num_errors or t.num_truncated or t.turn_limit for t in g)
    }
    with TraceStore(copy) as store:
        left = store.trajectories(limit=None)
        assert {(t.step, t.sample_index) for t in left} == expected
        assert sorted(t.id for t in left) == sorted(t.id for k in expected for t in by_group[k])  # whole groups
        assert all(t.training is not None and t.training.uid for t in left)


def test_policy_version_is_the_one_each_turn_was_generated_with(stored):
    from rollscope.viewer.views import figures

    for t, tree in stored:
        versions = [s.outputs["extra_fields"]["global_steps"] for s in _llm_spans(tree)]
        assert all(f"policy v{v}" in figures(s) for s, v in zip(_llm_spans(tree), versions, strict=True))
        assert t.training.policy_version == min(versions) == t.step - 1  # the weights of the step before
        assert t.training.values["policy_version_max"] == max(versions) and t.training.lag == 0


def test_trainer_log_probs_agree_with_the_rollouts_on_every_loss_token(stored):
    """The rollout side equals the LLM spans' log-probs token by token; with the server on the
    actor's weights (float32, both) the trainer's differ by float noise only (~1e-6 here; at most
    1.1e-5 over the 768 trajectories of ``make demo-train``, hence 5e-5); tool responses are masked,
    never counted, and shown apart (their rollout log-prob is verl's 0: tens of nats "off")."""
    masked_seen = 0
    for t, tree in stored:
        values = t.training.values
        [root] = tree
        mask = values["response_mask"]
        assert mask == root.outputs["response_mask"][: len(mask)]
        sampled = [lp for s in _llm_spans(tree) for lp in s.outputs["log_probs"]]
        on_loss = [lp for lp, m in zip(values["rollout_log_probs"], mask, strict=True) if m]
        assert on_loss == pytest.approx(sampled[: len(on_loss)], abs=1e-6)
        gaps = (torch.tensor(values["old_log_probs"]) - torch.tensor(values["rollout_log_probs"])).abs()
        deltas = [float(d) for d, m in zip(gaps, mask, strict=True) if m]  # in float32, as the trainer took them
        assert t.training.logprob_delta_max == pytest.approx(max(deltas), abs=1e-7) and max(deltas) < 5e-5  # (float32)
        if values["masked_tokens"]:
            masked_seen += 1
            assert values["masked_delta_max"] > 1.0 > t.training.logprob_delta_max
    assert masked_seen > 0


def test_every_token_carries_verls_own_entropy_log_probs_advantage_and_mask(run, stored, tmp_path):
    """Per response token, the stored record holds what verl's own batch held at the actor update
    (read in the trainer's process by ``batch_probe``, which reads nothing of rollscope's): the
    entropy of the old-log-prob pass (which verl drops once averaged), the trainer's, the
    rollout's and the reference policy's log-probs, the loss mask and the advantage (GRPO's one
    value, where the mask is 1), at float32's precision, for every trajectory of every step; and
    ``rollscope export`` writes them as Parquet columns, the advantages as verl's tensor."""
    import pyarrow.parquet as pq

    from rollscope.datasets import export

    with TraceStore(run.trace_dir) as store:
        export(store, tmp_path / "run.parquet", "parquet")
    exported = {r["id"]: r for r in pq.read_table(tmp_path / "run.parquet").to_pylist()}
    records = {t.id: t.training.values for t, _ in stored}
    compared = 0
    for step in range(1, STEPS + 1):
        batch = torch.load(run.root / "probe" / f"step-{step}.pt")
        for row, tid in enumerate(batch["trajectory_ids"]):
            values = records[tid]
            n = values["length"]
            mask = batch["response_mask"][row, :n]
            assert values["response_mask"] == mask.int().tolist()
            for name, verls in (
                ("entropy", "entropys"),
                ("old_log_probs", "old_log_probs"),
                ("rollout_log_probs", "rollout_log_probs"),
                ("ref_log_probs", "ref_log_prob"),
            ):
                stored_values = torch.tensor(values[name], dtype=torch.float32)
                assert torch.equal(stored_values, batch[verls][row, :n].float()), (tid, name)
            advantage = batch["advantages"][row, :n][mask.bool()]
            assert torch.allclose(advantage, torch.tensor(values["advantage"]), atol=1e-6)
            entropy = batch["entropys"][row, :n][mask.bool()]
            assert values["entropy_mean"] == pytest.approx(float(entropy.mean()), abs=1e-6)
            kl = (batch["old_log_probs"][row, :n] - batch["ref_log_prob"][row, :n])[mask.bool()]
            assert values["kl_mean"] == pytest.approx(float(kl.mean()), abs=1e-6)
            row_ = exported[tid]
            assert torch.equal(torch.tensor(row_["token_advantages"]), batch["advantages"][row, :n].float())
            assert torch.equal(torch.tensor(row_["entropy"]), batch["entropys"][row, :n].float())
            assert row_["response_mask"] == values["response_mask"]
            compared += 1
    assert compared == len(stored) == STEPS * PROMPTS * ROLLOUTS


def test_the_demos_chat_template_renders_each_conversation_to_the_tokens_it_was_trained_on(stored, demo_model):
    """The demo's chat template writes a reply's tool calls back where and as the model wrote them
    (verl's parser moves them out of the content; rollscope's keeps their text), calls that did
    not parse included: a conversation drifts only where ids the model sampled are not the ones
    their text tokenizes to (a split the tokenizer never makes), and that is told apart."""
    tokenizer = AutoTokenizer.from_pretrained(demo_model)
    calling = clean = 0
    for t, tree in stored:
        [root] = tree
        check = root.attributes["rollscope.retokenization"]
        calling += t.num_tool_calls > 0
        assert "retokenization_drift" not in t.attributes, check
        replies = [s.outputs["token_ids"] for s in _llm_spans(tree)]
        if all(tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False) == ids for ids in replies):
            clean += 1
            assert check["match"] is True, check
        else:
            assert check["cause"] == "split", check
    assert calling > 0 and clean > 0


def test_mlflow_traces_carry_the_training_record_as_tags(run, stored):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{run.root}/mlruns.db")
    experiment = mlflow.get_experiment_by_name("rollscope-demo")
    traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list", max_results=1000)
    by_id = {tr.info.tags["rollscope.trajectory_id"]: tr.info.tags for tr in traces}
    assert len(by_id) == len(stored)
    for t, _ in stored:
        tags = by_id[t.id]
        assert float(tags["training.advantage"]) == pytest.approx(t.training.advantage)
        assert tags["training.uid"] == t.training.uid and int(tags["training.policy_version"]) == t.step - 1


def test_insights_count_the_groups_training_learned_nothing_from(run):
    from rollscope.analysis.insights import insights

    store = TraceStore(run.trace_dir)
    [found] = insights(store)
    for signal in found.of("zero_advantage"):
        rewards: dict = {}
        for t in store.trajectories(step=signal.step, limit=None):
            rewards.setdefault(t.sample_index, set()).add(t.reward)
        flat = sum(1 for group in rewards.values() if len(group) == 1)
        assert (signal.count, signal.total) == (flat, PROMPTS)
    assert [s.count for s in found.of("logprob_mismatch")] == [0] * STEPS
