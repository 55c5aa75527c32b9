"""The sidecar process: reads the traced process's frames, holds its events in a ``Backlog`` until
the machine has a core to spare, shapes them and runs the backends; reports flushes, stats
and the positions its backends made durable. Started by ``process.SidecarProcess``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._backlog import DEFAULT_MAX_BYTES, Backlog
from rollscope.tracing._events import position
from rollscope.tracing._exporter import Exporter
from rollscope.tracing._redaction import Redactor
from rollscope.tracing._sidecar import lease
from rollscope.tracing._sidecar.protocol import (
    CLOSE,
    CLOSED,
    CONFIG,
    EVENTS,
    FAILED,
    FLUSH,
    FLUSHED,
    LOG,
    POSITIONS,
    POSITIONS_INTERVAL_S,
    READY,
    SECRETS,
    read_frame,
    shaper_for,
    worker_for,
    write_frame,
)
from rollscope.tracing.backends.base import Resumable

# The sidecar's work can wait (its queues are unbounded for the local store); the rollout's cannot.
SIDECAR_NICE = 10
# The sidecar makes and drops millions of small containers (events, payloads), almost none in a
# cycle, while its queues hold many thousands alive (a frame unpacked at once: tens of thousands of
# events): a young generation scanned every 700 allocations (Python's default), or every 50,000,
# is the same events scanned over and over (a third of its CPU in bench_store's ingest at 700, a
# sixth at 50,000). What a cycle could leave uncollected stays bounded by the threshold.
GC_THRESHOLDS = (500_000, 50, 100)
# How long the sidecar goes on once its traced process stopped waiting for it (it ended, or its
# close timed out): what a remote backend has not sent by then stays in its spool, for the next
# tracer sending to the same destination.
ORPHAN_S = float(os.environ.get("ROLLSCOPE_SIDECAR_ORPHAN_S") or 30.0)
# What a spare (``main(warm=True)``) imports while it waits: the local store's backend, and the chat
# template renderer that the first llm span's retokenization check needs (transformers' utilities:
# ~0.6 s, the longest wait of a short run's last flush before).
WARM_IMPORTS = ("rollscope.tracing.backends.local", "transformers.utils.chat_template_utils")
# Past ORPHAN_S, a backend still not done (one whose server hangs in a flush) is given this long to
# notice, then the sidecar exits anyway: every wait of it is bounded, whatever its backends do.
EXIT_GRACE_S = 5.0


class _FrameLogHandler(logging.Handler):
    """The child's warnings (a full disk, a failing backend) go to the traced process's logger."""

    def __init__(self, send: Any) -> None:
        super().__init__(logging.WARNING)
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.send(LOG, wire.encode((record.levelno, record.getMessage())))
        except Exception:
            pass


def detach() -> None:
    """Leave the process that started this one (it exits, and this one goes on in a session of
    its own): the sidecar is then nobody's child and in nobody's process group. A process manager
    that ends the traced process with its children and their group (Ray ends a worker so at the
    end of a run) leaves the sidecar to store what it was sent; it exits once that is done."""
    if os.fork():
        os._exit(0)
    os.setsid()


def main(warm: bool = False) -> None:
    """The sidecar process's entry (started by ``process.SidecarProcess``): frames come in on
    stdin, replies go out on a private copy of stdout. ``warm`` (a spare, ``process.prestart``):
    the secret rules start loading and the local store's modules are imported while the
    configuration is still to come."""
    traced = os.getppid()  # (before it leaves: then the traced process is no longer its parent)
    detach()
    lease.hold()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "nice"):
        os.nice(SIDECAR_NICE)
    fd_in = 0
    fd_out = os.dup(1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    lock = threading.Lock()

    def send(kind: int, body: bytes = b"") -> None:
        with lock:
            write_frame(fd_out, kind, body)

    root = logging.getLogger("rollscope")
    root.addHandler(_FrameLogHandler(send))
    root.propagate = False
    if warm:  # (in the order a redactor loads them: detect-secrets is imported by one thread at a time)
        Redactor(include_environment=False)
        for module in WARM_IMPORTS:
            with contextlib.suppress(ImportError):  # (the light install has no transformers)
                importlib.import_module(module)
    frame = read_frame(fd_in)
    if frame is None or frame[0] != CONFIG:
        return
    config = pickle.loads(frame[1])
    sys.path[:] = config["sys_path"]
    try:
        sidecar = Sidecar(config, send)
    except Exception as exc:
        send(FAILED, wire.encode((type(exc).__name__, str(exc))))
        return
    gc.freeze()  # what the imports and the backends' setup made lives as long as the sidecar
    gc.set_threshold(*GC_THRESHOLDS)
    threading.Thread(target=sidecar.exit_in_time, args=(traced,), name="rollscope-exit-bound", daemon=True).start()
    sidecar.serve(fd_in)


def _wait_for_exit(pid: int) -> None:
    """Return once process ``pid`` has ended (a pidfd where the kernel has them, else polling)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])
        os.close(fd)
        return
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(1.0)


