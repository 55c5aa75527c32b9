"""A full disk under the store directory: a clear error, rollouts go on, nothing corrupted, and the
trajectories still buffered are written once space is back. Uses a 1 MiB tmpfs (needs root, as CI
has; elsewhere the test is skipped with the reason)."""

import logging
import os
import sqlite3

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from tests.small_disk import small_tmpfs

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    with small_tmpfs(tmp_path / "small", "1m") as mount:
        yield mount


def rollout(i: int) -> None:
    noise = os.urandom(6_000).hex()  # incompressible: fills the disk fast
    with (
        tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0),
        tracing.trace_span("llm.generate", kind="llm", inputs={"prompt": noise}) as span,
    ):
        span.outputs = {"response_text": f"answer {i}"}


def test_full_disk_is_reported_rollouts_continue_nothing_corrupted(small_disk, caplog):
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 300_000)  # room to give back later
    tracing.init_tracing(trace_dir=str(small_disk / "traces"))
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        for i in range(150):  # ~1.8 MB of payload for a 1 MiB disk
            rollout(i)
        flushed = tracing.flush_tracing(30)
    assert flushed is not None  # returned: no hang on a full disk
    stats = tracing.stats()["backends"]["local"]
    assert stats["errors"] > 0
    assert any("disk is full" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]

    # What is in the store is whole: the database is sound and every stored trajectory has its span.
    for shard in TraceStore(small_disk / "traces").shards():
        assert sqlite3.connect(shard).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with TraceStore(small_disk / "traces") as store:
        stored_before = store.count()
        assert 0 < stored_before < 150
        assert all(t.num_spans == 1 for t in store.trajectories())

    ballast.unlink()  # space is back: the buffered trajectories are written on the next flush
    tracing.shutdown_tracing(30)
    with TraceStore(small_disk / "traces") as store:
        assert store.count() > stored_before


def test_while_the_disk_stays_full_memory_is_bounded(small_disk, monkeypatch):
    from rollscope.tracing.backends import local

    monkeypatch.setattr(local, "MAX_RETAINED_SPANS", 20)
    tracing.init_tracing(trace_dir=str(small_disk / "traces"), sidecar=False)  # the backend, here, looked into
    (small_disk / "ballast").write_bytes(b"\0" * 900_000)  # as good as full from the start
    for i in range(100):
        rollout(i)
    tracing.flush_tracing(30)
    backend = tracing.get_tracer().exporter.workers[0].backend
    assert len(backend._spans) <= 20 and backend.dropped_spans >= 80
    assert tracing.stats()["backends"]["local"]["dropped"] == backend.dropped_spans


def test_no_room_for_a_new_store_is_one_clear_error(small_disk):
    (small_disk / "ballast").write_bytes(b"\0" * (1024 * 1024 - 4096))
    with pytest.raises(OSError, match=r"cannot create trace store .*small/traces/.*: database or disk is full"):
        tracing.init_tracing(trace_dir=str(small_disk / "traces"))


def test_what_was_stored_waits_and_was_lost_is_counted_exactly(small_disk):
    """Through the sidecar, as rollouts run: stored + retained = every trajectory, at every flush;
    at shutdown with the disk still full, what was retained is reported lost, exactly."""
    (small_disk / "ballast").write_bytes(b"\0" * 500_000)
    tracing.init_tracing(trace_dir=str(small_disk / "traces"))
    for i in range(120):
        rollout(i)
    assert tracing.flush_tracing(30)
    stats = tracing.stats()["backends"]["local"]
    with TraceStore(small_disk / "traces") as store:
        stored = store.count()
    assert 0 < stats["stored_trajectories"] == stored < 120
    assert stats["stored_trajectories"] + stats["retained_trajectories"] == 120
    assert stats["retained_spans"] == stats["retained_trajectories"]  # one span each
    tracer = tracing.get_tracer()
    tracing.shutdown_tracing(30)
    final = tracer.stats()["backends"]["local"]  # as the sidecar reported it when it closed
    assert final["lost_trajectories"] == 120 - stored and final["dropped"] == 120 - stored
    assert final["lossless"] is False
