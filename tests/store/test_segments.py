"""The store on a shared filesystem: writers in separate processes keep their live databases on
"node-local" directories of their own and publish sealed segments into a shared one; readers in
other processes poll it. Checked from the outside: what each reader has open (/proc/<pid>/fd),
every trajectory read exactly once, a writer killed mid-publish, compaction while writers run."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from rollscope.store import TraceStore
from rollscope.store.compaction import compact
from rollscope.store.recovery import recover
from rollscope.store.segments import LIVE, SEGMENTS

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent("""
    import os, sys, time
    from rollscope import tracing
    shared, local, n, tag, interval = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    tracing.init_tracing(trace_dir=shared, local_dir=local, publish_interval_s=interval, sidecar=False,
                         experiment="multi")
    print(os.getpid(), flush=True)
    for i in range(n):
        with tracing.rollout_trace_attr(step=i // 5, sample_index=f"{tag}-{i}", rollout_n=0):
            with tracing.trace_span("llm.generate", kind="llm") as s:
                s.outputs = {"token_ids": [1, 2, 3], "response_text": "abc"}
            with tracing.trace_span("calculator", kind="tool") as s:
                s.outputs = {"text": str(i)}
            tracing.set_reward(1.0)
        time.sleep(0.03)  # a rollout's pace: readers and compaction run while this writer publishes
    tracing.flush_tracing(30)
    tracing.shutdown_tracing(30)
""")

READER = textwrap.dedent("""
    import json, os, sys, time
    from rollscope.store import TraceStore
    shared, stop = sys.argv[1], sys.argv[2]
    opened, reads = set(), 0
    while not os.path.isdir(os.path.join(shared, "live")):  # a busy machine starts the writers late
        time.sleep(0.02)
    store = TraceStore(shared)
    while True:
        done = os.path.exists(stop)
        ids = [t.id for t in store.trajectories(experiment="multi")]
        assert len(ids) == len(set(ids)), "a trajectory read twice"
        for t in store.trajectories(experiment="multi", limit=3):
            assert len(store.get(t.id).spans) == t.num_spans == 2 or t.status == "running"
        for fd in os.listdir("/proc/self/fd"):
            try:
                opened.add(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        reads += 1
        if done:
            break
        time.sleep(0.02)
    print(json.dumps({"opened": sorted(opened), "reads": reads, "ids": ids}))
""")


def _writer(shared, local, n, tag, interval=0.05):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(shared), str(local), str(n), tag, str(interval)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_readers_only_ever_open_published_files_and_read_each_trajectory_once(tmp_path):
    shared, stop = tmp_path / "shared", tmp_path / "stop"
    locals_ = [tmp_path / f"node{i}" for i in range(8)]
    writers = [_writer(shared, local, 40, f"w{i}") for i, local in enumerate(locals_)]
    time.sleep(0.5)  # some segments exist; readers start while writers still publish
    readers = [
        subprocess.Popen([sys.executable, "-c", READER, str(shared), str(stop)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    deadline = time.monotonic() + 120
    compacted = compact(shared, min_segments=2)  # while writers keep publishing: as soon as there are two
    while not compacted and time.monotonic() < deadline:
        time.sleep(0.2)
        compacted = compact(shared, min_segments=2)
    for w in writers:
        assert w.wait(120) == 0
    stop.touch()
    results = [json.loads(r.communicate(timeout=120)[0].strip().splitlines()[-1]) for r in readers]
    for result in results:
        assert result["reads"] > 3
        for path in result["opened"]:  # never a writer's live database, never WAL machinery of the shared dir
            assert not any(path.startswith(str(local)) for local in locals_), path
            assert not path.endswith(("-wal", "-shm", "-journal")), path
        assert len(result["ids"]) == 8 * 40  # (the last poll began after every writer had closed)
    assert compacted
    compact(shared, min_segments=2)
    with TraceStore(shared) as store:
        records = store.trajectories(experiment="multi")
        assert len(records) == 320 and len({r.id for r in records}) == 320
        assert {r.sample_index for r in records} == {f"w{w}-{i}" for w in range(8) for i in range(40)}
        assert store.count(step=3) == 8 * 5 and len(store.group(3, "w0-15")) == 1
    assert not list((shared / LIVE).glob("*.rstrace"))  # closed writers leave no live view
    assert all(not any(local.iterdir()) for local in locals_)  # every local database fully published


def test_a_writer_killed_while_publishing_leaves_nothing_partial_and_recovery_publishes_the_rest(tmp_path):
    shared, local = tmp_path / "shared", tmp_path / "node"
    writer = _writer(shared, local, 200, "k", interval=0.5)  # ~15 trajectories stored locally per publish
    pid = int(writer.stdout.readline())
    deadline = time.monotonic() + 60
    while not list((shared / SEGMENTS).glob("*.rstrace")) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)  # mid-run, between two publishes (or inside one)
    writer.wait(10)
    [database] = local.glob("*.rstrace")
    with TraceStore(shared) as store:  # what readers see now: whole trajectories only
        seen = store.trajectories(experiment="multi")
        for t in seen:
            assert t.status == "running" or len(store.get(t.id).spans) == 2
    assert not [
        p for p in (shared / SEGMENTS).iterdir() if not p.name.endswith(".rstrace") and not p.name.startswith(".")
    ]
    import sqlite3

    db = sqlite3.connect(database)
    stored = db.execute("SELECT COUNT(*) FROM trajectories").fetchone()[0]
    db.close()
    [(path, published)] = recover(local, shared)
    assert path == database and not database.exists() and published > 0
    with TraceStore(shared) as store:
        ids = [t.id for t in store.trajectories(experiment="multi")]
    assert len(ids) == len(set(ids)) == stored and stored > len([t for t in seen if t.status != "running"])


def test_a_read_only_copy_of_a_finished_shared_store_is_fully_readable(tmp_path):
    shared = tmp_path / "shared"
    assert _writer(shared, tmp_path / "node", 20, "r").wait(120) == 0
    copy = tmp_path / "copy"
    shutil.copytree(shared, copy)
    for root, dirs, files in os.walk(copy):
        for name in files + dirs:
            os.chmod(os.path.join(root, name), stat.S_IRUSR | (stat.S_IXUSR if name in dirs else 0))
    os.chmod(copy, stat.S_IRUSR | stat.S_IXUSR)
    try:
        with TraceStore(copy) as store:
            records = store.trajectories(experiment="multi")
            assert len(records) == 20 and all(len(store.get(r.id).spans) == 2 for r in records)
    finally:
        for root, _, _ in os.walk(copy):
            os.chmod(root, stat.S_IRWXU)


def test_a_trainers_records_are_published_and_survive_compaction(tmp_path):
    """The trainer's process writes only training records (the trajectories are other writers'):
    in the shared layout they are sealed into a segment of their own, read by a reader of the
    shared directory, kept by compaction, and the node-local database is removed once they are out."""
    from rollscope import tracing

    shared, worker_local, trainer_local = tmp_path / "shared", tmp_path / "w", tmp_path / "t"
    tracing.init_tracing(trace_dir=str(shared), local_dir=str(worker_local), sidecar=False, experiment="e")
    ids = []
    for i in range(3):
        with tracing.rollout_trace_attr(step=1, sample_index=i, rollout_n=0) as t:
            tracing.set_reward(1.0)
        ids.append(t.id)
    tracing.shutdown_tracing()
    tracing.init_tracing(trace_dir=str(shared), local_dir=str(trainer_local), sidecar=False, experiment="e")
    for i, tid in enumerate(ids):
        tracing.get_tracer().training(tid, {"step": 1, "uid": f"u{i}", "advantage": 0.5 * i, "lag": 0})
    tracing.shutdown_tracing()
    assert not list(trainer_local.glob("*.rstrace"))  # all of it published: the local database is gone
    store = TraceStore(shared)
    assert [store.get(tid).training.advantage for tid in ids] == [0.0, 0.5, 1.0]
    assert len(compact(shared, min_segments=2)) == 1
    store = TraceStore(shared)
    assert [store.get(tid).training.uid for tid in ids] == ["u0", "u1", "u2"]
    assert len(store.training_records(experiment="e")) == 3


def test_a_trajectory_without_reward_shows_before_any_segment_and_a_reward_after_sealing_is_counted(
    tmp_path, monkeypatch
):
    """Readers see a writer's unrewarded trajectory in its live view from the first publish (the
    layout exists before any segment); a reward arriving after its trajectory was sealed is kept
    in the writer's database and counted, not silently missing from the shared directory."""
    from rollscope import tracing
    from rollscope.store import publish

    shared, local = tmp_path / "shared", tmp_path / "local"
    tracing.init_tracing(trace_dir=str(shared), local_dir=str(local), sidecar=False)
    with tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=0), tracing.trace_span("llm.generate"):
        pass
    assert tracing.flush_tracing(30)
    with TraceStore(shared) as store:
        (seen,) = store.trajectories()
        assert seen.status == "ok" and seen.reward is None  # shown while it waits for a reward
    assert not list((shared / SEGMENTS).iterdir())  # no segment yet: it is the live view that showed it

    monkeypatch.setattr(publish, "SETTLE_S", 0.0)  # the wait for a reward has passed: sealed at the next publish
    assert tracing.flush_tracing(30)
    assert len(list((shared / SEGMENTS).iterdir())) == 1
    tracing.set_reward(0.5, trajectory_id=seen.id)
    assert tracing.flush_tracing(30)
    local_stats = tracing.stats()["backends"]["local"]
    tracing.shutdown_tracing(30)
    assert local_stats["rewards_after_seal"] == 1
    assert len(list(local.glob("*.rstrace"))) == 1  # the writer's database stays: the late reward is there
    with TraceStore(local) as store:
        assert store.get(seen.id).reward == 0.5
