"""The sidecar process: reads the traced process's frames, holds its events in a ``Backlog`` until
the traced process leaves the CPU idle, shapes them and runs the backends; reports flushes, stats
and the positions its backends made durable. Started by ``process.SidecarProcess``.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import struct
import sys
import threading
import time
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._backlog import DEFAULT_MAX_BYTES, Backlog
from rollscope.tracing._events import position
from rollscope.tracing._exporter import Exporter
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

# The sidecar's work can wait (its queues are unbounded for the local store); the rollout's cannot.
SIDECAR_NICE = 10


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


def main() -> None:
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
    frame = read_frame(fd_in)
    if frame is None or frame[0] != CONFIG:
        return
    config = pickle.loads(frame[1])
    sys.path[:] = config["sys_path"]
    try:
        shaper = shaper_for(config)
        exporter = Exporter([worker_for(config, path, options) for _, path, options in config["backends"]], shaper)
    except Exception as exc:
        send(FAILED, wire.encode((type(exc).__name__, str(exc))))
        return
    max_mb = float(os.environ.get("ROLLSCOPE_SIDECAR_BACKLOG_MB", DEFAULT_MAX_BYTES / 2**20))
    received = [0]

    def release(chunk: bytes, count: int) -> None:  # in order: the chunk's last event is number received
        received[0] += count
        exporter.submit_many([*wire.unpack(chunk), position(received[0])])

    backlog = Backlog(release, os.getppid(), int(max_mb * 2**20))

    def stats() -> dict[str, Any]:
        out = exporter.stats()["backends"]
        for s in out.values():
            s["queued"] += backlog.events
        return out

    def positions() -> dict[str, int]:
        return {w.name: w.position for w in exporter.workers}

    def report_positions() -> None:
        last: dict[str, int] = {}
        while True:
            time.sleep(POSITIONS_INTERVAL_S)
            now = positions()
            if now != last:
                send(POSITIONS, wire.encode(now))
                last = now

    send(READY, wire.encode({w.name: w.backend.resume_options() for w in exporter.workers}))
    threading.Thread(target=report_positions, name="rollscope-positions", daemon=True).start()
    while True:
        frame = read_frame(fd_in)
        if frame is None:  # the traced process is gone: keep what it sent
            backlog.close()
            exporter.close(30.0)
            return
        kind, body = frame
        if kind == EVENTS:
            backlog.add(body[4:], struct.unpack_from("<I", body)[0])
        elif kind == FLUSH:
            backlog.drain()
            exporter.flush(None)
            send(FLUSHED, wire.encode((struct.unpack("<Q", body)[0], stats(), positions())))
        elif kind == SECRETS:
            if shaper is not None:
                shaper.shaper.redactor.add_literals(wire.decode(body))
        elif kind == CLOSE:
            backlog.close()
            ok = exporter.close(None)
            send(CLOSED, wire.encode((ok, stats())))
            return
