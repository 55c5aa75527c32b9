"""The weave backend under load, end to end: the real `weave.init` and the client's HTTP batching
into W&B's own Weave trace server (tests.engines), read back through the client's queries."""

import pytest

from rollscope import tracing

pytestmark = pytest.mark.slow


def test_a_burst_far_beyond_the_queue_reaches_weave_whole(weave_trace_server, trace_dir):
    """A step's rollouts ending together, against a queue of 50 events: the rest waits in the
    spool on disk and Weave stores every call."""
    import weave

    tracing.init_tracing(
        backend="local,weave", project="proj", trace_dir=str(trace_dir), weave_project="ent/burst", max_queue=50
    )
    for i in range(400):
        with tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0, name="tool_agent"):
            for turn in range(2):
                with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": list(range(200))}) as s:
                    s.outputs = {"response_text": f"answer {i}.{turn}"}
            tracing.set_reward(1.0)
    assert tracing.flush_tracing(300)
    stats = tracing.stats()["backends"]["weave"]
    tracing.shutdown_tracing(60)
    calls = list(weave.init("ent/burst").get_calls(columns=["id", "parent_id", "output"]))
    assert len(calls) == len({c.id for c in calls}) == 400 * 3
    roots = [c for c in calls if c.parent_id is None]
    assert len(roots) == 400 and {c.output["reward"] for c in roots} == {1.0}
    assert stats["dropped"] == 0 and stats["lossless"] is True and stats["spooled"] == 0
