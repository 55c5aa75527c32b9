"""Proof that it works inside verl: verl's real AgentLoopWorker (the plain one), a
config composed from verl's own YAML, the loop from agent_loop_config_path, tools from
tool_config_path, a GRPO batch with n=2; only the LLM servers are a test double (ScriptedLLM)."""

import asyncio

import numpy as np
import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.utils.rollout_trace import RolloutTraceConfig

from rollscope import tracing
from rollscope.bundled import path as config_path
from rollscope.llm import ScriptedLLM
from rollscope.store import TraceStore
from tests.agentloops.conftest import call
from tests.agentloops.verl_harness import assert_users_tools_traced, loop_config, users_tools_config, verl_tools_reply

QUESTIONS = ["What is 17 * 23?", "What is 12 * 12?", "What is 9 * 9?"]
ANSWERS = ["391", "144", "81"]


@pytest.fixture
def worker_config(model_dir, tmp_path):
    yield loop_config(
        model_dir,
        tmp_path,
        "gsm8k_agent",
        "tests.agentloops.user_loops.GSM8KAgent",
        [
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={config_path('gsm8k_tools.yaml')}",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            "actor_rollout_ref.rollout.trace.backend=local",
            "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=2",
            f"+rollscope.trace.trace_dir={tmp_path / 'traces'}",
            "+rollscope.trace.sample_seed=3",
        ],
    )
    RolloutTraceConfig.reset()


def scripted_llm(tokenizer):
    def reply(turn, prompt_ids):
        text = tokenizer.decode(prompt_ids)
        k = next(i for i, q in enumerate(QUESTIONS) if q in text)
        a, b = QUESTIONS[k].removeprefix("What is ").removesuffix("?").split(" * ")
        return [
            call("calculator", expression=f"{a} * {b}"),
            call("submit_answer", answer=ANSWERS[k]),
            f"The answer is {ANSWERS[k]}.",
        ][min(turn, 2)]

    return ScriptedLLM(tokenizer, reply)


def grpo_batch(n, step):
    rows = [i for i in range(len(QUESTIONS)) for _ in range(n)]  # verl repeats each prompt n times, interleaved
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": QUESTIONS[i]}] for i in rows], dtype=object),
            "index": np.array(rows),
            "agent_name": np.array(["gsm8k_agent"] * len(rows), dtype=object),
            "data_source": np.array(["gsm8k"] * len(rows), dtype=object),
            "reward_model": np.array([{"ground_truth": ANSWERS[i]} for i in rows], dtype=object),
            "extra_info": np.array([{"index": i} for i in rows], dtype=object),
            "tools_kwargs": np.array(
                [{"submit_answer": {"create_kwargs": {"ground_truth": ANSWERS[i]}}} for i in rows], dtype=object
            ),
        },
        meta_info={"global_steps": step, "validate": False},
    )


@pytest.mark.slow
def test_generate_sequences_in_verls_worker(worker_config, tokenizer, tmp_path):
    async def main():
        worker = AgentLoopWorker(worker_config, scripted_llm(tokenizer))
        return await worker.generate_sequences(grpo_batch(n=2, step=7))

    out = asyncio.run(main())
    assert out.batch["responses"].shape[0] == 6
    assert int(out.batch["response_mask"].sum()) > 0
    tracing.flush_tracing()
    store = TraceStore(tmp_path / "traces")
    trajectories = store.trajectories()
    chosen = tracing.select_samples(range(3), step=7, k=2, seed=3)
    # max_samples_per_step_per_worker=2: two whole GRPO groups, chosen deterministically
    assert {t.sample_index for t in trajectories} == chosen
    assert sorted((t.sample_index, t.rollout_n) for t in trajectories) == sorted((s, r) for s in chosen for r in (0, 1))
    for t in trajectories:
        assert (t.step, t.validate, t.experiment, t.project) == (7, False, "cpu", "rollscope_tests")
        assert t.status == "ok" and t.reward == 1.0
        assert t.attributes["opened_by"] == "verl" and t.agent_name == "gsm8k_agent"
        assert (t.num_llm_calls, t.num_tool_calls, t.num_errors) == (3, 2, 0)
        [run] = t.tree()
        assert run.name == "GSM8KAgent.run"
        assert [c.kind for c in run.children if c.kind in ("llm", "tool")] == ["llm", "tool", "llm", "tool", "llm"]
        lifecycle = [c.name for c in run.children if c.kind not in ("llm", "tool")]
        assert lifecycle == ["AnswerCheckerTool.create", "AnswerCheckerTool.release"]
        assert [c.attributes.get("tool.name") for c in run.children if c.kind == "tool"] == [
            "calculator",
            "submit_answer",
        ]
    group = store.group(step=7, sample_index=min(chosen))
    assert [t.rollout_n for t in group] == [0, 1]
    tracing.shutdown_tracing()


