"""8 processes x 10,000 trajectories written at once into one store: exact counts read back."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rollscope.store import TraceStore

pytestmark = pytest.mark.slow
WORKER = str(Path(__file__).parents[1] / "_trace_worker.py")


def test_eight_processes_ten_thousand_trajectories_each(tmp_path):
    procs = [subprocess.Popen([sys.executable, WORKER, "write", str(tmp_path), str(w), "10000", "1"]) for w in range(8)]
    assert [p.wait(600) for p in procs] == [0] * 8
    with TraceStore(tmp_path) as store:
        assert len(store.shards()) == 8
        assert store.count() == 80_000 and store.count(status="ok") == 80_000
        for w in range(8):
            assert store.count(experiment=f"w{w}") == 10_000
        spans = sum(sqlite3.connect(s).execute("SELECT COUNT(*) FROM spans").fetchone()[0] for s in store.shards())
        assert spans == 80_000
        indices = [r.sample_index for r in store.trajectories(experiment="w5")]
        assert sorted(indices) == [5_000_000 + i for i in range(10_000)]
        for shard in store.shards():
            assert sqlite3.connect(shard).execute("PRAGMA integrity_check").fetchone() == ("ok",)
