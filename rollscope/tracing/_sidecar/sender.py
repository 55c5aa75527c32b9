"""The traced process's sending side of the sidecar: events packed where they end, shipped in
batches, numbered and kept until the child's store has them, flush markers held until the child
passes them; and, once the child is gone, everything handed to the ``Failover`` instead."""

from __future__ import annotations

import functools
import logging
import struct
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._events import MARKER, is_flush
from rollscope.tracing._exporter import Marker
from rollscope.tracing._redaction import secret_env_values
from rollscope.tracing._sidecar.failover import Failover
from rollscope.tracing._sidecar.protocol import EVENTS, FLUSH, SECRETS
from rollscope.tracing._sidecar.replay_log import ReplayLog

log = logging.getLogger("rollscope.tracing")

# How often the sending thread wakes. Each wake-up takes the GIL from the rollout, so fewer,
# larger batches cost less: measured with an instant LLM, waking every 20 ms cost the rollout
# ~50 us per trajectory more than every 100 ms (benchmarks/RESULTS.md). A flush wakes it at once.
SEND_INTERVAL_S = 0.1


class Sender:
    """``pack`` runs where an event ends (the rollout's thread, as the Exporter's submit) and puts
    its record in the outbox, a deque whose appends and pops are atomic: the rollout takes no
    lock. A thread sends what the outbox holds every ``SEND_INTERVAL_S`` through ``send`` (a frame
    writer that raises OSError once the child is gone).

    One lock guards what the child's death changes: the count of events sent, the replay log, the
    flush markers in flight and whether the ``Failover`` has taken over."""

    def __init__(
        self, send: Callable[[int, bytes], None], failover: Failover, *, keep_for_replay: bool, secrets: list[str]
    ) -> None:
        """``secrets``: the secret values the child's environment started with."""
        self.outbox: deque = deque()  # packed records (bytes) and flush events, in order
        self.pack = functools.partial(wire.pack_into, self.outbox.append, self._pack_failed)
        self.failover = failover
        self.errors = 0
        self.sent = 0  # events written to the pipe
        self.replay = ReplayLog(wire.unpack)  # of those, what the child's store has not reported stored
        self._send_frame = send
        self._keep = keep_for_replay  # only a backend that can be continued needs the replay log
        self._acked: dict[str, int] = {}  # per backend: how many sent events the child reported flushed
        self._pending: dict[int, Marker] = {}  # flush id -> the marker the child has not passed yet
        self._next_flush = 0
        self._secrets = secrets
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="rollscope-sidecar-send", daemon=True)
        self.thread.start()

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

    def join(self, timeout: float | None) -> None:
        self.thread.join(timeout)

    def queued(self) -> int:
        """Events packed and not sent yet."""
        return sum(type(item) is bytes for item in list(self.outbox))

    # ---- what the child reports ----
    def stored(self, positions: dict[str, int]) -> None:
        """Per backend, how many of the events sent the child has flushed. What every continuable
        store has is let go from the replay log."""
        with self._lock:
            self._acked.update(positions)
            resumable = [n for n, options in self.failover.resume.items() if options]
            self.replay.stored(min((positions.get(n, 0) for n in resumable), default=0))

    def flushed(self, flush_id: int) -> None:
        with self._lock:
            marker = self._pending.pop(flush_id, None)
        if marker is not None:
            marker.arrive()

    def child_gone(self, why: str) -> None:
        """The child died (or its pipe closed): its backends continue here; the flushes it had not
        answered are let through (what they wait for is the failover's now)."""
        with self._lock:
            if self.failover.active:
                return
            self.failover.take_over(why, self.sent, self._acked, self.replay)
            self.replay.clear()
            pending, self._pending = list(self._pending.values()), {}
        for marker in pending:
            marker.arrive()

    # ---- the sending thread ----
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
                self._guarded(self._send_flush, item[MARKER])
            self._ship(records)
            if self._stop and not outbox:
                return
            self._wake.wait(SEND_INTERVAL_S)  # let packed events gather: each wake-up costs the rollout

    def _ship(self, records: list[bytes]) -> None:
        if records:
            # Looked at after the records were taken: a secret exported before an event was made is
            # announced before that event.
            self._guarded(self._send_secrets, None)
            self._guarded(self._send_events, records)

    def _guarded(self, send: Callable[[Any], None], arg: Any) -> None:
        try:
            send(arg)
        except Exception as exc:  # the sender must outlive anything one batch does
            self.errors += 1
            log.warning("trace sidecar sender: %s: %s", type(exc).__name__, exc)

    def _send_events(self, records: list[bytes]) -> None:
        body, count = wire.join(records), len(records)
        with self._lock:  # numbered and kept before it is written: if the child dies, whatever
            gone = self.failover.active  # of it the store lacks is replayed from the log
            if not gone:
                first, self.sent = self.sent, self.sent + count
                if self._keep:
                    self.replay.keep(first, self.sent, body)
        if gone:
            self.failover.submit(wire.unpack(body))
            return
        try:  # only this thread writes to the pipe: no lock held while the child is slow
            self._send_frame(EVENTS, struct.pack("<I", count) + body)
        except OSError:
            self.child_gone("its pipe closed")
            self.failover.unread(wire.unpack(body))

    def _send_secrets(self, _: Any) -> None:
        secrets = secret_env_values()
        if secrets != self._secrets and not self.failover.active:
            self._secrets = secrets
            self._send_frame(SECRETS, wire.encode(secrets))

    def _send_flush(self, marker: Marker) -> None:
        with self._lock:  # decided under the lock child_gone takes: a marker registered here is
            gone = self.failover.active  # released by it, or the failover takes the flush
            if not gone:
                self._next_flush += 1
                flush_id = self._next_flush
                self._pending[flush_id] = marker
        if gone:
            self.failover.flush(marker)
            return
        try:
            self._send_frame(FLUSH, struct.pack("<Q", flush_id))
        except OSError:
            self.child_gone("its pipe closed")  # the marker was pending: child_gone let it through

    def _pack_failed(self, exc: Exception) -> None:
        self.errors += 1
        log.warning("trace event not sent to the sidecar: %s: %s", type(exc).__name__, exc)