class Sidecar:
    """The backends the traced process sent the config of, behind a ``Backlog``; ``serve`` answers
    its frames until it closes the sidecar or goes away."""

    def __init__(self, config: dict[str, Any], send: Callable[..., None]) -> None:
        self.send = send
        self.shaper = shaper_for(config)
        backends = [worker_for(config, path, options) for _, path, options in config["backends"]]
        self.exporter = Exporter(backends, self.shaper)
        max_mb = float(os.environ.get("ROLLSCOPE_SIDECAR_BACKLOG_MB", DEFAULT_MAX_BYTES / 2**20))
        self.received = 0
        self.backlog = Backlog(self._release, int(max_mb * 2**20))

    def _release(self, chunk: bytes, count: int) -> None:
        """In order: the chunk's last event is number ``received``, which the stores commit with it."""
        self.received += count
        self.exporter.submit_many([*wire.unpack(chunk), position(self.received)])

    def stats(self) -> dict[str, Any]:
        out = self.exporter.stats()["backends"]
        for s in out.values():
            s["queued"] += self.backlog.events
        return out

    def exit_in_time(self, traced: int) -> None:
        """Once the traced process has ended, the sidecar has ORPHAN_S (and EXIT_GRACE_S) to finish;
        if a backend still holds it then (its server hangs in a flush: ``serve`` cannot even read
        that its process is gone), it says what it could not deliver and exits. What a remote
        backend had spooled stays in its spool for the next tracer sending to the same destination;
        what was only in memory is counted as lost."""
        _wait_for_exit(traced)
        time.sleep(ORPHAN_S + EXIT_GRACE_S)
        # events received and not confirmed by a backend's flush (its position), the backlog's too
        received = self.received + self.backlog.events
        undelivered = {w.name: received - w.position for w in self.exporter.workers if received > w.position}
        spooled = {w.name: str(w.spool.own.path) for w in self.exporter.workers if w.spool is not None}
        message = (
            f"rollscope trace sidecar {os.getpid()}: its traced process {traced} ended {ORPHAN_S:g} s ago "
            f"and a backend has not finished; exiting with events not confirmed delivered: {undelivered}"
            + (f"; what was spooled stays in {spooled} for the next tracer of that destination" if spooled else "")
        )
        with contextlib.suppress(OSError):
            os.write(2, (message + "\n").encode())
        os._exit(3)

    def positions(self) -> dict[str, int]:
        return {w.name: w.position for w in self.exporter.workers}

    def _report_positions(self) -> None:
        last: dict[str, int] = {}
        while True:
            time.sleep(POSITIONS_INTERVAL_S)
            now = self.positions()
            if now != last:
                self.send(POSITIONS, wire.encode(now))
                last = now

    def serve(self, fd_in: int) -> None:
        resume = {w.name: w.backend.resume_options() for w in self.exporter.workers if isinstance(w.backend, Resumable)}
        self.send(READY, wire.encode((os.getpid(), resume)))
        threading.Thread(target=self._report_positions, name="rollscope-positions", daemon=True).start()
        while True:
            frame = read_frame(fd_in)
            if frame is None:  # the traced process is gone: keep what it sent
                self.backlog.close()
                self.exporter.close(ORPHAN_S)
                return
            kind, body = frame
            if kind == EVENTS:
                self.backlog.add(body[4:], struct.unpack_from("<I", body)[0])
            elif kind == FLUSH:
                self.backlog.drain()
                self.exporter.flush(None)
                self.send(FLUSHED, wire.encode((struct.unpack("<Q", body)[0], self.stats(), self.positions())))
            elif kind == SECRETS:
                if self.shaper is not None:
                    self.shaper.shaper.redactor.add_literals(wire.decode(body))
            elif kind == CLOSE:  # within the traced process's timeout, else on its own for ORPHAN_S more
                waits = wire.decode(body)
                self.backlog.close()
                ok = self.exporter.close(None if waits is None else waits + ORPHAN_S)
                self.send(CLOSED, wire.encode((ok, self.stats())))
                return
