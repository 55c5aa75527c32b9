"""A shard written before columns were added to the trajectories table (schema versions 2-4) is
read with what those columns read as (``schema.ADDED_COLUMNS``), by every query, beside a current
shard."""

import sqlite3

from rollscope import tracing
from rollscope.analysis.insights import insights
from rollscope.store import TraceStore
from rollscope.store.schema import ADDED_COLUMNS


def record(trace_dir, experiment):
    tracing.init_tracing(trace_dir=str(trace_dir), experiment=experiment, sidecar=False)
    for n in range(3):
        with tracing.rollout_trace_attr(step=1, sample_index=0, rollout_n=n):
            with tracing.trace_span("llm.generate", kind="llm", **{"gen_ai.usage.output_tokens": 10 + n}) as s:
                s.outputs = {"response_text": "x", "stop_reason": "length" if n == 2 else "stop"}
            with tracing.trace_span("calculator", kind="tool") as s:
                if n == 1:
                    s.fail(ValueError("bad"))
            tracing.set_reward(float(n))
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing(30)


def test_an_old_shard_reads_beside_a_new_one(tmp_path):
    traces = tmp_path / "traces"
    record(traces, "new")
    [new] = traces.glob("*.rstrace")
    record(traces, "old")
    [old] = [p for p in traces.glob("*.rstrace") if p != new]
    db = sqlite3.connect(old)  # back to schema version 2: the added columns and their indexes gone
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall():
        db.execute(f"DROP INDEX {name}")
    for column in ADDED_COLUMNS:
        db.execute(f"ALTER TABLE trajectories DROP COLUMN {column}")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    assert not {c for _, c, *_ in db.execute("PRAGMA table_info(trajectories)")} & set(ADDED_COLUMNS)
    db.close()

    with TraceStore(traces) as store:
        assert store.count() == 6 and store.count(experiment="old") == 3
        by_tokens = store.trajectories(order_by="tokens", descending=True, limit=None)
        assert [t.experiment for t in by_tokens][:3] == ["new"] * 3  # the old shard's read as 0
        old_rows = store.trajectories(experiment="old", limit=None)
        assert {(t.num_tokens, t.num_tool_errors, t.num_truncated, t.replay_of) for t in old_rows} == {(0, 0, 0, None)}
        assert {t.reward for t in old_rows} == {0.0, 1.0, 2.0} and all(t.spans for t in old_rows)
        assert store.count(tool_error=True) == 1  # the new shard's failed call only
        assert store.get(old_rows[0].id).experiment == "old"
        runs = {run.experiment: run for run in insights(store)}
    assert runs["new"].of("truncated")[0].count == 1 and runs["old"].of("truncated")[0].count == 0
