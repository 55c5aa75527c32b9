"""The runner against ScriptedLLM (the test double for a model) with real verl loops, tools and store."""

import asyncio

import pytest

from examples.custom_agent.system_prompt_agent import SystemPromptAgent
from rollscope.llm import ScriptedLLM
from rollscope.llm.base import LLMServerError
from rollscope.runner import session
from rollscope.runner.config import load_config
from rollscope.runner.runner import Runner
from rollscope.store import TraceStore
from rollscope.testing import make_model_dir

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(make_model_dir(tmp_path_factory.mktemp("model")))


def run(config, llm, tokenizer):
    runner = Runner(config, llm=llm, tokenizer=tokenizer)
    runner.setup()
    asyncio.run(session.run_traced(runner))
    return runner


def test_runs_every_sample_n_times_with_verls_attributes(tmp_path, tokenizer):
    config = load_config("gsm8k-calculator", ["limit=3", "n=2", "step=5", "validate=true", f"trace_dir={tmp_path}"])
    runner = run(config, ScriptedLLM(tokenizer, [CALL, "The answer is 976."]), tokenizer)
    assert runner.stats.done == 6 and runner.stats.failed == 0 and runner.stats.all_stored
    assert runner.stats.tool_calls == 6
    assert sorted(o.reward for o in runner.outcomes) == [0, 0, 0, 0, 1, 1]  # only sample 0's answer is 976

    with TraceStore(tmp_path) as store:
        records = store.trajectories(limit=100)
        assert len(records) == 6
        assert {(r.sample_index, r.rollout_n) for r in records} == {(i, k) for i in range(3) for k in range(2)}
        assert {(r.step, r.validate, r.experiment, r.agent_name) for r in records} == {
            (5, True, "gsm8k-calculator", "rollscope_tool_agent")
        }
        best = store.get(next(r.id for r in records if r.sample_index == 0))
        assert best.reward == 1.0
        kinds = [s.kind for s in best.spans]
        assert kinds.count("llm") == 2 and kinds.count("tool") == 1 and "reward" in kinds
        reward_span = next(s for s in best.spans if s.name == "reward")
        assert reward_span.inputs["solution"].endswith("The answer is 976.")  # the model's own text only
        assert "<tool_response>" not in reward_span.inputs["solution"]


def test_users_agent_class_named_by_path(tmp_path, tokenizer):
    config = load_config("examples/custom_agent/config.yaml", ["limit=2", f"trace_dir={tmp_path}", "llm=scripted"])
    runner = run(config, ScriptedLLM(tokenizer, ["The answer is 976."]), tokenizer)
    assert runner.stats.done == 2
    with TraceStore(tmp_path) as store:
        traj = store.get(store.trajectories(limit=1)[0].id)
    assert traj.agent_name == "system_prompt_agent:SystemPromptAgent"
    run_span = next(s for s in traj.spans if s.kind == "agent")
    assert run_span.name == "SystemPromptAgent.run"
    llm_span = next(s for s in traj.spans if s.kind == "llm")
    assert SystemPromptAgent.system_prompt in str(llm_span.inputs)


def test_a_broken_trajectory_is_recorded_and_the_run_goes_on(tmp_path, tokenizer):
    config = load_config("gsm8k-calculator", ["limit=4", f"trace_dir={tmp_path}"])
    runner = Runner(config, llm=ScriptedLLM(tokenizer, ["The answer is 1."]), tokenizer=tokenizer)
    runner.setup()
    runner.rows[1]["agent_name"] = "tests.runner.agents:BrokenAgent"
    runner.rows[2]["agent_name"] = "rollscope_single_turn"
    asyncio.run(session.run_traced(runner))
    failed = [o for o in runner.outcomes if o.error]
    assert [(o.sample_index, o.error) for o in failed] == [(1, "RuntimeError: broken on sample 1")]
    with TraceStore(tmp_path) as store:
        assert store.count() == 4
        assert {r.sample_index: r.agent_name for r in store.trajectories(status="error")} == {
            1: "tests.runner.agents:BrokenAgent"
        }
        assert store.trajectories(sample_index=2)[0].agent_name == "rollscope_single_turn"


