"""The traced process's end of the trace sidecar: ``SidecarWorker`` stands where a backend's worker
would. It starts the child (``process``), hands events to the ``sender``, reads the child's reports,
and when the child dies lets the ``failover`` run its backends here (see the package's docstring).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._exporter import time_left
from rollscope.tracing._sidecar.failover import Failover
from rollscope.tracing._sidecar.process import SidecarProcess
from rollscope.tracing._sidecar.protocol import CLOSE, CLOSED, FLUSHED, LOG, POSITIONS
from rollscope.tracing._sidecar.sender import Sender

log = logging.getLogger("rollscope.tracing")


class SidecarWorker:
    """The worker the Exporter sees for the backends the sidecar runs: ``pack`` (called where each
    event ends), ``submit``, ``stop``, ``close``, ``stats``."""

    def __init__(self, config: dict[str, Any], shaped: bool) -> None:
        # config: backends [(name, "module:Class", options)], settings, max_payload_chars,
        # redact_patterns, max_queue; shaped: the traced process shapes events itself.
        # sys.path too: a backend class the application made importable at run time (the runner
        # adds a config's folder) must import in the child as well.
        self.config = {**config, "shaped": shaped, "sys_path": list(sys.path)}
        self.names = [name for name, _, _ in config["backends"]]
        self.process = SidecarProcess(self.config)
        self.failover = Failover(self.config, self.process.resume, self.process.pid)
        wire.cut_before_crossing(config.get("max_payload_chars"))  # (what the sidecar would cut is not piped)
        self.sender = Sender(
            self.process.send,
            self.failover,
            keep_for_replay=any(self.process.resume.values()),
            secrets=self.process.secrets,
        )
        self.pack = self.sender.pack
        self._child_stats: dict[str, dict[str, Any]] = {}
        self._closing = False
        self._closed = threading.Event()
        self._close_ok = False
        self._reader = threading.Thread(target=self._read, name="rollscope-sidecar-read", daemon=True)
        self._reader.start()

    def submit(self, events: list) -> None:
        self.sender.submit(events)

    def stop(self) -> None:
        self.sender.stop()

    def close(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.sender.join(time_left(deadline))
        if self.failover.active:
            return self.failover.close(time_left(deadline))
        self._closing = True
        try:
            self.process.send(CLOSE, wire.encode(time_left(deadline)))
        except OSError:
            pass
        ok = self._closed.wait(time_left(deadline)) and self._close_ok
        return self.process.leave(max(time_left(deadline) or 0.0, 1.0)) and ok

    def abandon(self) -> None:
        self.process.abandon()

    def stats(self) -> dict[str, dict[str, Any]]:
        if self.failover.active:
            out = self.failover.stats()
        else:
            out = {n: dict(self._child_stats.get(n, _EMPTY_STATS)) for n in self.names}
        queued = self.sender.queued()
        errors = self.sender.errors + self.failover.errors
        for name, s in out.items():
            s["queued"] += queued
            s["dropped"] += self.failover.lost.get(name, 0)
            s["errors"] += errors
            s["lossless"] = s["lossless"] and s["dropped"] == 0
        return out

    def _read(self) -> None:
        """The child's reports, until it closes (asked to) or dies (then its backends come here)."""
        for kind, body in self.process.frames():
            if kind == LOG:
                level, message = wire.decode(body)
                log.log(level, "trace sidecar: %s", message)
            elif kind == POSITIONS:
                self.sender.stored(wire.decode(body))
            elif kind == FLUSHED:
                flush_id, stats, positions = wire.decode(body)
                self.sender.stored(positions)
                self._child_stats = stats  # before the flush returns: its caller reads them next
                self.sender.flushed(flush_id)
            elif kind == CLOSED:
                self._close_ok, self._child_stats = wire.decode(body)
                break
        if self._closing:
            self._closed.set()
        else:
            self.sender.child_gone("it exited")


_EMPTY_STATS = {"exported": 0, "queued": 0, "dropped": 0, "late_rewards": 0, "errors": 0, "lossless": True}
