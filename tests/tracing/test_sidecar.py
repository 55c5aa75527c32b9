"""The trace sidecar: a real helper process behind the local store, and what happens when it or
the traced process dies, cannot start, or is sent what pickle cannot take."""

import dataclasses
import logging
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing import _wire as wire
from rollscope.tracing._callargs import Binder, CallArgs
from rollscope.tracing._events import LEAF_SPAN
from rollscope.tracing._payload import PayloadShaper
from rollscope.tracing._redaction import Redactor
from rollscope.tracing._sidecar import lease, replay_log
from rollscope.tracing._sidecar import parent as sidecar
from rollscope.tracing._sidecar import process as sidecar_process
from rollscope.tracing.spans import Span, SpanKind, Trajectory


def rollouts(n, start=0, secret=""):
    for i in range(start, start + n):
        with tracing.rollout_trace_attr(step=1, sample_index=i, rollout_n=0):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": [1, 2, 3], "note": secret}) as s:
                s.outputs = {"token_ids": [4, 5], "log_probs": [-0.5, float("nan")]}
            tracing.set_reward(1.0)


def the_sidecar():
    workers = [w for w in tracing.get_tracer().exporter.workers if isinstance(w, sidecar.SidecarWorker)]
    assert len(workers) == 1
    return workers[0]