class DiesAfter(ScriptedLLM):
    """Test double: a model server that answers ``n`` requests, then is gone."""

    def __init__(self, tokenizer, replies, n):
        super().__init__(tokenizer, replies)
        self.left = n

    async def generate(self, request_id, **kwargs):
        self.left -= 1
        if self.left < 0:
            raise LLMServerError("http://127.0.0.1:9/v1/completions: cannot reach the server")
        return await super().generate(request_id, **kwargs)


def test_a_dead_llm_stops_the_run_and_keeps_what_was_traced(tmp_path, tokenizer):
    config = load_config("gsm8k-calculator", ["limit=8", "concurrency=1", f"trace_dir={tmp_path}"])
    runner = Runner(config, llm=DiesAfter(tokenizer, ["The answer is 1."], n=3), tokenizer=tokenizer)
    runner.setup()
    with pytest.raises(LLMServerError, match="cannot reach"):
        asyncio.run(session.run_traced(runner))
    assert runner.stats.done == 3
    with TraceStore(tmp_path) as store:
        assert store.count(status="ok") == 3
        # the trajectory that met the dead server; at most one had started behind it: cancelled, not an error
        assert store.count(status="error") == 1 and store.count(status="cancelled") <= 1
        assert store.count() == store.count(status="ok") + store.count(status="error") + store.count(status="cancelled")


@pytest.mark.parametrize("constrained", [True, False])
def test_constrained_tool_calls_reach_the_llm_as_the_turns_tool_schemas_and_show_on_the_span(
    tmp_path, tokenizer, constrained
):
    """``constrain_tool_calls`` (on in the bundled calculator example) puts the turn's tool schemas
    in the LLM's sampling parameters (each client turns them into its engine's constraint), and
    the llm span says the reply was constrained."""
    config = load_config(
        "gsm8k-calculator",
        ["limit=1", f"trace_dir={tmp_path}", f"sampling.constrain_tool_calls={str(constrained).lower()}"],
    )
    seen = []

    class Recording(ScriptedLLM):  # the test double records what it was asked with
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            seen.append(dict(sampling_params))
            return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)

    run(config, Recording(tokenizer, [CALL, "The answer is 976."]), tokenizer)
    assert len(seen) == 2 and all("constrain_tool_calls" not in p for p in seen)
    with TraceStore(tmp_path) as store:
        record = store.get(store.trajectories()[0].id)
    llm_spans = [s for s in record.spans if s.kind == "llm"]
    if constrained:
        names = [[t["function"]["name"] for t in p["constrained_tool_schemas"]] for p in seen]
        assert names == [["calculator", "submit_answer"]] * 2, names
        assert all(s.attributes.get("rollscope.constrained") == "tool_schemas" for s in llm_spans)
    else:
        assert all("constrained_tool_schemas" not in p for p in seen)
        assert all("rollscope.constrained" not in s.attributes for s in llm_spans)


