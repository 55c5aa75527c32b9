"""Several trace sidecars for one traced process (``sidecar=N``): real helper processes, each with
its own shard; whole trajectories in each, one store to read, and one of them killed mid-run."""

import itertools
import logging
import os
import signal

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing._pipeline import sidecar_count
from rollscope.tracing._sidecar import SidecarPool
from rollscope.tracing._sidecar import process as sidecar_process


def rollouts(n, start=0):
    """Trajectories of a run span, two turns (one a leaf span) and a reward."""
    for i in range(start, start + n):
        with tracing.rollout_trace_attr(step=1, sample_index=i, rollout_n=0):
            with tracing.trace_span("agent.run", inputs={"question": f"q{i}"}) as run:
                for turn in range(2):
                    with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": [1, 2, turn]}) as s:
                        s.outputs = {"token_ids": [4, 5], "stop_reason": "stop"}
                run.outputs = {"answer": str(i)}
            tracing.set_reward(float(i % 2))


def the_pool():
    [pool] = [w for w in tracing.get_tracer().exporter.workers if isinstance(w, SidecarPool)]
    return pool


def test_each_sidecar_stores_whole_trajectories_in_its_own_shard(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir), experiment="e", sidecar=3)
    pool = the_pool()
    pids = {m.process.pid for m in pool.members}
    assert len(pids) == 3 and os.getpid() not in pids
    rollouts(60)
    assert tracing.flush_tracing(30)  # returns once every sidecar has passed the flush
    stats = tracing.stats()["backends"]["local"]
    assert stats["stored_trajectories"] == 60 and stats["stored_spans"] == 180
    assert stats["dropped"] == 0 and stats["lossless"] is True
    assert tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        rows = store.trajectories(limit=100)
        assert sorted(t.sample_index for t in rows) == list(range(60))
        assert all(t.num_spans == 3 and t.num_llm_calls == 2 and t.reward == float(t.sample_index % 2) for t in rows)
        shards = {t.shard for t in rows}
        assert len(shards) == 3 and all(any(f"-{pid}-" in s for pid in pids) for s in shards)
        for t in rows:  # each span in its trajectory's shard, under its run span
            [run] = t.tree()
            assert run.outputs == {"answer": str(t.sample_index)} and len(run.children) == 2


def test_a_killed_sidecar_costs_nothing_the_others_hold_and_its_share_continues_here(trace_dir, caplog):
    tracing.init_tracing(trace_dir=str(trace_dir), sidecar=2)
    rollouts(20)
    assert tracing.flush_tracing(30)
    killed = the_pool().members[0]
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        os.kill(killed.process.pid, signal.SIGKILL)
        assert killed.process.wait(10)
        rollouts(20, start=20)
        assert tracing.flush_tracing(30)
    assert any("continue in this process, nothing lost" in r.getMessage() for r in caplog.records)
    stats = tracing.stats()["backends"]["local"]
    assert stats["dropped"] == 0 and stats["lossless"] is True
    tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        rows = store.trajectories(limit=100)
        assert sorted(t.sample_index for t in rows) == list(range(40))
        assert all(t.status == "ok" and t.num_spans == 3 for t in rows)
        assert len(store.shards()) == 2  # the killed one's shard, continued here


def test_an_event_of_no_known_shape_never_raises_on_the_rollouts_thread(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir), sidecar=2)
    pool = the_pool()
    pool.pack(object())  # no trajectory to route by, nothing the wire takes: counted, not raised
    rollouts(4)
    assert tracing.flush_tracing(30)
    stats = tracing.stats()["backends"]["local"]
    assert stats["errors"] == 1 and stats["stored_trajectories"] == 4
    tracing.shutdown_tracing(30)


def test_when_one_sidecar_cannot_start_none_is_kept_and_tracing_stays_here(trace_dir, monkeypatch, caplog):
    """All or none: the sidecar that started is closed (its process ends), the backends run in
    this process, and what is traced is stored."""
    real_popen, calls, started = sidecar_process.subprocess.Popen, itertools.count(), []

    def second_fails(*args, **kwargs):  # (the two start at once, on two threads)
        if next(calls) > 0:
            raise OSError("Resource temporarily unavailable")
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(sidecar_process.subprocess, "Popen", second_fails)
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        tracer = tracing.init_tracing(trace_dir=str(trace_dir), sidecar=2)
    assert "cannot start the trace sidecar" in caplog.text and "in this process instead" in caplog.text
    assert [b.name for b in tracer.backends] == ["local"]
    assert started[0].wait(30) == 0  # the one that started was closed, not left behind
    rollouts(3)
    assert tracing.flush_tracing(30)
    assert TraceStore(trace_dir).count() == 3


@pytest.mark.parametrize(
    ("given", "env", "count"),
    [(None, None, 1), (None, "0", 0), (None, "off", 0), (None, "4", 4), (False, "4", 0), (True, None, 1), (2, "0", 2)],
)
def test_the_sidecar_count_comes_from_the_argument_else_the_environment(given, env, count, monkeypatch):
    if env is None:
        monkeypatch.delenv("ROLLSCOPE_TRACE_SIDECAR", raising=False)
    else:
        monkeypatch.setenv("ROLLSCOPE_TRACE_SIDECAR", env)
    assert sidecar_count(given) == count


def test_a_sidecar_count_that_is_not_one_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TRACE_SIDECAR", "two")
    with pytest.raises(ValueError, match="ROLLSCOPE_TRACE_SIDECAR='two'"):
        sidecar_count(None)
    with pytest.raises(ValueError, match="sidecar=-1"):
        sidecar_count(-1)