def test_local_store_is_written_by_a_helper_process(trace_dir, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TEST_SECRET_TOKEN", "s3cr3t-value-123")  # the child redacts it too
    tracing.init_tracing(trace_dir=str(trace_dir), experiment="e")
    worker = the_sidecar()
    assert worker.process.pid != os.getpid() and not worker.process.wait(0)
    assert tracing.get_tracer().backends == []  # nothing shaped or stored in this process
    rollouts(20, secret="s3cr3t-value-123")
    assert tracing.flush_tracing(30)
    assert tracing.stats()["backends"]["local"]["exported"] == 20 * 4  # start, span, reward, end
    with TraceStore(trace_dir) as store:
        assert store.count(experiment="e", step=1) == 20
        t = store.trajectories(limit=1)[0]
        assert t.reward == 1.0 and t.num_llm_calls == 1
        (span,) = store.spans(t.id)
        assert span.inputs == {"prompt_ids": [1, 2, 3], "note": "[REDACTED]"}
        assert span.outputs == {"token_ids": [4, 5], "log_probs": [-0.5, "nan"]}
        assert f"-{worker.process.pid}-" in t.shard  # the child's own shard
    assert tracing.shutdown_tracing(30)


def test_killed_sidecar_rollouts_go_on_and_the_store_continues_here(trace_dir, caplog):
    tracing.init_tracing(trace_dir=str(trace_dir))
    rollouts(10)
    assert tracing.flush_tracing(30)
    worker = the_sidecar()
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        os.kill(worker.process.pid, signal.SIGKILL)
        assert worker.process.wait(10)
        rollouts(15, start=10)
        assert tracing.flush_tracing(30)
    assert any(
        "trace sidecar" in r.getMessage() and "continue in this process, nothing lost" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    assert [w.name for w in worker.failover.workers] == ["local"]
    stats = tracing.stats()["backends"]["local"]
    assert stats["dropped"] == 0 and stats["lossless"] is True
    tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        assert len(store.shards()) == 1  # the sidecar's shard, continued here
        assert sorted(t.sample_index for t in store.trajectories(limit=100)) == list(range(25))


def _stopped_sidecar_with_unread_events(n_before, n_after):
    """The sidecar stores ``n_before`` rollouts, is stopped (SIGSTOP), is sent ``n_after`` more it
    never reads, and is killed. Returns the worker and how many events it was sent unread."""
    rollouts(n_before)
    assert tracing.flush_tracing(30)
    worker = the_sidecar()
    per_rollout, stored = worker.sender.sent // n_before, worker.sender.sent
    os.kill(worker.process.pid, signal.SIGSTOP)
    rollouts(n_after, start=n_before)
    deadline = time.monotonic() + 60
    while worker.sender.sent < stored + n_after * per_rollout and time.monotonic() < deadline:  # in the pipe
        time.sleep(0.01)
    assert worker.sender.sent == stored + n_after * per_rollout
    os.kill(worker.process.pid, signal.SIGKILL)
    assert worker.process.wait(10)
    # Until the traced process has seen the child go (its reader thread, at the pipe's end), a
    # batch sent meanwhile is lost when nothing is kept for replay (counted): wait for it, so the
    # callers' later rollouts are the fallback's on a loaded machine too.
    deadline = time.monotonic() + 60
    while worker.failover.workers is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.failover.workers is not None
    return worker, worker.sender.sent - stored


def test_a_killed_sidecar_loses_nothing_it_was_sent_unread(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir))
    _stopped_sidecar_with_unread_events(5, 5)
    assert tracing.flush_tracing(30)
    stats = tracing.stats()["backends"]["local"]
    assert stats["dropped"] == 0 and stats["lossless"] is True
    tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        rows = store.trajectories(limit=100)
        assert sorted(t.sample_index for t in rows) == list(range(10))
        assert all(t.status == "ok" and t.reward == 1.0 and t.num_spans == 1 for t in rows)


def test_a_killed_sidecar_beyond_the_kept_events_counts_the_loss_exactly(trace_dir, monkeypatch):
    monkeypatch.setattr(replay_log, "REPLAY_MAX_BYTES", 0)  # nothing kept for replay
    tracing.init_tracing(trace_dir=str(trace_dir))
    _, unread = _stopped_sidecar_with_unread_events(5, 5)
    rollouts(3, start=10)  # after the kill: stored here
    assert tracing.flush_tracing(30)
    stats = tracing.stats()["backends"]["local"]
    assert stats["dropped"] == unread and stats["lossless"] is False
    tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        assert sorted(t.sample_index for t in store.trajectories(limit=100)) == [0, 1, 2, 3, 4, 10, 11, 12]


def test_a_trajectory_open_when_the_sidecar_died_is_finished_with_whole_counts(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir))
    with tracing.rollout_trace_attr(step=1, sample_index=0, rollout_n=0):
        with tracing.trace_span("first", kind="llm") as s:
            s.outputs = {"token_ids": [1, 2, 3]}
        assert tracing.flush_tracing(30)  # its start and first span are in the sidecar's shard
        worker = the_sidecar()
        os.kill(worker.process.pid, signal.SIGKILL)
        assert worker.process.wait(10)
        with tracing.trace_span("second", kind="tool"):
            pass
    tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        (t,) = store.trajectories()
        assert (t.status, t.num_spans, t.num_llm_calls, t.num_tool_calls, t.num_tokens) == ("ok", 2, 1, 1, 3)
        assert [s.name for s in store.spans(t.id)] == ["first", "second"]


