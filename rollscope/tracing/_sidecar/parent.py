"""The traced process's end of the trace sidecar: ``SidecarWorker`` stands where a backend's worker
would, packs events where they end, ships them, keeps what the child has not stored yet, and takes
over the child's backends if it dies (see the package's docstring).
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._events import flush, is_flush
from rollscope.tracing._exporter import BackendWorker, Marker
from rollscope.tracing._redaction import secret_env_values
from rollscope.tracing._shaping import EventShaper
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
    READY,
    SECRETS,
    read_frame,
    read_frame_timeout,
    shaper_for,
    worker_for,
    write_frame,
)
from rollscope.tracing._sidecar.replay_log import ReplayLog

log = logging.getLogger("rollscope.tracing")

START_TIMEOUT_S = 60.0
# How often the sending thread wakes. Each wake-up takes the GIL from the rollout, so fewer,
# larger batches cost less: measured with an instant LLM, waking every 20 ms cost the rollout
# ~50 us per trajectory more than every 100 ms (benchmarks/RESULTS.md). A flush wakes it at once.
SEND_INTERVAL_S = 0.1


class SidecarError(RuntimeError):
    """The sidecar could not be started (its backends then run in the traced process)."""


class SidecarWorker:
    """Stands where a BackendWorker would: packs each event where it ends (``_wire.pack_into``) into an
    outbox, sends what the outbox holds every ``SEND_INTERVAL_S``, and turns the child's
    acknowledgements into flush arrivals and stats. The outbox is a deque, whose appends and
    pops are atomic: the rollout's thread takes no lock."""

    def __init__(self, config: dict[str, Any], shaped: bool) -> None:
        # config: backends [(name, "module:Class", options)], settings, max_payload_chars,
        # redact_patterns, max_queue; shaped: the traced process shapes events itself.
        # sys.path too: a backend class the application made importable at run time (the runner
        # adds a config's folder) must import in the child as well.
        self.config = {**config, "shaped": shaped, "sys_path": list(sys.path)}
        self.names = [name for name, _, _ in config["backends"]]
        self.outbox: deque = deque()  # packed records (bytes) and flush markers, in order
        # Called where the event happens (the rollout's thread, when the Exporter hands this
        # worker its submit): the event is packed now and its objects are free to go.
        self.pack = functools.partial(wire.pack_into, self.outbox.append, self._pack_failed,
                                      bool(config.get("token2text")))  # fmt: skip
        self.lost: dict[str, int] = {}  # per backend, after the child died: events it never got
        self.errors = 0
        self._sent = 0  # events written to the pipe
        self._acked: dict[str, int] = {}  # per backend: of those, how many the child reported flushed
        self._resume: dict[str, dict | None] = {}  # per backend: how to continue it here (READY)
        # Sent (first event's number, number after the last, body) the child has not reported stored.
        self._replay = ReplayLog(wire.unpack)
        self._resumed: set[str] = set()  # backends continued here from the child's position
        self._closing = False
        self._child_stats: dict[str, dict[str, Any]] = {}
        self._pending: dict[int, tuple[Marker, int]] = {}  # flush id -> (marker, events sent before it)
        self._next_flush = 0
        self._wake = threading.Event()
        self._stop = False
        self._closed = threading.Event()
        self._close_ok = False
        self._lock = threading.Lock()
        self._fallback: list[BackendWorker] | None = None
        self._secrets = secret_env_values()  # what the child's own environment started with
        self._fallback_shape: EventShaper | None = None
        self._start()
        self.thread = threading.Thread(target=self._run, name="rollscope-sidecar-send", daemon=True)
        self.thread.start()

    # ---- start ----
    def _start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from rollscope.tracing._sidecar.child import main; main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            raise SidecarError(f"cannot start the trace sidecar: {exc}") from exc
        self._out, self._in = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        write_frame(self._out, CONFIG, pickle.dumps(self.config))
        reply = read_frame_timeout(self._in, START_TIMEOUT_S)
        if reply is None or reply[0] not in (READY, FAILED):
            self.proc.kill()
            raise SidecarError(f"the trace sidecar (pid {self.proc.pid}) did not start")
        if reply[0] == FAILED:
            error_type, message = wire.decode(reply[1])
            self.proc.wait(5)
            # The backends' own errors (a trace directory that cannot be created) reach the caller as is.
            raise (OSError if error_type == "OSError" else ValueError)(message)
        self._resume = wire.decode(reply[1])
        self._keep_for_replay = any(self._resume.values())
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, name="rollscope-sidecar-read", daemon=True)
        self._reader.start()

    # ---- the worker interface the Exporter uses ----
    def _pack_failed(self, exc: Exception) -> None:
        self.errors += 1
        log.warning("trace event not sent to the sidecar: %s: %s", type(exc).__name__, exc)

    def submit(self, events: list) -> None:
        for event in events:
            if is_flush(event):
                self.outbox.append(event)  # after everything packed before it
                self._wake.set()
            else:
                self.pack(event)

    def stop(self) -> None:
        self._stop = True
        self._wake.set()

    def close(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.thread.join(_left(deadline))
        if self._fallback is not None:  # the sender has handed them everything: they may stop now
            for w in self._fallback:
                w.stop()
            return all(w.close(_left(deadline)) for w in self._fallback)
        self._closing = True
        try:
            write_frame(self._out, CLOSE)
        except OSError:
            pass
        ok = self._closed.wait(_left(deadline)) and self._close_ok
        try:
            self.proc.wait(max(_left(deadline) or 0.0, 1.0))
        except subprocess.TimeoutExpired:
            log.warning("trace sidecar (pid %d) did not finish in time; killed", self.pid)
            self.proc.kill()
            ok = False
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        return ok

    def abandon(self) -> None:
        """In a forked child: the pipes belong to the parent's tracer; let go without a word."""
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                os.close(f.fileno())
            except OSError:
                pass

    def stats(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if self._fallback is not None:
            for w in self._fallback:
                out.update(w.stats())
        else:
            out = {n: dict(self._child_stats.get(n, _EMPTY_STATS)) for n in self.names}
        queued = sum(type(item) is bytes for item in list(self.outbox))
        for name, s in out.items():
            s["queued"] += queued
            s["dropped"] += self.lost.get(name, 0)
            s["errors"] += self.errors
            s["lossless"] = s["lossless"] and s["dropped"] == 0
        return out

    # ---- sending ----
    def _run(self) -> None:
        outbox = self.outbox
        while True:
            self._wake.clear()  # before draining: a flush marker added meanwhile wakes the next wait
            records: list[bytes] = []
            while outbox:
                item = outbox.popleft()
                if type(item) is bytes:
                    records.append(item)
                    continue
                self._ship(records)
                records = []
                self._guarded(self._send_flush, item[1])
            self._ship(records)
            if self._stop and not outbox:
                return
            self._wake.wait(SEND_INTERVAL_S)  # let packed events gather: each wake-up costs the rollout

    def _ship(self, records: list[bytes]) -> None:
        if records:
            # Looked at after the records were taken: a secret exported before an event was made is
            # announced before that event.
            self._guarded(self._send_secrets, None)
            self._guarded(self._send, records)

    def _guarded(self, send: Any, arg: Any) -> None:
        try:
            send(arg)
        except Exception as exc:  # the sender must outlive anything one batch does
            self.errors += 1
            log.warning("trace sidecar sender: %s: %s", type(exc).__name__, exc)

    def _send(self, records: list[bytes]) -> None:
        body, count = wire.join(records), len(records)
        with self._lock:  # numbered and kept before it is written: if the child dies, whatever
            gone = self._fallback is not None  # of it the store lacks is replayed from here
            if not gone:
                first, self._sent = self._sent, self._sent + count
                if self._keep_for_replay:
                    self._replay.keep(first, self._sent, body)
        if gone:
            self._to_fallback(wire.unpack(body))
            return
        try:  # only this thread writes to the pipe: no lock held while the child is slow
            write_frame(self._out, EVENTS, struct.pack("<I", count) + body)
        except OSError:
            self._child_gone("its pipe closed")
            # The child never read it: a continued store had it replayed, the others get it now.
            fresh = [w for w in self._fallback or () if w.name not in self._resumed]
            for w in fresh:
                self.lost[w.name] -= count
            self._to_fallback(wire.unpack(body), fresh)

    def _stored(self, positions: dict[str, int]) -> None:
        """The child's report: what each backend has flushed. Kept events the store has are let go."""
        with self._lock:
            self._acked.update(positions)
            stored = min((positions.get(n, 0) for n, r in self._resume.items() if r), default=0)
            self._replay.stored(stored)

    def _send_secrets(self, _: Any) -> None:
        secrets = secret_env_values()
        if secrets != self._secrets and self._fallback is None:
            self._secrets = secrets
            write_frame(self._out, SECRETS, wire.encode(secrets))

    def _send_flush(self, marker: Marker) -> None:
        with self._lock:  # decided under the lock _child_gone takes: a marker registered here is
            gone = self._fallback is not None  # released by it, or the fallback takes the flush
            if not gone:
                self._next_flush += 1
                self._pending[self._next_flush] = (marker, self._sent)
        if not gone:
            try:
                write_frame(self._out, FLUSH, struct.pack("<Q", self._next_flush))
                return
            except OSError:
                self._child_gone("its pipe closed")
                return  # the marker was pending: _child_gone let it through
        self._fallback_flush(marker)

    # ---- receiving ----
    def _read(self) -> None:
        while True:
            frame = read_frame(self._in)
            if frame is None:
                break
            kind, body = frame
            if kind == LOG:
                level, message = wire.decode(body)
                log.log(level, "trace sidecar: %s", message)
            elif kind == POSITIONS:
                self._stored(wire.decode(body))
            elif kind == FLUSHED:
                flush_id, stats, positions = wire.decode(body)
                self._stored(positions)
                with self._lock:
                    self._child_stats = stats
                    marker, _ = self._pending.pop(flush_id, (None, 0))
                if marker is not None:
                    marker.arrive()
            elif kind == CLOSED:
                self._close_ok, self._child_stats = wire.decode(body)
                break
        if self._closing:
            self._closed.set()
        else:
            self._child_gone(f"it exited with code {self.proc.wait()}")

    # ---- when the child is gone: its backends continue here ----
    def _child_gone(self, why: str) -> None:
        with self._lock:
            if self._fallback is not None:
                return
            self._fallback_shape = shaper_for(self.config)
            workers = []
            for name, path, options in self.config["backends"]:
                worker = self._continue_here(name, path, options)
                if worker is not None:
                    workers.append(worker)
            lost = {name: n for name, n in self.lost.items() if n}
            log.warning("trace sidecar (pid %d) stopped: %s; %s continue in this process%s", self.pid, why,
                        ", ".join(self.names), "; events lost: " + ", ".join(f"{n} {k}" for k, n in lost.items())
                        if lost else ", nothing lost")  # fmt: skip
            self._fallback = workers
            self._replay.clear()
            pending, self._pending = list(self._pending.values()), {}
        for marker, _ in pending:
            marker.arrive()

    def _continue_here(self, name: str, path: str, options: dict[str, Any]) -> BackendWorker | None:
        """A backend the child ran, now in this process: continued from its committed position with
        the kept events after it, or started afresh with what the child had not delivered lost."""
        resume = self._resume.get(name)
        if resume:
            try:
                worker = worker_for(self.config, path, options, resume)
            except Exception as exc:
                log.warning("trace backend %r could not be continued from %s: %s", name, resume, exc)
            else:
                start = worker.backend.resumed_position
                self.lost[name] = max(0, self._replay.kept_from - start)
                self._resumed.add(name)
                self._replay_into(worker, max(start, self._replay.kept_from))
                return worker
        self.lost[name] = self._sent - self._acked.get(name, 0)
        try:
            return worker_for(self.config, path, options)
        except Exception as exc:
            self.errors += 1
            log.warning("trace backend %r could not be restarted here: %s", name, exc)
            return None

    def _replay_into(self, worker: BackendWorker, start: int) -> None:
        for events in self._replay.since(start):
            if self._fallback_shape is not None:
                events = [self._fallback_shape(e) for e in events]
            worker.submit(events)

    def _to_fallback(self, batch: list, workers: list[BackendWorker] | None = None) -> None:
        if self._fallback_shape is not None:
            batch = [self._fallback_shape(e) for e in batch]
        for w in self._fallback or () if workers is None else workers:
            w.submit(batch)

    def _fallback_flush(self, marker: Marker) -> None:
        workers = self._fallback or []
        if not workers:
            marker.arrive()
            return
        inner = Marker(len(workers), then=marker.arrive)
        for w in workers:
            w.submit([flush(inner)])


_EMPTY_STATS = {"exported": 0, "queued": 0, "dropped": 0, "late_rewards": 0, "errors": 0, "lossless": True}


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
