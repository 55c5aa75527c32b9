"""verl's own ``main_ppo`` with its own SGLang rollout (``rollout.name=sglang``: verl's
``SGLangReplica`` and ``SGLangHttpServer``, SGLang's engine on the CPU: ``make sglang``) and the
guide's trace keys, into the local store and W&B's own Weave trace server at once: every trajectory
stored, complete; the LLM spans' tokens and log-probs are the ones SGLang returned — the trainer's
own batch holds the same log-probs, and the actor's recomputation differs by float noise only,
because verl synced the actor's weights into SGLang at every step (``rollscope.trainer.cpu.sglang_weights``)."""

import os
import re
from collections import Counter

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollscope.store import TraceStore
from rollscope.tracing.backends.weave import call_id
from tests.engines import weave_calls
from tests.llm.engine_runs import hf_log_probs
from tests.trainer.main_ppo import PROMPTS, ROLLOUTS, STEPS, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory, vllm_model, weave_trace_server):
    env = {**os.environ, **weave_trace_server.environment()}
    return train(tmp_path_factory.mktemp("main_ppo_sglang"), vllm_model, "actor_rollout_ref.rollout.name=sglang",
                 "trainer.project_name=ent/proj", backend="local,weave", env=env)  # fmt: skip


@pytest.fixture(scope="module")
def stored(run):
    with TraceStore(run.trace_dir) as store:
        return [(t, t.tree(), t.training) for t in store.trajectories(limit=None)]


def llm_spans(tree):
    [root] = tree
    return [c for c in root.children if c.kind == "llm"]


def test_verls_sglang_server_made_every_trajectory_and_each_is_stored_complete(run, stored):
    assert "SGLangHttpServer" in run.log or "SGLangReplica" in run.log
    assert len(stored) == len(run.dump) == STEPS * PROMPTS * ROLLOUTS
    groups = Counter((t.step, t.sample_index) for t, _, _ in stored)
    assert sorted({step for step, _ in groups}) == list(range(1, STEPS + 1)) and set(groups.values()) == {ROLLOUTS}
    for t, tree, _ in stored:
        [root] = tree
        assert t.status == "ok" and root.name == "ToolAgentLoop.run" and llm_spans(tree)
        for span in llm_spans(tree):
            assert len(span.outputs["token_ids"]) == len(span.outputs["log_probs"]) > 0


def test_the_weight_version_of_each_turn_is_the_sync_before_its_step(stored):
    for t, tree, training in stored:
        versions = [s.outputs["extra_fields"]["global_steps"] for s in llm_spans(tree)]
        assert set(versions) == {t.step - 1} and training.policy_version == t.step - 1 and training.lag == 0


def test_the_trainer_holds_sglangs_log_probs_and_the_actor_recomputes_them(run, stored):
    """What verl's batch carries as the rollout's log-probs is what the spans hold (SGLang's, as
    returned); the actor on the synced weights gives the same within float noise, per token and in
    verl's own metric."""
    for _, tree, training in stored:
        values = training.values
        sampled = [lp for s in llm_spans(tree) for lp in s.outputs["log_probs"]]
        on_loss = [lp for lp, m in zip(values["rollout_log_probs"], values["response_mask"], strict=True) if m]
        assert on_loss == pytest.approx(sampled[: len(on_loss)], abs=1e-6)
        assert training.logprob_delta_max < 1e-4
    gaps = [float(g) for g in re.findall(r"training/rollout_probs_diff_max:([-\d.e]+)", run.log)]
    assert len(gaps) == STEPS and max(gaps) < 1e-4, gaps


def test_sglang_sampled_step_2_from_the_trained_weights_not_the_initial_ones(stored, vllm_model):
    """The sync moved weights: the initial model gives step 2's sampled tokens log-probs that differ
    from SGLang's by far more than the float noise the actor's recomputation shows above."""
    initial = AutoModelForCausalLM.from_pretrained(vllm_model, dtype=torch.float32).eval()
    gaps = []
    for t, tree, _ in stored:
        for span in llm_spans(tree):
            expected = hf_log_probs(initial, span.inputs["prompt_ids"], span.outputs["token_ids"], 1.0)
            gap = max(abs(a - b) for a, b in zip(span.outputs["log_probs"], expected, strict=True))
            gaps.append((t.step, gap))
    assert max(g for step, g in gaps if step == 1) < 1e-4
    assert max(g for step, g in gaps if step == 2) > 1e-3


def test_weave_holds_one_root_call_per_trajectory(run, stored):
    roots = {c["id"]: c for c in weave_calls("ent/proj") if c["parent_id"] is None}
    assert set(roots) == {call_id(t.id) for t, _, _ in stored}
    assert Counter((r["attributes"]["step"], r["attributes"]["sample_index"]) for r in roots.values()) == Counter(
        (t.step, t.sample_index) for t, _, _ in stored)
