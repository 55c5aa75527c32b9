"""The parent's parts, each on its own, without a sidecar process: the greeting (``process.greet``)
over a pipe, the ``Sender`` writing frames into a pipe this test reads, and the ``Failover``
continuing a local store or starting a backend afresh. tests/tracing/test_sidecar.py kills real
sidecar processes; these pin down each part's own rule."""

import os
import struct
import threading

import pytest

from rollscope.store import TraceStore
from rollscope.tracing import _events as ev
from rollscope.tracing import _wire as wire
from rollscope.tracing._exporter import Marker
from rollscope.tracing._redaction import secret_env_values
from rollscope.tracing._runtime import Tracer
from rollscope.tracing._sidecar.failover import Failover
from rollscope.tracing._sidecar.process import SidecarError, greet
from rollscope.tracing._sidecar.protocol import (
    CONFIG,
    EVENTS,
    FAILED,
    FLUSH,
    READY,
    read_frame,
    read_frame_timeout,
    shaper_for,
    worker_for,
    write_frame,
)
from rollscope.tracing._sidecar.replay_log import ReplayLog
from rollscope.tracing._sidecar.sender import Sender
from rollscope.tracing.spans import Span, SpanKind

LOCAL = ("local", "rollscope.tracing.backends.local:LocalBackend")
LEDGER = ("ledger", "tests.tracing.spool_backends:LedgerBackend")


def config_for(*backends):
    return {
        "backends": list(backends),
        "settings": {"project": None, "experiment": "parts"},
        "max_payload_chars": None,
        "redact_patterns": [],
        "max_queue": 1000,
        "shaped": False,
    }


def trajectories(tmp_path, samples):
    """Each trajectory's events as rollscope's tracer makes them (start, one span, reward, end)."""
    tracer = Tracer(backend="local", trace_dir=str(tmp_path / "maker"), sidecar=False)
    made: list = []
    tracer.submit = made.append
    out = []
    for i in samples:
        t = tracer.open_trajectory(step=1, sample_index=i, rollout_n=0)
        span = Span("llm.generate", SpanKind.LLM, t, None, {"prompt_ids": [1, 2]}, None)
        tracer.end_span(span, {"token_ids": [3]})
        tracer.reward(t.id, 1.0, {})
        tracer.close_trajectory(t)
        out.append(made[:])
        made.clear()
    tracer.close(10)
    return out


def next_frame(fd):
    frame = read_frame_timeout(fd, 60)
    assert frame is not None, "the sender wrote nothing"
    return frame


def frame_of(events):
    return wire.join([wire.pack(e) for e in events])


def stored_samples(trace_dir):
    with TraceStore(trace_dir) as store:
        return sorted(t.sample_index for t in store.trajectories(limit=1000))


# ---- process.greet ----
def answering(in_fd, out_fd, kind, body):
    """The child's side of the greeting, written here: read CONFIG, answer with one frame."""
    got = []

    def answer():
        got.append(read_frame(in_fd))
        if kind is not None:
            write_frame(out_fd, kind, body)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return got, thread


