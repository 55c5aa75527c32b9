"""The weave backend end to end: the real `weave.init` and the client's HTTP batching, against a
local stand-in of W&B's endpoints on 127.0.0.1 (server_info, GraphQL, objects, files, calls)."""

import pytest

from rollscope import tracing

pytestmark = pytest.mark.slow


def test_real_weave_init_and_http_batches(wandb, trace_dir):
    tracing.init_tracing(backend="local,weave", project="proj", experiment="exp", trace_dir=str(trace_dir),
                         weave_project="ent/proj")  # fmt: skip
    for i in range(3):
        with tracing.rollout_trace_attr(step=4, sample_index=i, rollout_n=0, name="tool_agent"):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": [1, 2]}) as s:
                s.outputs = {"response_text": f"answer {i}"}
            tracing.set_reward(float(i))
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    assert ("GET", "/traces/server_info") in wandb.paths and ("POST", "/graphql") in wandb.paths
    calls = {c["id"]: c for c in wandb.calls}  # complete calls (start and end together), batched over HTTP
    roots = [c for c in calls.values() if c["parent_id"] is None]
    children = [c for c in calls.values() if c["parent_id"] is not None]
    assert len(roots) == 3 and len(children) == 3 and all(c["project_id"] == "ent/proj" for c in calls.values())
    assert all(c["attributes"]["step"] == 4 and c["attributes"]["experiment_name"] == "exp" for c in roots)
    assert sorted(c["output"]["reward"] for c in roots) == [0.0, 1.0, 2.0]
    assert {calls[c["parent_id"]]["trace_id"] == c["trace_id"] for c in children} == {True}
    assert sorted(c["output"]["response_text"] for c in children) == ["answer 0", "answer 1", "answer 2"]


def test_a_burst_far_beyond_the_queue_reaches_weave_whole(wandb, trace_dir):
    """A step's rollouts ending together, against a queue of 50 events: the rest waits in the
    spool on disk and Weave receives every call, once."""
    tracing.init_tracing(backend="local,weave", project="proj", trace_dir=str(trace_dir), weave_project="ent/proj",
                         max_queue=50)  # fmt: skip
    for i in range(400):
        with tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0, name="tool_agent"):
            for turn in range(2):
                with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": list(range(200))}) as s:
                    s.outputs = {"response_text": f"answer {i}.{turn}"}
            tracing.set_reward(1.0)
    assert tracing.flush_tracing(300)
    stats = tracing.stats()["backends"]["weave"]
    tracing.shutdown_tracing(60)
    ids = [c["id"] for c in wandb.calls]
    assert len(ids) == len(set(ids)) == 400 * 3
    assert stats["dropped"] == 0 and stats["lossless"] is True and stats["spooled"] == 0
