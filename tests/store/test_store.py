"""The local store with real SQLite and real processes: exact counts, SIGKILL, filters, groups, diffs."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.store.schema import SHARD_SUFFIX

WORKER = str(Path(__file__).parent.parent / "_trace_worker.py")


@pytest.mark.slow
def test_several_writer_processes_exact_counts(tmp_path):
    procs = [subprocess.Popen([sys.executable, WORKER, "write", str(tmp_path), str(w), "300", "5"]) for w in range(4)]
    assert [p.wait(180) for p in procs] == [0, 0, 0, 0]
    store = TraceStore(tmp_path)
    assert len(store.shards()) == 4
    assert store.count() == 1200
    for w in range(4):
        mine = store.trajectories(experiment=f"w{w}")
        assert len(mine) == 300
        assert sum(t.num_spans for t in mine) == 1500
        assert {t.sample_index for t in mine} == {w * 1_000_000 + i for i in range(300)}
    span_total = sum(sqlite3.connect(s).execute("SELECT COUNT(*) FROM spans").fetchone()[0] for s in store.shards())
    assert span_total == 6000
    t = store.get(store.trajectories(experiment="w2", limit=1)[0].id)
    assert [s.outputs["text"] for s in t.spans] == [f"w2 s{t.sample_index} j{j}" for j in range(5)]


@pytest.mark.slow
def test_sigkill_mid_write_leaves_every_flushed_trajectory(tmp_path):
    progress = tmp_path / "progress"
    store_dir = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, WORKER, "forever", str(store_dir), "0", "6", str(progress)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = progress.read_text().split() if progress.exists() else []
        if len(lines) >= 8:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    flushed = int(progress.read_text().split()[-1])
    assert flushed >= 200
    store = TraceStore(store_dir)
    [shard] = store.shards()
    assert sqlite3.connect(shard).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    trajectories = store.trajectories(step=1)
    finished = [t for t in trajectories if t.status == "ok"]
    assert {t.sample_index for t in finished} >= set(range(flushed))
    for t in finished:  # no torn records: a finished trajectory has all of its spans
        assert t.num_spans == 6 and len(t.spans) == 6


def _populate(trace_dir):
    tracing.init_tracing(project="p", experiment="e1", trace_dir=str(trace_dir))
    for step in range(3):
        for sample in range(4):
            for n in range(2):
                with tracing.rollout_trace_attr(step=step, sample_index=sample, rollout_n=n, validate=step == 2):
                    with tracing.trace_span("generate", kind="llm") as s:
                        s.outputs = {"response_text": f"answer {sample + n}"}
                    if sample == 3 and n == 1:
                        try:
                            with tracing.trace_span("calculator", kind="tool", inputs={"expr": "1/0"}):
                                raise ZeroDivisionError("1/0")
                        except ZeroDivisionError:
                            pass
                    tracing.set_reward(float(n) + sample / 10)
    assert tracing.flush_tracing()
    return TraceStore(trace_dir)


def test_filters_sorting_and_paging(trace_dir):
    store = _populate(trace_dir)
    assert store.count() == 24
    assert len(store.trajectories(step=1)) == 8
    assert len(store.trajectories(validate=True)) == 8
    assert len(store.trajectories(has_error=True)) == 3
    assert {t.sample_index for t in store.trajectories(has_error=True)} == {3}
    assert len(store.trajectories(min_reward=1.0)) == 12
    assert len(store.trajectories(step=0, max_reward=0.15)) == 2
    assert store.trajectories(experiment="nope") == []
    by_reward = store.trajectories(order_by="reward", descending=True, limit=3)
    assert [t.reward for t in by_reward] == [1.3, 1.3, 1.3]
    page = store.trajectories(order_by="step", limit=5, offset=5)
    assert len(page) == 5
    assert [(t.step, t.sample_index, t.rollout_n) for t in page[:2]] == [(0, 2, 1), (0, 3, 0)]
    with pytest.raises(ValueError, match="order_by must be one of"):
        store.trajectories(order_by="bogus")
    with pytest.raises(KeyError, match="no trajectory"):
        store.get("missing")


def test_group_and_diff(trace_dir):
    store = _populate(trace_dir)
    group = store.group(step=1, sample_index=3)
    assert [t.rollout_n for t in group] == [0, 1]
    assert [t.reward for t in group] == [0.3, 1.3]
    d = store.diff(group[0].id, group[1].id)
    assert d.fields["reward"] == (0.3, 1.3)
    assert d.fields["num_tool_calls"] == (0, 1)
    # one model turn each: its output differs, and only one side's turn called a tool
    [turn] = d.turns
    assert turn.changed == ["output", "tool calls"] and turn.left_tools == [] and len(turn.right_tools) == 1
    assert d.first_divergence == 0


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace store at"):
        TraceStore(tmp_path / "nowhere")


def test_default_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(tmp_path / "env_dir"))
    tracing.init_tracing()
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        pass
    tracing.flush_tracing()
    assert list((tmp_path / "env_dir").glob(f"*{SHARD_SUFFIX}"))
    assert TraceStore().count() == 1


def test_running_trajectory_is_visible_before_it_ends(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir))
    with tracing.rollout_trace_attr(step=9, sample_index=1):
        tracing.flush_tracing()
        [t] = TraceStore(trace_dir).trajectories()
        assert t.status == "running"
    tracing.flush_tracing()
    assert TraceStore(trace_dir).trajectories()[0].status == "ok"


@pytest.mark.slow
def test_interpreter_exit_flushes_without_an_explicit_shutdown(tmp_path):
    code = (
        "from rollscope import tracing\n"
        f"tracing.init_tracing(trace_dir={str(tmp_path)!r})\n"
        "for i in range(50):\n"
        "    with tracing.rollout_trace_attr(step=0, sample_index=i), tracing.trace_span('s'):\n"
        "        pass\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert TraceStore(tmp_path).count(status="ok") == 50


@pytest.mark.slow
def test_forked_child_traces_into_its_own_shard(tmp_path):
    import multiprocessing

    tracing.init_tracing(trace_dir=str(tmp_path))
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        pass
    tracing.flush_tracing()

    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child_rollouts)
    child.start()
    child.join(60)
    assert child.exitcode == 0
    tracing.flush_tracing()
    store = TraceStore(tmp_path)
    assert len(store.shards()) == 2
    assert sorted(t.sample_index for t in store.trajectories()) == [0, 1, 2, 3]
    assert len({t.id for t in store.trajectories()}) == 4


def _child_rollouts():
    for i in (1, 2, 3):
        with tracing.rollout_trace_attr(step=0, sample_index=i):
            pass
    assert tracing.flush_tracing(30)
