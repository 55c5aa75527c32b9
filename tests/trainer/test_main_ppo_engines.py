"""verl's own ``main_ppo`` with verl's own rollout on each engine users run, on the CPU: vLLM
(``rollout.name=vllm``: verl's ``vLLMReplica``, its HTTP server and engine, on vLLM's CPU build) and
SGLang (``rollout.name=sglang``: verl's ``SGLangReplica`` and ``SGLangHttpServer``, SGLang's engine;
``make sglang``), each with the guide's trace keys into the local store and W&B's own Weave trace
server at once: every trajectory stored, complete; the LLM spans' tokens and log-probs are the ones
the engine returned — the trainer's own batch holds the same log-probs, and the actor's
recomputation differs by float noise only, because verl synced the actor's weights into the engine
at every step (rollscope.cpu's ``vllm_weights`` and ``sglang_weights``): step 2 was sampled
from the trained weights, not the initial ones. One trainer run per engine."""

import os
import re
from collections import Counter

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollscope.store import TraceStore
from rollscope.tracing.backends.weave import call_id
from tests.engines import weave_calls, weave_feedback
from tests.llm.engine_runs import hf_entropies, hf_log_probs
from tests.trainer.main_ppo import PROMPTS, ROLLOUTS, STEPS, train

pytestmark = pytest.mark.slow
SERVERS = {"vllm": ("vLLMHttpServer", "vLLMReplica"), "sglang": ("SGLangHttpServer", "SGLangReplica")}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def run(request, tmp_path_factory, engine_model, weave_trace_server):
    """(the engine, verl's run on it); each engine's run in a Weave project of its own."""
    engine = request.param
    env = {**os.environ, **weave_trace_server.environment()}
    return engine, train(
        tmp_path_factory.mktemp(f"main_ppo_{engine}"),
        engine_model,
        f"actor_rollout_ref.rollout.name={engine}",
        f"trainer.project_name=ent/{engine}",
        backend="local,weave",
        env=env,
    )


@pytest.fixture(scope="module")
def stored(run):
    with TraceStore(run[1].trace_dir) as store:
        return [(t, t.tree(), t.training) for t in store.trajectories(limit=None)]


def llm_spans(tree):
    [root] = tree
    return [c for c in root.children if c.kind == "llm"]


def test_verls_engine_server_made_every_trajectory_and_each_is_stored_complete(run, stored):
    engine, run = run
    assert any(name in run.log for name in SERVERS[engine])
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


def test_the_trainer_holds_the_engines_log_probs_and_the_actor_recomputes_them(run, stored):
    """What verl's batch carries as the rollout's log-probs is what the spans hold (the engine's, as
    returned); the actor on the synced weights gives the same within float noise, per token and in
    verl's own metric."""
    for _, tree, training in stored:
        values = training.values
        sampled = [lp for s in llm_spans(tree) for lp in s.outputs["log_probs"]]
        on_loss = [lp for lp, m in zip(values["rollout_log_probs"], values["response_mask"], strict=True) if m]
        assert on_loss == pytest.approx(sampled[: len(on_loss)], abs=1e-6)
        assert training.logprob_delta_max < 1e-4
    gaps = [float(g) for g in re.findall(r"training/rollout_probs_diff_max:([-\d.e]+)", run[1].log)]
    assert len(gaps) == STEPS and max(gaps) < 1e-4, gaps


def test_each_loss_token_carries_the_actors_entropy_as_the_initial_model_gives_it(run, stored, engine_model):
    """verl's v1 trainer keeps its old-log-prob pass's per-token entropies beside the batch; the
    record holds them for every response token. At step 1 the actor has the initial weights, so
    the initial model, run here, gives each loss token the same entropy within float noise; the
    mean over loss tokens reaches Weave with the training record's scalars."""
    initial = AutoModelForCausalLM.from_pretrained(engine_model, dtype=torch.float32).eval()
    checked = 0
    for t, tree, training in stored:
        values = training.values
        assert len(values["entropy"]) == len(values["response_mask"]) and values["entropy_mean"] > 0
        if t.step != 1:
            continue
        expected = [
            e for s in llm_spans(tree) for e in hf_entropies(initial, t.prompts.ids(s), s.outputs["token_ids"], 1.0)
        ]
        on_loss = [e for e, m in zip(values["entropy"], values["response_mask"], strict=True) if m]
        assert on_loss == pytest.approx(expected[: len(on_loss)], abs=1e-4)
        checked += 1
    assert checked == PROMPTS * ROLLOUTS
    engine = run[0]
    payloads = {f["weave_ref"].rsplit("/", 1)[1]: f["payload"] for f in weave_feedback(f"ent/{engine}")}
    means = sorted(round(p["entropy_mean"], 5) for p in payloads.values())
    assert means == sorted(round(training.values["entropy_mean"], 5) for _, _, training in stored)


def test_step_2_was_sampled_from_the_trained_weights_not_the_initial_ones(stored, engine_model):
    """The sync moved weights: the initial model gives step 1's sampled tokens the engine's
    log-probs within float noise, and step 2's log-probs well outside that noise. How far outside
    depends on what step 1 learned: a step where every group's rollouts scored alike has no GRPO
    advantage, and AdamW's weight decay alone moves the weights (~1e-4 in log-prob, against ~1e-6
    of noise), so the test compares with step 1's own noise, not with a fixed distance."""
    initial = AutoModelForCausalLM.from_pretrained(engine_model, dtype=torch.float32).eval()
    gaps = {1: 0.0, 2: 0.0}
    for t, tree, _ in stored:
        for span in llm_spans(tree):
            expected = hf_log_probs(initial, t.prompts.ids(span), span.outputs["token_ids"], 1.0)
            gap = max(abs(a - b) for a, b in zip(span.outputs["log_probs"], expected, strict=True))
            gaps[t.step] = max(gaps[t.step], gap)
    assert gaps[1] < 1e-4 and gaps[2] > 10 * max(gaps[1], 1e-6), gaps


def test_weave_holds_one_root_call_per_trajectory(run, stored):
    """Every trajectory reaches Weave, though the engine keeps both cores busy and Ray ends the
    rollout workers as soon as training is done: their trace sidecars go on until they have sent
    what they hold, and ``run_main_ppo`` returns once they have (``ROLLSCOPE_SIDECAR_LOCK``)."""
    # (by id: a batch sent twice lands on the same calls, which the server may list twice until
    # ClickHouse merges them)
    roots = {c["id"]: c for c in weave_calls(f"ent/{run[0]}") if c["parent_id"] is None}
    assert set(roots) == {call_id(t.id) for t, _, _ in stored}
    assert Counter((r["attributes"]["step"], r["attributes"]["sample_index"]) for r in roots.values()) == Counter(
        (t.step, t.sample_index) for t, _, _ in stored
    )