def score_with(worker_config, tokenizer, reward_actor_class, step):
    """One batch through verl's plain worker whose reward loop is ``reward_actor_class``, a real
    Ray actor standing where verl's RewardLoopWorker runs; rollscope's tool loop by default."""
    import ray

    worker_config.actor_rollout_ref.rollout.agent.default_agent_loop = "rollscope_tool_agent"
    worker_config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(config_path("agent_loops.yaml"))
    worker_config.actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker = None
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:

        async def main():
            reward = ray.remote(num_cpus=0)(reward_actor_class).remote()
            worker = AgentLoopWorker(worker_config, scripted_llm(tokenizer), None, [reward])
            batch = grpo_batch(n=1, step=step)
            batch.non_tensor_batch.pop("agent_name")  # default_agent_loop applies
            return await worker.generate_sequences(batch)

        return asyncio.run(main())
    finally:
        ray.shutdown()


class LengthReward:
    def compute_score(self, data):
        return {
            "reward_score": float(data.batch["responses"].shape[-1]) / 1000,
            "reward_extra_info": {"scorer": "length"},
        }


class BrokenReward:
    def compute_score(self, data):
        raise RuntimeError("reward server unreachable")


@pytest.mark.slow
def test_reward_computed_by_verl_after_run_lands_on_the_trajectory(worker_config, tokenizer, tmp_path):
    """verl scores after run returns (a reward-loop Ray actor), in the same task: the trajectory
    stays open for it and ends with verl's reward and its components."""
    out = score_with(worker_config, tokenizer, LengthReward, step=2)
    tracing.flush_tracing()
    trajectories = TraceStore(tmp_path / "traces").trajectories()
    assert len(trajectories) == 3
    for t in trajectories:
        assert t.agent_name == "rollscope_tool_agent"  # verl's registry name
        assert t.reward is not None and t.reward > 0
        assert t.attributes["reward_details"]["source"] == "verl_reward"
        assert t.attributes["reward_details"]["scorer"] == "length"
    assert len(out) == 3
    tracing.shutdown_tracing()


@pytest.mark.slow
def test_a_reward_that_fails_after_run_ends_each_trajectory_with_the_error(worker_config, tokenizer, tmp_path):
    """The trajectory held open for verl's reward still ends when verl's reward loop raises: with
    the error (or, for the tasks torn down with the failed batch, the cancellation), its run and
    turns intact, nothing left open."""
    with pytest.raises(Exception, match="reward server unreachable"):
        score_with(worker_config, tokenizer, BrokenReward, step=4)
    assert tracing.flush_tracing()
    trajectories = TraceStore(tmp_path / "traces").trajectories()
    assert len(trajectories) == 3
    assert any("reward server unreachable" in t.error_message for t in trajectories)
    for t in trajectories:
        assert t.end_ns is not None and t.reward is None
        assert (t.status, "reward server unreachable" in t.error_message) == ("error", True) or (
            t.status,
            "cancelled before verl scored it" in t.error_message,
        ) == ("cancelled", True), t
        [run] = t.tree()
        assert run.status == "ok" and t.num_llm_calls == 3  # the rollout itself was whole
    tracing.shutdown_tracing()


@pytest.mark.slow
def test_verls_own_tools_and_loop_under_verls_plain_worker_with_only_trace_keys(
    model_dir, tokenizer, tmp_path, monkeypatch
):
    """What users bring, under verl's plain worker set only by verl's keys: verl's ToolAgentLoop
    ported to TracedAgentLoop, verl's Gsm8kTool from verl's own tool YAML, verl 0.9.1 function tools
    from ``function_tool_path``. Every call is a tool span, the counts equal the calls, and the
    tools' other methods are spans of their own."""
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(tmp_path / "traces"))  # (the store's place: not a verl key)
    config = users_tools_config(model_dir, tmp_path, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4")
    batch = grpo_batch(n=1, step=3)
    batch.non_tensor_batch["agent_name"] = np.array(["ported_tool_agent"] * 3, dtype=object)
    batch.non_tensor_batch["tools_kwargs"] = np.array(
        [{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": a}}} for a in ANSWERS], dtype=object
    )

    async def main():
        worker = AgentLoopWorker(config, ScriptedLLM(tokenizer, verl_tools_reply(tokenizer)))
        return await worker.generate_sequences(batch)

    try:
        asyncio.run(main())
        assert tracing.flush_tracing(60)
        trajectories = [
            TraceStore(tmp_path / "traces").get(t.id) for t in TraceStore(tmp_path / "traces").trajectories()
        ]
    finally:
        tracing.shutdown_tracing()
        RolloutTraceConfig.reset()
    assert len(trajectories) == 3
    for t in trajectories:
        assert t.agent_name == "ported_tool_agent" and t.attributes["opened_by"] == "verl"
        tools = assert_users_tools_traced(t)
        assert tools[1].outputs["text"] == str(len(QUESTIONS[t.sample_index].split()))
        assert [c.name for c in tools[0].children] == ["Gsm8kTool.calc_reward"]
