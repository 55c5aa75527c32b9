"""A remote backend's spool: a burst beyond its queue waits on disk and arrives whole, in order; a
process killed with a spool full of trajectories has them sent by the next process for the same
destination, none skipped, none twice; a full disk loses only what it could not write, counted."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing import _wire as wire
from rollscope.tracing._events import REWARD
from rollscope.tracing._spool import _HEADER, Spool, destination_dir, spool_root
from tests.small_disk import small_tmpfs
from tests.tracing.spool_backends import LedgerBackend

REPO = Path(__file__).resolve().parents[2]


def rollouts(n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        with tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": list(range(50))}) as s:
                s.outputs = {"response_text": f"answer {i}"}
            with tracing.trace_span("calculator", kind="tool") as s:
                s.outputs = {"text": str(i)}
            tracing.set_reward(1.0)


def ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def slow_server():
    LedgerBackend.gate.clear()
    yield LedgerBackend.gate
    LedgerBackend.gate.set()


def test_a_burst_beyond_the_queue_waits_on_disk_and_arrives_whole(trace_dir, tmp_path, slow_server):
    sent = tmp_path / "sent"
    tracing.init_tracing(backend="local,ledger", trace_dir=str(trace_dir), max_queue=50, ledger_path=str(sent))
    rollouts(300)  # ~1,200 events against a queue of 50, the server not answering
    deadline = time.monotonic() + 30  # (shaping's first batch loads the redaction rules in a fresh process)
    while tracing.stats()["backends"]["ledger"]["spooled"] <= 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tracing.flush_tracing(timeout=0.5) is False
    stats = tracing.stats()["backends"]["ledger"]
    assert stats["dropped"] == 0 and stats["lossless"] is True
    assert stats["spooled"] > 50 and stats["queued"] >= stats["spooled"]
    assert ledger(sent) == []

    slow_server.set()  # the server answers again: everything arrives
    assert tracing.flush_tracing(60)
    backend = next(b for b in tracing.get_tracer().backends if b.name == "ledger")
    with TraceStore(trace_dir) as store:
        stored = {t.id: t for t in store.trajectories()}
    assert sorted(ledger(sent)) == sorted(stored) and len(stored) == 300
    assert all(backend.spans[i] == ["llm.generate", "calculator"] for i in stored)  # each trajectory whole
    assert ledger(sent) == sorted(stored, key=lambda i: stored[i].start_ns)  # in the order they ended
    final = tracing.stats()["backends"]["ledger"]
    assert final["dropped"] == 0 and final["spooled"] == 0 and final["lossless"] is True
    tracing.shutdown_tracing(30)
    assert not any(destination_dir(spool_root(), backend.destination()).iterdir())  # nothing left behind


def test_interleaved_trajectories_are_spooled_each_whole(tmp_path):
    """Concurrent rollouts interleave their events; on disk each trajectory is one record, so a
    cursor confirmed before a restart never falls inside one."""
    import asyncio

    tracing.init_tracing(backend="ledger", ledger_path=str(tmp_path / "sent"))

    async def one(i: int) -> None:
        with tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0):
            for turn in range(3):
                with tracing.trace_span(f"turn{turn}", kind="llm"):
                    await asyncio.sleep(0.001 * ((i + turn) % 4))

    async def many() -> None:
        await asyncio.gather(*(one(i) for i in range(40)))

    asyncio.run(many())
    assert tracing.flush_tracing(30)
    worker = next(w for w in tracing.get_tracer().exporter.workers if w.name == "ledger")
    records = []
    for segment in sorted(worker.spool.own.path.glob("*.seg")):
        data, at = segment.read_bytes(), 0
        while at < len(data):
            length, _crc = _HEADER.unpack_from(data, at)
            records.append(wire.decode(data[at + _HEADER.size : at + _HEADER.size + length]))
            at += _HEADER.size + length
    assert len(records) == 40
    for record in records:  # its start, its three turns, its end; nothing of another trajectory
        trajectory = record[0][1].id
        assert [e[0] if type(e) is tuple else e.name for e in record] == [0, "turn0", "turn1", "turn2", 3]
        assert {e.trajectory_id if type(e) is not tuple else e[1].id for e in record} == {trajectory}
    tracing.shutdown_tracing(30)


_KILLED = """
import sys
from rollscope import tracing
import tests.tracing.spool_backends
from tests.tracing.test_spool import rollouts
from tests.tracing.spool_backends import LedgerBackend
tracing.init_tracing(backend="ledger", sidecar=False, ledger_path=sys.argv[1])
LedgerBackend.gate.clear()  # the server is slow: the trajectories wait in the spool
rollouts(600)
import time
spool = next(w for w in tracing.get_tracer().exporter.workers if w.name == "ledger").spool
deadline = time.monotonic() + 120
while spool.written_events < 600 * 5 and time.monotonic() < deadline:  # start, 2 spans, reward, end
    time.sleep(0.01)  # what is still in memory when the kill comes is lost: the test kills after the spool
