"""Backend registry and fan-out: slow and failing backends never stall rollouts or the local store."""

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing.backends import TraceBackend, available_backends, register_backend
from rollscope.tracing.backends.base import Delivery


class MemoryBackend(TraceBackend):
    """Keeps the events it receives in a list: a complete backend, used to observe the fan-out."""

    name = "memory"
    options = frozenset({"label"})
    delivery = Delivery(span_starts=True)

    def __init__(self, *, project=None, experiment=None, label=""):
        super().__init__(project=project, experiment=experiment)
        self.label = label
        self.events = []
        self.closed = False

    def on_trajectory_start(self, trajectory):
        self.events.append(("traj_start", trajectory.id))

    def on_span_start(self, span):
        self.events.append(("span_start", span.name))

    def on_span_end(self, span):
        self.events.append(("span_end", span.name, span.outputs))

    def on_trajectory_end(self, trajectory):
        self.events.append(("traj_end", trajectory.id, trajectory.status))

    def close(self):
        self.closed = True


class StuckBackend(TraceBackend):
    """A remote backend whose server hangs: every call blocks until released."""

    name = "stuck"
    release = threading.Event()
    delivery = Delivery(batch=64)

    def on_span_end(self, span):
        self.release.wait(30)


class RaisingBackend(TraceBackend):
    name = "raising"

    def on_span_end(self, span):
        raise ConnectionError("collector refused the connection")


@pytest.fixture(autouse=True)
def _register():
    for cls in (MemoryBackend, StuckBackend, RaisingBackend):
        register_backend(cls.name, cls)


def _rollouts(n, spans=3):
    for i in range(n):
        with tracing.rollout_trace_attr(step=0, sample_index=i):
            for j in range(spans):
                with tracing.trace_span(f"s{j}") as s:
                    s.outputs = j


def test_events_arrive_in_order_with_options(trace_dir):
    tracer = tracing.init_tracing(backend="local,memory", trace_dir=str(trace_dir), label="x")
    memory = next(b for b in tracer.backends if b.name == "memory")  # local runs in the sidecar
    _rollouts(2, spans=1)
    assert tracing.flush_tracing()
    assert memory.label == "x"
    kinds = [e[0] for e in memory.events]
    assert kinds == ["traj_start", "span_start", "span_end", "traj_end"] * 2
    assert memory.events[2] == ("span_end", "s0", 0)
    tracing.shutdown_tracing()
    assert memory.closed


def test_unknown_backend_and_unknown_option_are_clear_errors(trace_dir):
    with pytest.raises(ValueError, match=r"unknown trace backend 'nope'; available: .*local"):
        tracing.init_tracing(backend="local,nope", trace_dir=str(trace_dir))
    with pytest.raises(ValueError, match=r"trace option\(s\) colour not accepted by backend\(s\) local"):
        tracing.init_tracing(backend="local", trace_dir=str(trace_dir), colour="red")
    assert {"local", "none"} <= set(available_backends())


def test_stuck_backend_waits_on_disk_local_keeps_everything(trace_dir):
    StuckBackend.release.clear()
    tracing.init_tracing(backend="local,stuck", trace_dir=str(trace_dir), max_queue=50)
    _rollouts(600)
    assert tracing.flush_tracing(timeout=0.5) is False  # the stuck backend cannot confirm
    deadline = time.monotonic() + 30
    while TraceStore(trace_dir).count(status="ok") < 600 and time.monotonic() < deadline:
        time.sleep(0.05)
    store = TraceStore(trace_dir)
    assert store.count(status="ok") == 600
    assert sum(t.num_spans for t in store.trajectories()) == 1800
    st = tracing.stats()["backends"]
    assert st["local"]["dropped"] == 0
    assert st["stuck"]["dropped"] == 0 and st["stuck"]["spooled"] > 0 and st["stuck"]["lossless"] is True
    StuckBackend.release.set()
    tracing.shutdown_tracing(timeout=10)


def test_raising_backend_errors_counted_rollout_unaffected(trace_dir):
    tracing.init_tracing(backend="raising,local", trace_dir=str(trace_dir))
    _rollouts(10)
    assert tracing.flush_tracing()
    st = tracing.stats()["backends"]
    assert st["raising"]["errors"] == 30
    assert st["local"]["errors"] == 0
    assert TraceStore(trace_dir).count() == 10


def test_none_backend_keeps_nothing(tmp_path):
    tracing.init_tracing(backend="none")
    _rollouts(3)
    assert tracing.flush_tracing()
    # trajectory start and end plus span ends; span starts are not emitted when no backend wants them
    assert tracing.stats()["backends"]["none"]["exported"] == 3 * (2 + 3)


@pytest.mark.slow
def test_third_party_backend_through_entry_point(tmp_path):
    """A package that declares ``rollscope.trace_backends`` is found by name, nothing else to do."""
    site = tmp_path / "site"
    (site / "acme_backend-1.0.dist-info").mkdir(parents=True)
    (site / "acme_backend-1.0.dist-info" / "METADATA").write_text("Name: acme-backend\nVersion: 1.0\n")
    (site / "acme_backend-1.0.dist-info" / "entry_points.txt").write_text(
        "[rollscope.trace_backends]\nacme = acme_backend:AcmeBackend\n"
    )
    (site / "acme_backend.py").write_text(
        textwrap.dedent(
            """
            from rollscope.tracing import TraceBackend

            class AcmeBackend(TraceBackend):
                name = "acme"
                def on_span_end(self, span):
                    print("ACME", span.name, span.outputs, flush=True)
            """
        )
    )
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from rollscope import tracing
        assert "acme" in tracing.available_backends()
        tracing.init_tracing(backend="acme")
        with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("hello") as s:
            s.outputs = 42
        tracing.shutdown_tracing()
        """
    )
    out = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ACME hello 42" in out.stdout


def test_a_row_sqlite_refuses_costs_that_row_only(trace_dir):
    """A span no shaping made safe (its name holds a lone surrogate, given to the backend as is):
    SQLite refuses its row; the batch's other rows are stored, the refused one counted."""
    from rollscope.tracing.backends.local import LocalBackend
    from rollscope.tracing.spans import Span, SpanKind, Trajectory

    backend = LocalBackend(trace_dir=trace_dir)
    t = Trajectory(
        project=None, experiment=None, step=0, sample_index=0, rollout_n=0, validate=False, agent_name="agent"
    )
    backend.on_trajectory_start(t)
    for name in ("first", "bad \ud800", "third"):
        span = Span(name, SpanKind.TOOL, t, t.id, {"q": 1})
        span.finish({"a": 2})
        backend.on_span_end(span)
    t.finish()
    backend.on_trajectory_end(t)
    with pytest.raises(UnicodeEncodeError):
        backend.flush()  # said (the exporter counts and reports it), and nothing else lost
    backend.close()
    counts = backend.counts()
    assert (counts["stored_spans"], counts["refused_rows"], counts["stored_trajectories"]) == (2, 1, 1)
    assert counts["dropped"] == 1
    [stored] = TraceStore(trace_dir).trajectories()
    assert sorted(s.name for s in stored.spans) == ["first", "third"]
