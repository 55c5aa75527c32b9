"""verl's own ``main_ppo`` (the v0 trainer: ``AgentLoopManager`` and verl's plain
``AgentLoopWorker`` as Ray actors), rollscope's tool loop and calculator named through verl's keys,
``trace.backend=local`` and nothing else: every trajectory of every step is stored, complete, with
the reward verl computed for it — the same numbers verl's own batch dump holds."""

from collections import Counter
from itertools import pairwise

import pytest
from transformers import AutoTokenizer

from rollscope.store import TraceStore
from rollscope.store.records import last_user_message
from tests.trainer.main_ppo import PROMPTS, ROLLOUTS, STEPS, question, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_model):
    return train(tmp_path_factory.mktemp("main_ppo_local"), demo_model, "trainer.use_v1=False")


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
    dumped = Counter((r["step"], question(r["input"]), r["output"], r["score"], r["correct"], r["used_calculator"])
                     for r in run.dump)  # fmt: skip
    traced = Counter()
    for t, [root] in stored:
        details = t.attributes["reward_details"]
        assert details["source"] == "verl_reward"
        response = tokenizer.decode(root.outputs["response_ids"], skip_special_tokens=True)
        traced[(t.step, question(last_user_message(root.inputs["raw_prompt"])), response, t.reward, details["correct"], details["used_calculator"])] += 1
    assert traced == dumped
