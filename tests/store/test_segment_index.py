"""A long-lived reader's index of sealed segments answers every query exactly as reading each
segment does: over writers' segments, a trainer's records, a live view, then new segments and a
compaction seen by the same reader."""

from rollscope import tracing
from rollscope.analysis.insights import insights
from rollscope.store import TraceStore
from rollscope.store.compaction import compact
from rollscope.store.segments import LIVE


def _write(shared, local, experiment, steps, keep_open=False):
    tracing.init_tracing(
        trace_dir=str(shared), local_dir=str(local), sidecar=False, experiment=experiment, publish_interval_s=0.05
    )
    ids = []
    for step in range(steps):
        for sample in range(3):
            for n in range(2):
                with tracing.rollout_trace_attr(step=step, sample_index=sample, rollout_n=n) as t:
                    with tracing.trace_span("llm.generate", kind="llm", **{"gen_ai.usage.output_tokens": 5 + n}) as s:
                        s.outputs = {"response_text": f"{experiment} {step} {sample} {n}"}
                    with tracing.trace_span("calculator", kind="tool") as s:
                        if (sample + n) % 3 == 0:
                            s.fail(ValueError("bad expression"))
                    if not keep_open:  # unrewarded, a running writer's trajectories wait in its live view
                        tracing.set_reward(float((sample * n + step) % 2))
                ids.append(t.id)
    if not keep_open:
        tracing.shutdown_tracing(30)
    return ids


def _answers(store):
    """What the viewer and CLI ask, in plain values."""
    out = {
        "count": store.count(),
        "total": store.total(),
        "experiments": store.experiments(),
        "steps": [tuple(vars(s).values()) for s in store.steps()],
        "by step, reward >= 1": store.count(step=1, min_reward=1.0),
        "training": [(r.trajectory_id, r.advantage) for r in store.training_records()],
        "insights": [(e.experiment, s.name, s.step, s.count, s.examples) for e in insights(store) for s in e.signals],
    }
    for order in ("step", "reward", "end", "tools", "errors"):
        for descending in (False, True):
            out[order, descending] = [
                r.id for r in store.trajectories(order_by=order, descending=descending, limit=7, offset=5)
            ]
    records = store.trajectories(has_error=True, order_by="start")
    out["errors"] = [(r.id, r.shard, r.reward, r.num_tool_errors) for r in records]
    some = records[0].id
    out["get"] = (
        store.get(some).shard,
        [(s.name, s.outputs) for s in store.get(some).spans],
        store.get(some).training and store.get(some).training.advantage,
    )
    out["group"] = [r.id for r in store.group(1, 2)]
    return out


def test_the_index_answers_as_the_segments_do_and_follows_the_directory(tmp_path):
    shared = tmp_path / "shared"
    first = _write(shared, tmp_path / "a", "a", 3)
    _write(shared, tmp_path / "b", "b", 2)
    tracing.init_tracing(trace_dir=str(shared), local_dir=str(tmp_path / "t"), sidecar=False, experiment="a")
    for i, tid in enumerate(first[:6]):
        tracing.get_tracer().training(tid, {"step": 0, "uid": "u0", "advantage": i - 2.5, "lag": 0})
    tracing.shutdown_tracing(30)
    _write(shared, tmp_path / "c", "c", 1, keep_open=True)  # a writer still running: its live view
    try:
        assert tracing.flush_tracing(30)  # published: its unrewarded trajectories are in its live view
        assert list((shared / LIVE).glob("*.rstrace"))
        indexed = TraceStore(shared, index_segments=True)
        expected = _answers(TraceStore(shared))
        assert expected["count"] == 36 and len(expected["training"]) == 6 and expected["errors"]
        assert _answers(indexed) == expected

        _write(shared, tmp_path / "d", "d", 1)  # the same reader, later: a new writer's segments
        compact(shared, min_segments=2)  # and the segments it had copied replaced by one
        expected = _answers(TraceStore(shared))
        assert expected["count"] == 42
        assert _answers(indexed) == expected
    finally:
        tracing.shutdown_tracing(30)


def test_a_shard_its_writer_holds_locked_is_read_again_not_left_out(tmp_path):
    """A writer's exclusive lock (schema creation, a journal switch) makes a reader's query fail
    with "database is locked": that shard is read at the next query, not skipped as damaged."""
    import sqlite3

    tracing.init_tracing(trace_dir=str(tmp_path), sidecar=False, experiment="x")
    with tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=0):
        tracing.set_reward(1.0)
    tracing.shutdown_tracing(30)
    (shard,) = tmp_path.glob("*.rstrace")
    holder = sqlite3.connect(shard, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")  # (a rollback journal: an exclusive lock blocks readers)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute(
        "INSERT INTO trajectories SELECT 'second', project, experiment, step, sample_index, 1, validate, "
        "agent_name, status, reward, start_ns, end_ns, num_spans, num_llm_calls, num_tool_calls, "
        "num_errors, num_tokens, num_tool_errors, error_type, error_message, attributes, num_truncated, "
        "num_repeated_calls, logprob_sum, logprob_count, answer_chars, turn_limit, replay_of "
        "FROM trajectories"
    )
    store = TraceStore(tmp_path)
    assert store.count() == 0 and not store.damaged  # locked now: not counted, not damaged
    holder.execute("COMMIT")
    holder.close()
    assert store.count() == 2  # read again, as it is now
