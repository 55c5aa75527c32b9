"""verl's own ``main_ppo`` with its default trainer (v1: ``AgentLoopManagerTQ`` and
``AgentLoopWorkerTQ`` over the TransferQueue) and the Weave guide's one key,
``trace.backend=weave``, into W&B's own Weave trace server (tests.engines): exactly one root call per trajectory,
each a complete tree, with the reward verl computed on it, and, as feedback on it, what the trainer
did with it. The rollout server computes in bfloat16 (verl's default ``rollout.dtype``) while the
trainer computes in float32: the log-prob gap of a GPU run, which the record shows."""

import os
from collections import Counter

import pytest
import torch

from rollscope.trajectory.records import last_user_message
from tests.engines import weave_calls, weave_feedback
from tests.trainer.main_ppo import PROMPTS, ROLLOUTS, STEPS, question, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_model, weave_trace_server):
    """With verl's wandb logger too (an offline run: W&B's own files, no server), as the guide
    sets it up; the project's entity is the (test) server's default, ``ent``."""
    root = tmp_path_factory.mktemp("main_ppo_weave")
    env = {
        **os.environ,
        **weave_trace_server.environment(),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(root),
        "WANDB_SILENT": "true",
    }
    return train(
        root,
        demo_model,
        "trainer.use_v1=True",
        "trainer.project_name=proj",
        "trainer.logger=['console','wandb']",
        "actor_rollout_ref.rollout.dtype=bfloat16",
        backend="weave",
        env=env,
    )


@pytest.fixture(scope="module")
def roots(run):
    calls = {c["id"]: c for c in weave_calls("ent/proj")}
    return calls, [c for c in calls.values() if c["parent_id"] is None]


def test_one_root_call_per_trajectory_of_every_step(run, roots):
    assert "AgentLoopWorkerTQ" in run.log  # verl's default trainer drove the rollouts
    _, found = roots
    assert len(found) == len(run.dump) == STEPS * PROMPTS * ROLLOUTS
    groups = Counter((r["attributes"]["step"], r["attributes"]["sample_index"]) for r in found)
    assert sorted({step for step, _ in groups}) == list(range(1, STEPS + 1)) and set(groups.values()) == {ROLLOUTS}
    for root in found:
        assert root["project_id"] == "ent/proj"
        assert (root["attributes"]["experiment_name"], root["attributes"]["validate"]) == ("demo-train", False)


def test_every_call_links_the_trainers_wandb_run_at_its_trajectorys_step(run, roots):
    """verl's trainer started the W&B run after its rollout workers existed; every Weave call of
    every trajectory carries that run and the trajectory's step (verl's global step, at which the
    trainer logged that step's metrics)."""
    [offline] = list((run.root / "wandb").glob("offline-run-*/run-*.wandb"))
    run_id = offline.stem.removeprefix("run-")
    calls, found = roots
    assert all(c["wb_run_id"] == f"ent/proj/{run_id}" for c in calls.values())
    for root in found:
        assert {c["wb_run_step"] for c in calls.values() if c["trace_id"] == root["id"]} == {root["attributes"]["step"]}


def test_each_root_holds_the_complete_trajectory(roots):
    calls, found = roots
    for root in found:
        tree = [c for c in calls.values() if c["trace_id"] == root["id"] and c is not root]
        [run] = [c for c in tree if c["parent_id"] == root["id"]]
        assert run["display_name"] == "ToolAgentLoop.run"
        children = sorted((c for c in tree if c["parent_id"] == run["id"]), key=lambda c: c["started_at"])
        names = [c["display_name"] for c in children]
        assert names[0] == "llm.generate" and names.count("llm.generate") >= 1
        assert all(c["ended_at"] for c in [root, *tree]) and root["exception"] is None and run["exception"] is None
        # an error only where the model's call failed (a calculator call with a bad expression)
        assert all(c["exception"] is None for c in tree if c["display_name"] == "llm.generate")


def test_each_root_carries_verls_reward(run, roots):
    """Per step and prompt, the rewards on the root calls are the scores verl's batch holds."""
    calls, found = roots
    dumped = Counter((r["step"], question(r["input"]), r["score"]) for r in run.dump)
    traced = Counter()
    for root in found:
        [run_call] = [c for c in calls.values() if c["parent_id"] == root["id"]]
        prompt = last_user_message(run_call["inputs"]["raw_prompt"])
        traced[(root["attributes"]["step"], question(prompt), root["output"]["reward"])] += 1
        details = root["output"]["reward_details"]  # the components verl's reward function returned
        assert details["source"] == "verl_reward" and details["correct"] == root["output"]["reward"]
        assert details["used_calculator"] in (0.0, 1.0)
    assert traced == dumped


def test_each_root_has_the_training_record_as_feedback(run, roots):
    """One ``rollscope.training`` feedback per root call; its group and score are the uid and score
    verl's own dump holds (its key is {uid}_{session}_{output}), its advantage verl's GRPO formula
    of its group's scores."""
    _, found = roots
    feedback = {f["weave_ref"].rsplit("/", 1)[1]: f for f in weave_feedback("ent/proj")}
    assert set(feedback) == {root["id"] for root in found}
    payloads = [feedback[root["id"]]["payload"] for root in found]
    assert all(feedback[root["id"]]["feedback_type"] == "rollscope.training" for root in found)
    dumped = Counter((r["step"], r["uid"].rsplit("_", 2)[0], r["score"]) for r in run.dump)
    assert Counter((p["step"], p["uid"], p["score"]) for p in payloads) == dumped
    by_uid: dict[str, list] = {}
    for p in payloads:
        by_uid.setdefault(p["uid"], []).append(p)
    for group in by_uid.values():
        scores = torch.tensor([p["score"] for p in group])
        for p in group:
            assert p["group_size"] == ROLLOUTS == len(group)
            assert p["advantage"] == pytest.approx(
                float((p["score"] - scores.mean()) / (scores.std() + 1e-6)), abs=1e-5
            )
            assert p["policy_version"] == p["step"] - 1 and p["lag"] == 0
            assert p["entropy_mean"] > 0  # the v1 trainer's per-token entropies, averaged over the loss tokens


def test_a_bfloat16_rollout_server_shows_as_a_log_prob_gap_on_loss_tokens(run):
    payloads = [f["payload"] for f in weave_feedback("ent/proj")]
    assert payloads and all(p["logprob_delta_max"] > 1e-4 for p in payloads)  # float32 vs bfloat16 numerics
    for p in payloads:  # tool responses (rollout log-prob 0) are kept apart, never counted
        if p["masked_tokens"]:
            assert p["masked_delta_max"] > p["logprob_delta_max"]
