"""rollout_trace_attr / rollout_trace_op / trace_span semantics, recorded into the real local store."""

import asyncio

import pytest

from rollscope import tracing
from rollscope.tracing import SpanKind


class Agent:
    def __init__(self):
        self.calls = 0

    @tracing.rollout_trace_op(kind=SpanKind.LLM)
    async def generate(self, prompt_ids, sampling_params=None):
        self.calls += 1
        await asyncio.sleep(0)
        return {"token_ids": [len(prompt_ids), 7]}

    @tracing.rollout_trace_op(kind="tool")
    def calculator(self, expression: str):
        if expression == "boom":
            raise ZeroDivisionError("division by zero in boom")
        return str(eval(expression, {"__builtins__": {}}))  # test-only arithmetic on literals

    @tracing.rollout_trace_op
    async def run(self, question, turns=2):
        out = None
        for _ in range(turns):
            out = await self.generate([1, 2, 3], {"temperature": 1.0})
        self.calculator("1+2")
        return out


def test_trajectory_with_attributes_and_span_tree(local_tracer, read_store):
    agent = Agent()

    async def main():
        with tracing.rollout_trace_attr(step=4, sample_index=11, rollout_n=2, validate=True, name="my_agent"):
            await agent.run("q")

    asyncio.run(main())
    store = read_store()
    [t] = store.trajectories()
    assert (t.step, t.sample_index, t.rollout_n, t.validate) == (4, 11, 2, True)
    assert (t.project, t.experiment, t.agent_name, t.status) == ("proj", "exp", "my_agent", "ok")
    assert (t.num_spans, t.num_llm_calls, t.num_tool_calls, t.num_errors) == (4, 2, 1, 0)
    [run] = t.tree()
    assert run.name == "Agent.run" and run.parent_id == t.id
    assert [c.name for c in run.children] == ["Agent.generate", "Agent.generate", "Agent.calculator"]
    gen = run.children[0]
    assert gen.kind == "llm"
    assert gen.inputs == {"prompt_ids": [1, 2, 3], "sampling_params": {"temperature": 1.0}}
    assert gen.outputs == {"token_ids": [3, 7]}
    assert run.inputs == {"question": "q", "turns": 2}
    assert all(s.end_ns >= s.start_ns for s in t.spans)
    assert t.end_ns >= t.start_ns
    lines = {name: getattr(Agent, name).__wrapped__.__code__.co_firstlineno for name in ("run", "calculator")}
    for span in (run, run.children[2]):  # where each traced function is, as OpenTelemetry names it
        name = span.name.split(".")[1]
        assert span.attributes["code.file.path"] == __file__ and span.attributes["code.line.number"] == lines[name]
        assert span.attributes["code.function.name"] == f"Agent.{name}"


def test_exception_is_recorded_and_reraised(local_tracer, read_store):
    agent = Agent()
    with pytest.raises(ZeroDivisionError), tracing.rollout_trace_attr(step=1, sample_index=0):
        agent.calculator("boom")
    [t] = read_store().trajectories()
    assert t.status == "error" and t.error_type == "ZeroDivisionError"
    [span] = t.spans
    assert (span.status, span.error_type) == ("error", "ZeroDivisionError")
    assert "division by zero" in span.error_message
    assert t.num_errors == 1  # error spans: the tool span (the trajectory's own failure is its status)


def test_trace_false_disables_every_nested_op(local_tracer, read_store):
    agent = Agent()

    async def main():
        with tracing.rollout_trace_attr(step=1, sample_index=0, trace=False):
            await agent.run("not traced")
            with tracing.trace_span("inner") as s:
                s.outputs = "ignored"
        with tracing.rollout_trace_attr(step=1, sample_index=1):
            await agent.run("traced")

    asyncio.run(main())
    assert agent.calls == 4  # both ran
    [t] = read_store().trajectories()
    assert t.sample_index == 1


def test_concurrent_tasks_keep_their_own_trajectory(local_tracer, read_store):
    agent = Agent()

    async def one(i):
        with tracing.rollout_trace_attr(step=2, sample_index=i, rollout_n=i % 3):
            await agent.run(f"q{i}", turns=1 + i % 4)

    async def main():
        await asyncio.gather(*(one(i) for i in range(40)))

    asyncio.run(main())
    trajectories = read_store().trajectories(step=2)
    assert len(trajectories) == 40
    for t in trajectories:
        turns = 1 + t.sample_index % 4
        assert t.rollout_n == t.sample_index % 3
        assert t.num_llm_calls == turns
        [run] = t.tree()
        assert run.inputs["question"] == f"q{t.sample_index}"
        assert len(run.children) == turns + 1
        assert all(s.trajectory_id == t.id for s in t.spans)


def test_bare_call_opens_its_own_trajectory(local_tracer, read_store):
    asyncio.run(Agent().run("bare"))
    [t] = read_store().trajectories()
    assert t.agent_name == "Agent.run" and t.step is None
    assert t.num_spans == 4


def test_trace_span_and_reward(local_tracer, read_store):
    with tracing.rollout_trace_attr(step=0, sample_index=5) as traj:
        with tracing.trace_span("reward_fn", kind="reward", inputs={"answer": "42"}, source="gsm8k") as s:
            s.outputs = 1.0
        tracing.set_reward(1.0, acc=True)
    tracing.set_reward(0.5, trajectory_id=traj.id, rescored=True)  # after the trajectory ended
    [t] = read_store().trajectories()
    assert t.reward == 0.5
    assert t.attributes["reward_details"] == {"rescored": True}
    [s] = t.spans
    assert (s.kind, s.inputs, s.outputs, s.attributes) == ("reward", {"answer": "42"}, 1.0, {"source": "gsm8k"})


def test_a_rewards_details_survive_a_flush_before_its_trajectory_ends(local_tracer, read_store):
    """A flush between ``set_reward`` and the trajectory's end (a batch boundary, in a busy run)
    stores the reward while the trajectory runs; its end keeps it, details and all."""
    with tracing.rollout_trace_attr(step=0, sample_index=1):
        tracing.set_reward(0.5, correct=1.0)
        tracing.set_reward(None, correct=1.0, format_ok=True)  # details only: the reward given before stays
        [running] = read_store().trajectories()
        assert (running.status, running.reward) == ("running", 0.5)
        assert running.attributes["reward_details"] == {"correct": 1.0, "format_ok": True}
    [t] = read_store().trajectories()
    assert (t.status, t.reward, t.attributes["reward_details"]) == ("ok", 0.5, {"correct": 1.0, "format_ok": True})


def test_untraced_when_not_initialised():
    agent = Agent()
    assert tracing.get_tracer() is None
    assert asyncio.run(agent.run("x")) == {"token_ids": [3, 7]}
    with tracing.rollout_trace_attr(step=1) as t, tracing.trace_span("x") as s:
        s.outputs = 1
    assert t is None


def test_caller_mutation_after_the_call_does_not_change_the_trace(local_tracer, read_store):
    agent = Agent()
    prompt = [1, 2]

    async def main():
        with tracing.rollout_trace_attr(step=1, sample_index=0):
            await agent.generate(prompt)
            prompt.extend([3, 4, 5])  # ToolAgentLoop extends prompt_ids in place after each turn

    asyncio.run(main())
    [t] = read_store().trajectories()
    assert t.spans[0].inputs["prompt_ids"] == [1, 2]