@pytest.mark.parametrize("sidecars", ["1", "0"])
def test_secret_rules_are_loaded_only_where_events_are_redacted(trace_dir, sidecars):
    """With a sidecar, the traced process never loads the secret rules (~0.5 s of CPU and
    detect-secrets' imports, on the rollout's machine): the sidecar redacts. Without one, they are
    loaded as tracing starts, before the first event waits for them. Either way the secret is
    not stored."""
    script = textwrap.dedent(f"""
        import sys
        from rollscope import tracing
        tracing.init_tracing(trace_dir={str(trace_dir)!r})
        loaded_at_start = "detect_secrets" in sys.modules
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            with tracing.trace_span("work", inputs={{"note": "key AKIAZ52HGXYRN4WBTEST here"}}):
                pass
        assert tracing.flush_tracing(60)
        print(loaded_at_start, "kingfisher_sdk" in sys.modules, "detect_secrets" in sys.modules)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ROLLSCOPE_TRACE_SIDECAR": sidecars},
    )
    assert proc.returncode == 0, proc.stderr
    here = sidecars == "0"
    assert proc.stdout.split() == [str(here)] * 3
    (span,) = TraceStore(trace_dir).spans(TraceStore(trace_dir).trajectories()[0].id)
    assert span.inputs == {"note": "key [REDACTED] here"}


def test_the_traced_process_killed_loses_nothing_it_sent(trace_dir):
    script = textwrap.dedent(f"""
        import os, signal, time
        from rollscope import tracing
        tracing.init_tracing(trace_dir={str(trace_dir)!r})
        for i in range(40):
            with tracing.rollout_trace_attr(step=0, sample_index=i):
                with tracing.trace_span("work") as s:
                    s.outputs = i
        time.sleep(1.0)  # the sender ships every 100 ms
        print(tracing.get_tracer().exporter.workers[0].process.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    child = int(proc.stdout.strip())
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:  # it notices the closed pipe and finishes
        time.sleep(0.05)
    assert not _alive(child)
    with TraceStore(trace_dir) as store:
        assert store.count(status="ok") == 40


def test_a_close_that_times_out_leaves_the_sidecar_to_deliver_on_its_own(trace_dir, tmp_path, monkeypatch, caplog):
    """The traced process stops waiting at its timeout; the sidecar is not killed: it holds what it
    was sent and delivers it once its destination answers, then lets go of the launcher's lock."""
    import tests.tracing.spool_backends  # noqa: F401  (the sidecar's ledger)

    ledger, gate, lock = tmp_path / "ledger", tmp_path / "gate", tmp_path / "sidecars.lock"
    monkeypatch.setenv("ROLLSCOPE_TEST_LEDGER_GATE", str(gate))  # the destination does not answer yet
    monkeypatch.setenv(lease.ENV, str(lock))
    tracing.init_tracing(backend="local,sidecar-ledger", trace_dir=str(trace_dir), ledger_path=str(ledger))
    rollouts(30)
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        assert tracing.shutdown_tracing(1.0) is False
    assert "still storing what it was sent" in caplog.text
    assert not lease.wait_released(lock, 0) and not ledger.exists()
    gate.touch()
    assert lease.wait_released(lock, 60)
    assert sorted(ledger.read_text().split()) == sorted({t.id for t in TraceStore(trace_dir).trajectories(limit=100)})
    assert TraceStore(trace_dir).count(status="ok") == 30


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ctrl_c_reaches_the_rollout_not_the_sidecar(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir))
    worker = the_sidecar()
    os.kill(worker.process.pid, signal.SIGINT)
    rollouts(5)
    assert tracing.flush_tracing(30)
    assert not worker.process.wait(0)
    assert TraceStore(trace_dir).count() == 5


def test_a_sidecar_that_cannot_start_leaves_tracing_in_this_process(trace_dir, monkeypatch, caplog):
    def no_processes(*args, **kwargs):
        raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(sidecar_process.subprocess, "Popen", no_processes)
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        tracer = tracing.init_tracing(trace_dir=str(trace_dir))
    assert "cannot start the trace sidecar" in caplog.text and "in this process instead" in caplog.text
    assert [b.name for b in tracer.backends] == ["local"]
    rollouts(3)
    assert tracing.flush_tracing(30)
    assert TraceStore(trace_dir).count() == 3


def test_sidecar_off_keeps_every_backend_here(trace_dir, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TRACE_SIDECAR", "0")
    tracer = tracing.init_tracing(trace_dir=str(trace_dir))
    assert [b.name for b in tracer.backends] == ["local"]
    assert not any(isinstance(w, sidecar.SidecarWorker) for w in tracer.exporter.workers)


# ---- a sidecar started early (``tracing.early_sidecar``: rollscope run starts one before importing verl) ----
def _holders(path):
    """The pids of the processes holding ``path`` open (a sidecar holds the launcher's lock file)."""
    pids = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir()):
                pids.append(int(fd_dir.parent.name))
        except OSError:  # (a process gone meanwhile, or not ours)
            continue
    return pids


def test_a_sidecar_started_early_is_the_one_tracing_uses_and_stores_nothing_before(trace_dir, monkeypatch):
    """Started before its configuration, the spare makes no store; ``init_tracing`` greets it (no
    second process), and a secret exported after the spare started is redacted all the same."""
    with tracing.early_sidecar("local", trace_dir=str(trace_dir)):
        spare = sidecar_process._spare
        assert spare is not None
        monkeypatch.setenv("EARLY_TEST_SECRET_TOKEN", "s3cr3t-exported-later-123")  # (no ROLLSCOPE_ setting)
        assert not trace_dir.exists()
        tracing.init_tracing(trace_dir=str(trace_dir), experiment="early")
        assert sidecar_process._spare is None and the_sidecar().process._pipes[0] is spare.launcher.stdin
        rollouts(3, secret="s3cr3t-exported-later-123")
        assert tracing.shutdown_tracing(30)
    with TraceStore(trace_dir) as store:
        assert store.count(experiment="early") == 3
        assert {store.spans(t.id)[0].inputs["note"] for t in store.trajectories()} == {"[REDACTED]"}


def test_a_sidecar_started_early_and_never_configured_ends_with_its_block(trace_dir, tmp_path, monkeypatch):
    lock = tmp_path / "sidecars.lock"
    monkeypatch.setenv(lease.ENV, str(lock))
    with tracing.early_sidecar("local", trace_dir=str(trace_dir)):
        assert sidecar_process._spare is not None
    assert sidecar_process._spare is None
    assert lease.wait_released(lock, 60)  # it read the end of its stdin and exited
    assert not trace_dir.exists()


def test_a_sidecar_started_early_that_died_or_no_longer_fits_is_replaced(trace_dir, tmp_path, monkeypatch, caplog):
    """One killed before its greeting, or started with ``ROLLSCOPE_`` settings that changed since
    (a child reads them as it starts), is not used: tracing starts another, nothing lost."""
    lock = tmp_path / "sidecars.lock"
    monkeypatch.setenv(lease.ENV, str(lock))
    with tracing.early_sidecar("local", trace_dir=str(trace_dir)):
        deadline = time.monotonic() + 60
        while not (pids := _holders(lock)) and time.monotonic() < deadline:
            time.sleep(0.05)
        (pid,) = pids
        os.kill(pid, signal.SIGKILL)
        with caplog.at_level(logging.INFO, logger="rollscope"):
            tracing.init_tracing(trace_dir=str(trace_dir))
        assert "did not start" in caplog.text and "starting another" in caplog.text
        assert the_sidecar().process.pid != pid
        rollouts(2)
        assert tracing.shutdown_tracing(30)
    with tracing.early_sidecar("local", trace_dir=str(trace_dir)):
        spare = sidecar_process._spare
        monkeypatch.setenv("ROLLSCOPE_SIDECAR_BACKLOG_MB", "8")
        tracing.init_tracing(trace_dir=str(trace_dir))
        assert spare.launcher.stdin.closed and the_sidecar().process._pipes[0] is not spare.launcher.stdin
        rollouts(2, start=2)
        assert tracing.shutdown_tracing(30)
    assert TraceStore(trace_dir).count() == 4


def test_no_sidecar_is_started_early_for_backends_that_stay_here(trace_dir, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TRACE_SIDECAR", "0")
    with tracing.early_sidecar("local", trace_dir=str(trace_dir)):
        assert sidecar_process._spare is None


# ---- the wire ----
class Reply(BaseModel):
    text: str
    ids: list[int]


@dataclasses.dataclass
class Point:
    x: int
    y: float


class NoRepr:
    def __repr__(self):
        raise RuntimeError("no")


def a_function():
    pass


ODD_VALUES = [
    Reply(text="hi", ids=[1, 2]),
    Point(1, 2.5),
    np.arange(4),
    np.float32(1.5),
    {3, 1, 2},
    frozenset({"a"}),
    (1, "two", None),
    NoRepr(),
    Point,  # a class: its repr, never a reference the child would import
    a_function,
    os.environ.__class__,
    {"nested": [{"deeper": Reply(text="x", ids=[])}], 7: "int key"},
    "x" * 30_000,
    2**70,
    float("inf"),
    b"\xff\xfe bytes",
    SpanKind.TOOL,
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: type(v).__name__)
def test_what_the_wire_carries_shapes_like_the_original(value):
    shaper = PayloadShaper(Redactor(), 20_000)
    carried = wire.decode(wire.encode(value))
    assert shaper.shape(carried) == shaper.shape(value)


def test_spans_trajectories_and_call_arguments_cross_whole():
    t = Trajectory(
        project="p",
        experiment="e",
        step=3,
        sample_index=4,
        rollout_n=1,
        validate=True,
        agent_name="a",
        attributes={"k": "v"},
    )
    t.reward = 0.5
    t.finish()

    def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        pass

    args = CallArgs(Binder(generate), (object(), "r1"), {"prompt_ids": [1, 2], "sampling_params": {}, "x": 1})
    span = Span("llm.generate", SpanKind.LLM, t, t.id, args, {"gen_ai.usage.output_tokens": 2})
    span.finish({"token_ids": [3]})
    t2, s2 = wire.decode(wire.encode([t, span]))
    assert (t2.id, t2.step, t2.sample_index, t2.validate, t2.reward, t2.status, t2.end_ns) == (
        t.id,
        3,
        4,
        True,
        0.5,
        "ok",
        t.end_ns,
    )
    assert (s2.id, s2.trajectory_id, s2.parent_id, s2.kind, s2.start_ns, s2.end_ns) == (
        span.id,
        t.id,
        t.id,
        SpanKind.LLM,
        span.start_ns,
        span.end_ns,
    )
    assert s2.inputs == {"request_id": "r1", "prompt_ids": [1, 2], "sampling_params": {}, "kwargs": {"x": 1}}
    assert s2.outputs == {"token_ids": [3]}


def test_the_receiving_end_imports_nothing_it_was_not_built_for():
    class Evil:
        def __reduce__(self):
            return os.system, ("echo pwned",)

    with pytest.raises(pickle.UnpicklingError, match=r"refuses posix\.system"):
        wire.decode(pickle.dumps(Evil()))
    assert wire.decode(wire.encode(Evil())).startswith("<tests.tracing.test_sidecar")  # sent as its repr


def test_packed_events_come_back_in_order_whichever_way_they_were_packed():
    t = Trajectory(project="p", experiment="e", step=1, sample_index=0, rollout_n=0, validate=False, agent_name="a")
    plain = Span("plain", SpanKind.TOOL, t, t.id, {"ids": [1, 2, 3]})
    plain.finish({"text": "ok", "nan": float("nan")})
    rich = Span("rich", SpanKind.LLM, t, t.id, {"nested": [Reply(text="r", ids=[1])]})  # marshal refuses
    rich.finish(Reply(text="out", ids=[2]))
    cyclic = []
    cyclic.append(cyclic)
    loop = Span("cyclic", SpanKind.CUSTOM, t, t.id, {"loop": cyclic})
    loop.finish(None)
    # leaf spans (an LLM turn): one by marshal, one whose inputs marshal refuses (then pickled)
    leaf = (
        LEAF_SPAN,
        plain,
        "leaf",
        SpanKind.LLM,
        10,
        20,
        {"prompt_ids": [1]},
        Reply(text="t", ids=[3]),
        None,
        None,
        None,
    )
    rich_leaf = (
        LEAF_SPAN,
        t,
        "rich_leaf",
        SpanKind.LLM,
        30,
        40,
        {"r": Reply(text="i", ids=[])},
        {"ok": 1},
        None,
        None,
        None,
    )
    sent = [(0, t), plain, rich, (4, t.id, 0.5, {"why": "ok"}), loop, leaf, rich_leaf, (3, t)]
    records = [wire.pack(e) for e in sent]
    assert wire.join([]) == b""
    events = wire.unpack(wire.join(records))
    assert [e[0] if type(e) is tuple else e.name for e in events] == [
        0,
        "plain",
        "rich",
        4,
        "cyclic",
        "leaf",
        "rich_leaf",
        3,
    ]
    got_leaf, got_rich_leaf = events[5], events[6]
    assert (got_leaf.parent_id, got_leaf.trajectory_id, got_leaf.start_ns, got_leaf.end_ns) == (plain.id, t.id, 10, 20)
    assert (
        got_leaf.outputs == {"text": "t", "ids": [3]}
        and got_leaf.status == "ok"
        and got_leaf.id not in (plain.id, t.id)
    )
    assert got_rich_leaf.parent_id == t.id and got_rich_leaf.inputs["r"] == {"text": "i", "ids": []}
    shaper = PayloadShaper(Redactor(), 20_000)
    assert events[1].outputs["text"] == "ok" and shaper.shape(events[1].outputs)["nan"] == "nan"
    assert shaper.shape(events[2].inputs) == {"nested": [{"text": "r", "ids": [1]}]}
    assert events[2].outputs == {"text": "out", "ids": [2]}
    assert events[3] == (4, t.id, 0.5, {"why": "ok"})
    assert "<cycle: list>" in str(shaper.shape(events[4].inputs))  # a cycle: stored, cut where it repeats


def test_backlog_waits_while_the_machine_is_busy_and_drains_on_flush():
    """The decision, with the spare-CPU reading given (none, then a core): deterministic on any
    machine, however loaded."""
    from rollscope.tracing import _backlog as bl

    reading = [0.1]  # a tenth of a core to spare: the rollout keeps the machine busy
    checks = threading.Semaphore(0)

    def spare():
        checks.release()
        return reading[0]

    released = []
    b = bl.Backlog(lambda chunk, n: released.append(chunk), spare=spare, clock=lambda: 0.0)  # (time stands)
    for i in range(3):
        b.add(b"chunk%d" % i, 1)
    for _ in range(5):  # five checks of the load went by, each finding the machine busy
        assert checks.acquire(timeout=60)
    assert released == [] and b.events == 3
    b.drain()  # a flush
    assert released == [b"chunk0", b"chunk1", b"chunk2"] and b.events == 0
    b.add(b"later", 1)
    reading[0] = 1.0  # a core to spare (the rollout waits on its LLM, or works on one core of two)
    deadline = time.monotonic() + 60
    while not released[3:] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert released[3:] == [b"later"]
    b.close()


def test_a_busy_machine_holds_events_no_longer_than_the_hold():
    """A machine busy all run long (a trainer, an LLM engine beside the rollout) does not keep
    the traces in memory until the end, where a killed process would lose them: each chunk goes
    on once it has waited ``MAX_HOLD_S``, oldest first (the clock given: no test waits on time)."""
    from rollscope.tracing import _backlog as bl

    now, checks, released = [0.0], threading.Semaphore(0), []

    def busy():
        checks.release()
        return 0.0

    b = bl.Backlog(lambda chunk, n: released.append(chunk), spare=busy, clock=lambda: now[0])
    b.add(b"first", 1)
    now[0] = 1.0
    b.add(b"second", 1)
    now[0] = bl.MAX_HOLD_S - 0.01
    for _ in range(3):
        assert checks.acquire(timeout=60)
    assert released == [] and b.events == 2
    now[0] = bl.MAX_HOLD_S  # the first has waited the hold, the second not yet
    deadline = time.monotonic() + 60
    while not released and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(3):
        assert checks.acquire(timeout=60)
    assert released == [b"first"] and b.events == 1
    now[0] = 1.0 + bl.MAX_HOLD_S
    deadline = time.monotonic() + 60
    while len(released) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert released == [b"first", b"second"] and b.events == 0
    b.close()


def test_spare_cpu_reads_between_none_and_all_of_the_machines_cores(tmp_path):
    """Read while this process works (its own share counts as spare: it is what it would give
    back); an unreadable /proc/stat is an unknown reading, never an error."""
    from rollscope.tracing._backlog import SpareCpu

    spare = SpareCpu()
    start = time.process_time()
    while time.process_time() - start < 0.3:  # this process works
        pass
    cores = spare.cores()
    assert cores is not None and 0.0 <= cores <= os.cpu_count() + 0.5
    assert SpareCpu(str(tmp_path / "missing")).cores() is None


def test_backlog_stays_bounded_however_busy_the_machine():
    from rollscope.tracing import _backlog as bl

    bounded = []
    b = bl.Backlog(lambda chunk, n: bounded.append(chunk), max_bytes=10, spare=lambda: 0.0)  # always busy
    for chunk in (b"12345678", b"abcdefgh", b"ABCDEFGH"):
        b.add(chunk, 1)
    assert bounded == [b"12345678", b"abcdefgh"] and b.bytes == 8  # the oldest went on at once
    b.close()
    assert bounded[-1] == b"ABCDEFGH"


_HUNG_FLUSH = """
import os, sys
from rollscope import tracing
import tests.tracing.spool_backends  # (the sidecar's ledger)
tracing.init_tracing(backend="local,sidecar-ledger", trace_dir=sys.argv[1], ledger_path=sys.argv[2])
for i in range(20):
    with tracing.rollout_trace_attr(step=0, sample_index=i), tracing.trace_span("llm.generate", kind="llm"):
        pass
print("flushed", tracing.flush_tracing(1.0), flush=True)  # the sidecar is left waiting on its server
os._exit(0)  # and its traced process is gone, without a close
"""


def test_a_sidecar_whose_backend_hangs_in_a_flush_exits_within_its_bound_and_says_what_is_left(tmp_path):
    """A server that never answers a flush: the sidecar cannot even read that its traced process is
    gone. It still exits ROLLSCOPE_SIDECAR_ORPHAN_S (+ a grace of 5 s) after that process ended,
    saying how many events it did not deliver and where the spooled ones wait."""
    lock = tmp_path / "sidecars.lock"
    env = {
        **os.environ,
        "ROLLSCOPE_TEST_LEDGER_GATE": str(tmp_path / "never"),
        lease.ENV: str(lock),
        "ROLLSCOPE_SIDECAR_ORPHAN_S": "2",
        "PYTHONPATH": os.getcwd(),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _HUNG_FLUSH, str(tmp_path / "traces"), str(tmp_path / "ledger")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)  # (returns once the sidecar, holding its stderr, has exited)
    assert "flushed False" in out
    assert lease.wait_released(lock, 0)
    assert "ended 2 s ago and a backend has not finished" in err
    assert "not confirmed delivered: {'sidecar-ledger': " in err and "'local'" not in err.split("delivered:")[1]
    assert TraceStore(tmp_path / "traces").count() == 20  # the local store's copy was whole


def test_a_huge_string_is_cut_before_it_crosses_to_the_sidecar_and_stored_as_if_whole(trace_dir):
    """A 6 MB traced string: the record piped to the sidecar is cut to what the sidecar keeps (its
    max_payload_chars and a margin), and what is stored is what shaping the whole string stores:
    the secret near its start redacted, the truncation counting every character of the whole."""
    from rollscope.tracing._payload import PayloadShaper
    from rollscope.tracing._redaction import Redactor
    from rollscope.tracing._wire import CUT_MARGIN_CHARS, CutText, _cut

    tracing.init_tracing(trace_dir=str(trace_dir), max_payload_chars=1000)
    worker = the_sidecar()
    secret = "AKIA" + "Q" * 16
    huge = "x" * 990 + f" key={secret} " + "y" * (6 << 20)
    piped = []
    send = worker.sender._send_frame

    def measured(kind, body=b""):  # (the frames this process pipes, measured as they are written)
        piped.append(len(body))
        return send(kind, body)

    try:
        worker.sender._send_frame = measured
        with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("big", inputs={"text": huge}):
            pass
        assert tracing.flush_tracing(60)
    finally:
        tracing.shutdown_tracing()
    assert _cut.chars == 1000 + CUT_MARGIN_CHARS and issubclass(CutText, str)
    assert piped and max(piped) < 64 << 10, piped  # (the whole would be a 6 MB frame)
    [t] = TraceStore(trace_dir).trajectories()
    [span] = TraceStore(trace_dir).get(t.id).spans
    text = span.inputs["text"]
    assert secret not in text and text.startswith("x" * 990)
    assert text == PayloadShaper(Redactor(), 1000).shape(huge)