def _close(*fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    _close(r, w)


@pytest.fixture
def pipes():
    to_child, from_child = os.pipe(), os.pipe()
    yield to_child, from_child
    _close(*to_child, *from_child)


def test_the_greeting_returns_each_backends_resume_options(pipes):
    (child_in, parent_out), (parent_in, child_out) = pipes
    got, thread = answering(child_in, child_out, READY, wire.encode({"local": {"resume_shard": "s.db"}}))
    assert greet(parent_out, parent_in, {"backends": []}) == {"local": {"resume_shard": "s.db"}}
    thread.join(5)
    assert got[0][0] == CONFIG


@pytest.mark.parametrize(
    ("answer", "raised", "said"),
    [
        ((FAILED, wire.encode(("OSError", "cannot create /traces"))), OSError, "cannot create /traces"),
        ((FAILED, wire.encode(("TypeError", "unknown option"))), ValueError, "unknown option"),
        ((EVENTS, b""), SidecarError, "unexpected first frame"),
        ((None, b""), SidecarError, "no greeting"),
    ],
)
def test_a_greeting_gone_wrong_is_one_clear_error(pipes, answer, raised, said):
    (child_in, parent_out), (parent_in, child_out) = pipes
    answering(child_in, child_out, *answer)
    silent = answer[0] is None  # waited out in full: a short wait; the others answer at once
    with pytest.raises(raised, match=said):
        greet(parent_out, parent_in, {"backends": []}, timeout=0.5 if silent else 60.0)


# ---- Sender ----
def test_events_go_out_numbered_and_a_flush_returns_when_the_child_passed_it(tmp_path, pipe):
    r, w = pipe
    failover = Failover(config_for((*LOCAL, {"trace_dir": str(tmp_path / "t")})), {"local": {"resume_shard": "s"}}, 0)
    sender = Sender(
        lambda kind, body: write_frame(w, kind, body), failover, keep_for_replay=True, secrets=secret_env_values()
    )
    events = [e for t in trajectories(tmp_path, range(3)) for e in t]
    marker = Marker(1)
    sender.submit([*events, ev.flush(marker)])

    kind, body = next_frame(r)
    assert kind == EVENTS and struct.unpack_from("<I", body)[0] == len(events) == sender.sent
    sent = wire.unpack(body[4:])
    assert [type(e) for e in sent] == [type(e) for e in events]
    assert [e[ev.KIND] for e in sent if type(e) is tuple] == [e[ev.KIND] for e in events if type(e) is tuple]
    kind, body = next_frame(r)
    assert kind == FLUSH and struct.unpack("<Q", body) == (1,)
    assert not marker.done.wait(0.2)  # the child has not said it passed it
    sender.flushed(1)
    assert marker.done.is_set()

    assert sender.replay.bytes > 0  # kept until the continuable store reports it stored
    sender.stored({"local": len(events) - 1})
    assert sender.replay.bytes > 0
    sender.stored({"local": len(events)})
    assert sender.replay.bytes == 0
    sender.stop()
    sender.join(5)


def test_when_the_child_is_gone_its_flushes_return_and_what_follows_goes_to_the_failover(tmp_path, pipe):
    r, w = pipe
    store = tmp_path / "t"
    failover = Failover(config_for((*LOCAL, {"trace_dir": str(store)})), {"local": None}, 0)
    sender = Sender(
        lambda kind, body: write_frame(w, kind, body), failover, keep_for_replay=False, secrets=secret_env_values()
    )
    before, after = trajectories(tmp_path, range(2)), trajectories(tmp_path, range(2, 5))
    waiting = Marker(1)
    sender.submit([*before[0], *before[1], ev.flush(waiting)])
    assert next_frame(r)[0] == EVENTS and next_frame(r)[0] == FLUSH
    sender.stored({"local": len(before[0])})  # the child flushed the first trajectory, then died

    sender.child_gone("a test said so")
    assert waiting.done.is_set() and failover.active
    assert failover.lost == {"local": len(before[1])}  # sent, never reported flushed: counted exactly
    done = Marker(1)
    sender.submit([*(e for t in after for e in t), ev.flush(done)])
    assert done.done.wait(30)
    assert failover.close(30)
    assert stored_samples(store) == [2, 3, 4]


def test_a_batch_the_child_never_read_is_not_lost(tmp_path, pipe):
    r, w = pipe
    os.close(r)  # the child's end closes: the next write fails
    store = tmp_path / "t"
    failover = Failover(config_for((*LOCAL, {"trace_dir": str(store)})), {"local": None}, 0)
    sender = Sender(
        lambda kind, body: write_frame(w, kind, body), failover, keep_for_replay=False, secrets=secret_env_values()
    )
    done = Marker(1)
    sender.submit([*(e for t in trajectories(tmp_path, range(4)) for e in t), ev.flush(done)])
    assert done.done.wait(30)
    assert failover.active and failover.lost == {"local": 0}
    assert failover.close(30)
    assert stored_samples(store) == [0, 1, 2, 3]


# ---- Failover ----
def a_child_that_stored(config, first_frames):
    """What the sidecar's local store did before it died: stored ``first_frames`` and committed
    their position. Its thread is stopped without closing the store, as a kill leaves it."""
    worker = worker_for(config, *config["backends"][0][1:])
    shape = shaper_for(config)
    received = 0
    for body in first_frames:
        events = wire.unpack(body)
        received += len(events)
        worker.submit([*(shape(e) for e in events), ev.position(received)])
    marker = Marker(1)
    worker.submit([ev.flush(marker)])
    assert marker.done.wait(30)
    worker.stop()
    worker.thread.join(10)
    return worker.backend.resume_options(), received


@pytest.mark.parametrize("kept", ["everything since", "only the last frame"])
def test_a_continued_store_gets_what_the_log_kept_after_its_position_and_counts_the_rest(tmp_path, kept):
    store = tmp_path / "t"
    config = config_for((*LOCAL, {"trace_dir": str(store)}))
    frames = [frame_of([e for t in trajectories(tmp_path, range(i * 2, i * 2 + 2)) for e in t]) for i in range(3)]
    resume, position = a_child_that_stored(config, frames[:1])
    replay = ReplayLog(wire.unpack, max_bytes=None if kept == "everything since" else len(frames[2]))
    numbered, first = [], 0
    for body in frames:
        end = first + len(wire.unpack(body))
        replay.keep(first, end, body)
        numbered.append((first, end))
        first = end
    replay.stored(position)

    failover = Failover(config, {"local": resume}, 0)
    failover.take_over("a test said so", first, {"local": position}, replay)
    marker = Marker(1)
    failover.flush(marker)
    assert marker.done.wait(30) and failover.close(30)
    if kept == "everything since":
        assert failover.lost == {"local": 0} and stored_samples(store) == [0, 1, 2, 3, 4, 5]
    else:  # the middle frame was let go before the child died: its events are the loss, exactly
        assert failover.lost == {"local": numbered[1][1] - numbered[1][0]}
        assert stored_samples(store) == [0, 1, 4, 5]
    with TraceStore(store) as read:
        assert len(read.shards()) == 1  # the child's shard, continued


def test_a_backend_that_cannot_be_continued_starts_afresh_and_counts_what_it_missed(tmp_path):
    ledger = tmp_path / "sent"
    failover = Failover(config_for((*LEDGER, {"ledger_path": str(ledger)})), {"ledger": None}, 0)
    failover.take_over("a test said so", 10, {"ledger": 4}, ReplayLog(wire.unpack))
    assert failover.lost == {"ledger": 6} and failover.resumed == set()
    failover.submit([e for t in trajectories(tmp_path, [7]) for e in t])
    marker = Marker(1)
    failover.flush(marker)
    assert marker.done.wait(30) and failover.close(30)
    assert len(ledger.read_text().split()) == 1