def test_verls_tools_and_function_tools_run_and_count_under_rollscope_run(tmp_path, tokenizer):
    """A config that brings verl's tool YAML (verl's Gsm8kTool) and verl's ``function_tool_path``,
    as a user keeps them: both are read, every call is a tool span, the run's tool-call count is the
    calls made."""
    from pathlib import Path

    tools = Path(__file__).resolve().parent.parent / "fixtures" / "verl_tools"
    config_file = tmp_path / "run.yaml"
    config_file.write_text(
        f"dataset: {Path(__file__).resolve().parents[2] / 'rollscope/bundled/data/arithmetic.jsonl'}\n"
        f"tools: {tools / 'gsm8k_tool_config.yaml'}\n"
        f"multi_turn: {{format: hermes, function_tool_path: {tools / 'function_tools.py'}}}\n"
    )
    config = load_config(str(config_file), ["limit=2", f"trace_dir={tmp_path / 'traces'}"])
    calls = [
        '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "976"}}</tool_call>',
        '<tool_call>{"name": "word_count", "arguments": {"text": "sixty one boxes"}}</tool_call>',
        "The answer is 976.",
    ]
    runner = run(config, ScriptedLLM(tokenizer, calls), tokenizer)
    assert runner.stats.done == 2 and runner.stats.tool_calls == 4
    with TraceStore(tmp_path / "traces") as store:
        records = [store.get(t.id) for t in store.trajectories()]
    for record in records:
        assert record.num_tool_calls == 2
        assert [s.attributes["tool.name"] for s in record.spans if s.kind == "tool"] == [
            "calc_gsm8k_reward",
            "word_count",
        ]


def test_rates_are_over_the_rollouts_the_same_live_and_in_the_summary():
    """The progress line and the summary divide by one span of time: the first trajectory's start
    to the last one's end, never the tracing shutdown after it (a summary once said 28.7 tok/s
    where the progress line had said 1502.8 for the same run)."""
    import re as re_module
    import time as time_module

    from rich.console import Console

    from rollscope.runner.progress import _figures, summary
    from rollscope.runner.runner import Outcome, RunStats

    stats = RunStats(total=2)
    for i in range(2):
        stats.add(Outcome(sample_index=i, rollout_n=0, response_tokens=300))
    live = _figures(stats)
    time_module.sleep(0.05)  # (the tracing shutdown: whatever it takes, no rate moves)
    console = Console(record=True, width=200)
    console.print(summary(stats, name="r", trace_dir="t", experiment="e", backend="local"))
    live_rate = float(re_module.search(r"([\d.]+) tok/s", live).group(1))
    summary_rate = float(re_module.search(r"600 \(([\d.]+)/s\)", console.export_text()).group(1))
    assert live_rate == pytest.approx(summary_rate, rel=0.01)


class StallingBackend:
    """A backend that takes each trajectory far longer than the run waits (a test double)."""

    name = "stalling"

    def __init__(self, **_):
        pass

    def on_trajectory_start(self, trajectory):
        pass

    def on_span_end(self, span):
        pass

    def on_trajectory_end(self, trajectory):
        import time as time_module

        time_module.sleep(3)

    def flush(self, timeout=None):
        return True

    def close(self, timeout=None):
        return True


def test_the_summary_says_when_not_everything_was_stored_as_the_run_ended(tmp_path, tokenizer, monkeypatch):
    from rich.console import Console

    from rollscope.runner.progress import summary
    from rollscope.tracing.backends import TraceBackend, register_backend

    register_backend("stalling", type("Stalling", (StallingBackend, TraceBackend), {}))
    monkeypatch.setattr(session, "SHUTDOWN_S", 0.5)
    config = load_config("gsm8k-calculator", ["limit=2", f"trace_dir={tmp_path}", "backend=local,stalling"])
    runner = run(config, ScriptedLLM(tokenizer, [CALL, "The answer is 976."]), tokenizer)
    assert runner.stats.done == 2 and not runner.stats.all_stored
    console = Console(record=True, width=400)
    console.print(summary(runner.stats, name="r", trace_dir=str(tmp_path), experiment="e", backend="local,stalling"))
    assert "NOT ALL STORED YET" in console.export_text()


def test_the_summary_gives_a_rate_only_where_the_clock_can():
    """A run over in milliseconds (the scripted model) shows its time, not "0.0 s" at thousands of
    trajectories a minute."""
    from rollscope.runner.progress import rollout_time

    assert rollout_time(0.011, 2) == "11 ms (too short for a rate)"
    assert rollout_time(30.0, 5) == "30.0 s (10.0 trajectories/min)"
