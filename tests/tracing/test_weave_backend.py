"""The weave backend with the real weave client given as an object (the backend then stays in this
process), recording into W&B's own Weave trace server (tests.engines), read back through the
client's queries."""

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing.backends.weave import call_id
from tests.engines import weave_calls, weave_feedback

pytestmark = pytest.mark.slow  # (W&B's Weave trace server starts for the module)


@pytest.fixture
def weave_client(weave_trace_server, request, monkeypatch):
    """A weave client of its own project for the test; any further ``weave.init`` is an error."""
    import weave

    project = f"ent/{request.node.name.replace('_', '-')[:60]}"
    client = weave.init(project)

    def no_second_init(*args, **kwargs):
        raise AssertionError("weave.init called although a client exists")

    monkeypatch.setattr(weave, "init", no_second_init)
    yield project, client


def rollout(i, reward):
    with tracing.rollout_trace_attr(step=3, sample_index=i, rollout_n=1, validate=False, name="tool_agent"):
        with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"raw_prompt": "q"}) as run:
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": [1, 2]}) as s:
                s.outputs = {"response_text": "<tool_call>...</tool_call>"}
            with tracing.trace_span("calculator", kind="tool", inputs={"expression": "1/0"}) as s:
                s.fail(ZeroDivisionError("division by zero"))
            run.outputs = {"answer": "x"}
        tracing.set_reward(reward)


def test_calls_nest_carry_verls_attributes_and_the_reward(weave_client, trace_dir, monkeypatch):
    project, client = weave_client
    tracing.init_tracing(
        backend="local,weave", project="proj", experiment="exp", trace_dir=str(trace_dir), weave_client=client
    )  # a client object: the backend stays in this process
    rollout(0, 1.0)
    rollout(1, 0.0)
    assert tracing.flush_tracing(30)
    client.flush()
    monkeypatch.undo()  # (weave.init again, to read)
    starts = ends = {c["id"]: c for c in weave_calls(project)}
    assert len(starts) == len(ends) == 2 * 4  # root + run + llm + tool, per trajectory
    roots = [s for s in starts.values() if s.get("parent_id") is None]
    assert len(roots) == 2
    for root in roots:
        assert root["attributes"]["step"] == 3 and root["attributes"]["rollout_n"] == 1
        assert root["attributes"]["experiment_name"] == "exp" and root["attributes"]["validate"] is False
        children = [s for s in starts.values() if s["trace_id"] == root["trace_id"] and s is not root]
        assert len(children) == 3 and all(
            c["attributes"]["sample_index"] == root["attributes"]["sample_index"] for c in children
        )
    first = roots[0]["trace_id"]
    [tool] = [s for s in starts.values() if s["trace_id"] == first and "/op/calculator:" in s["op_name"]]
    [run] = [s for s in starts.values() if s["trace_id"] == first and "/op/ToolAgentLoop.run:" in s["op_name"]]
    assert tool["parent_id"] == run["id"]
    assert "division by zero" in ends[tool["id"]]["exception"]
    rewards = sorted(ends[r["id"]]["output"]["reward"] for r in roots)
    assert rewards == [0.0, 1.0]
    # recorded times and stable ids: the root starts when the trajectory did
    from rollscope.store import TraceStore

    with TraceStore(trace_dir) as store:
        t = store.trajectories(sample_index=0)[0]
    assert call_id(t.id) in starts
    started = starts[call_id(t.id)]["started_at"]
    assert abs(started.timestamp() - t.start_ns / 1e9) < 1e-3


TRAINING = {
    "step": 3,
    "uid": "u-1",
    "advantage": 0.7,
    "group_size": 2,
    "group_mean": 0.5,
    "group_std": 0.71,
    "policy_version": 2,
    "lag": 0,
    "logprob_delta_max": 0.02,
    "old_log_probs": [-1.0, -2.0],
}


def test_a_training_record_arriving_later_is_feedback_on_the_root_call(weave_client, trace_dir, monkeypatch):
    """The trainer's process knows what training did with a trajectory only after the worker wrote
    it: a second tracer (the trainer's) attaches it to the root call the worker wrote, by its id."""
    project, client = weave_client
    tracing.init_tracing(
        backend="local,weave", project="proj", experiment="exp", trace_dir=str(trace_dir), weave_client=client
    )
    rollout(0, 1.0)
    assert tracing.flush_tracing(30)
    [trajectory] = TraceStore(trace_dir).trajectories()
    tracing.shutdown_tracing()
    tracing.init_tracing(backend="weave", project="proj", weave_client=client)  # the trainer's process
    tracing.get_tracer().training(trajectory.id, TRAINING)
    assert tracing.flush_tracing(30)
    client.flush()
    monkeypatch.undo()  # (weave.init again, to read)
    [root] = [c for c in weave_calls(project) if c["parent_id"] is None]
    [item] = weave_feedback(project)
    assert (
        item["weave_ref"]
        == f"weave:///{client.project_id}/call/{root['id']}"
        == f"weave:///{client.project_id}/call/{call_id(trajectory.id)}"
    )
    assert item["feedback_type"] == "rollscope.training"
    assert item["payload"] == {k: v for k, v in TRAINING.items() if k != "old_log_probs"}  # scalars only