LedgerBackend.gate.set()
print("traced", spool.written_events, flush=True)
time.sleep(600)
"""


def test_a_killed_process_spool_is_sent_by_the_next_none_skipped_none_twice(tmp_path):
    sent = tmp_path / "sent"
    env = {**os.environ, "ROLLSCOPE_TEST_HANG_AFTER": "30", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_KILLED), str(sent)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().split() == ["traced", str(600 * 5)]
    hung = tmp_path / "sent.hung"
    deadline = time.monotonic() + 120
    while not hung.exists() and time.monotonic() < deadline:  # its server stops answering after 30
        time.sleep(0.05)
    assert hung.exists()  # hung in a flush: what it delivered before is confirmed, what it read last is not
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    first = ledger(sent)
    assert 30 <= len(first) < 600

    tracing.init_tracing(backend="ledger", ledger_path=str(sent))  # the next run, same destination
    rollouts(10, first=1000)
    assert tracing.flush_tracing(60)
    stats = tracing.stats()["backends"]["ledger"]
    tracing.shutdown_tracing(30)
    delivered = ledger(sent)
    assert len(delivered) == len(set(delivered)) == 610, (len(delivered), len(set(delivered)))
    assert stats["dropped"] == 0


def test_a_full_disk_loses_only_what_it_could_not_write_counted_exactly(tmp_path):
    with small_tmpfs(tmp_path / "small", "256k") as mount:
        spool = Spool("full-disk test", root=mount)
        records = [[(REWARD, f"t{i}", float(i), {"pad": os.urandom(2_000).hex()})] for i in range(200)]  # ~800 kB
        spool.append(records)
        assert 0 < spool.written_events < 200
        assert spool.dropped == 200 - spool.written_events
        read = []
        while spool.pending:
            read += spool.read(10)
        assert [e[2] for e in read] == list(range(spool.written_events))  # what was written reads back whole


def test_a_torn_record_at_a_dead_writers_end_is_skipped_and_the_rest_sent(tmp_path):
    writer = Spool("torn", root=tmp_path)
    writer.append([[(REWARD, "t0", 0.0, {})], [(REWARD, "t1", 1.0, {})]])
    segment = next(writer.own.path.glob("*.seg"))
    with open(segment, "ab") as f:
        f.write(b"\x40\x00\x00\x00garbage")  # a header promising 64 bytes, and the writer died
    writer.abandon()  # its lock goes with it, as with a dead process
    reader = Spool("torn", root=tmp_path)
    assert reader.read(10) == [(REWARD, "t0", 0.0, {})] and reader.read(10) == [(REWARD, "t1", 1.0, {})]
    assert reader.read(10) == [] and not reader.adopted
    assert not writer.own.path.exists()  # read to its end: removed


def crafted(body: bytes) -> bytes:
    import zlib

    return _HEADER.pack(len(body), zlib.crc32(body)) + body


def test_a_crafted_record_in_an_orphaned_spool_costs_itself_and_delivery_goes_on(tmp_path, caplog):
    """Records others could leave in a spool directory (a shared cache): a global the wire refuses,
    a builtin asked to allocate (``list(bytes(10**9))`` in 43 bytes), a record that is no list of
    events, one of an unknown or in-memory-only kind, a length past any record's: each is moved to
    the dead letters and counted; the good records around them are delivered, in order."""
    import pickle

    writer = Spool("crafted", root=tmp_path)
    writer.append([[(REWARD, "t0", 0.0, {})]])
    segment = next(writer.own.path.glob("*.seg"))
    bombs = [
        b"cos\nsystem\n(S'true'\ntR.",  # os.system: refused by name
        b"c__builtin__\nlist\n(c__builtin__\nbytes\n(J\x00\xca\x9a;tRtR.",  # list(bytes(10**9))
        pickle.dumps(7),
        pickle.dumps([("flush", 1)]),
        pickle.dumps([(99, "t", 1.0)]),
    ]
    with open(segment, "ab") as f:
        for bomb in bombs:
            f.write(crafted(bomb))
        f.write(crafted(wire.encode([(REWARD, "t1", 1.0, {})])))
    writer.append([[(REWARD, "t2", 2.0, {})]])
    writer.abandon()
    reader = Spool("crafted", root=tmp_path)
    events = []
    while reader.adopted:
        events += reader.read(10)
    assert [e[1] for e in events] == ["t0", "t1", "t2"]
    dead = sorted((destination_dir(tmp_path, "crafted") / "dead-letters").iterdir())
    assert len(dead) == len(bombs)
    assert sum("could not be read" in r.getMessage() for r in caplog.records) == len(bombs)
    reader.close()


def test_a_record_length_past_any_record_is_not_allocated(tmp_path):
    writer = Spool("too-long", root=tmp_path)
    writer.append([[(REWARD, "t0", 0.0, {})]])
    segment = next(writer.own.path.glob("*.seg"))
    with open(segment, "ab") as f:
        f.write(_HEADER.pack(0xFFFFFFF0, 0) + b"x" * 64)
    writer.abandon()
    reader = Spool("too-long", root=tmp_path)
    assert [e[1] for e in reader.read(10)] == ["t0"] and reader.read(10) == [] and not reader.adopted
    assert len(list((destination_dir(tmp_path, "too-long") / "dead-letters").iterdir())) == 1
