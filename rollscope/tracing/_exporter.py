"""Moves trace events off the rollout's thread: shape once, then fan out to the backends' workers.

The hot path only appends to a deque (no wake-up call, no I/O); or, when the trace sidecar is the
only destination, packs the event for it on the spot (``_sidecar``, ``_wire.pack_into``). A thread
drains the deque every few milliseconds, shapes the events when a backend in this process needs
them shaped (payloads become JSON-safe redacted values), and hands each batch to every worker: one
per backend here, and the sidecar's, which ships them to the helper process that stores them.
A remote backend's worker holds a bounded queue in memory and appends what does not fit to a spool
on disk (``_spool``), read back as the backend catches up: a slow or dead backend never slows the
rollout or the other backends, and a burst costs disk, not trajectories. A lossless backend (the
local store) gets an unbounded queue: it keeps up with any rollout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rollscope.tracing._events import (
    FLUSH,
    KIND,
    LEAF_SPAN,
    MARKER,
    POSITION,
    RECEIVED,
    REWARD,
    SPAN,
    SPAN_START,
    TRAINING,
    TRAJECTORY,
    TRAJECTORY_END,
    TRAJECTORY_ID,
    TRAJECTORY_START,
    flush,
    is_control,
    span_from_leaf,
)
from rollscope.tracing._shaping import EventShaper
from rollscope.tracing._spool import Spool
from rollscope.tracing.backends.base import Deduplicating, Publishing, Resumable, TraceBackend
from rollscope.tracing.spans import Span

log = logging.getLogger("rollscope.tracing")

_IDLE_POLL_S = 0.005
_MAX_BATCH = 4096
_RECORD_EVENTS = 256  # events per spool record for a backend that takes events one by one


class Marker:
    """Travels through every queue; set when the last worker has passed it (then calls ``then``)."""

    def __init__(self, parties: int, then: Callable[[], None] | None = None) -> None:
        self.remaining = parties
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.then = then

    def arrive(self) -> None:
        with self.lock:
            self.remaining -= 1
            if self.remaining != 0:
                return
        self.done.set()
        if self.then is not None:
            self.then()


class BackendWorker:
    """One backend, one thread, and what waits for it: the local store's queue in memory, unbounded
    (it keeps up with any rollout); a remote backend's spool on disk (``_spool``), which the worker
    reads back as the backend catches up, confirming each batch after the backend's flush.

    For a backend that writes whole trajectories (``Delivery.whole_trajectories``), a trajectory's
    events go to the spool together when it ends, as one record, so a cursor confirmed before a
    restart never falls inside a trajectory. Where no spool can be made (no writable directory),
    a remote backend's queue in memory is bounded by ``max_queue`` and what overflows is dropped
    and counted.
    """

    def __init__(self, backend: TraceBackend, max_queue: int) -> None:
        self.backend = backend
        self.name = backend.name
        self.delivery = delivery = backend.delivery
        self.max_queue = None if delivery.lossless else max_queue
        self.queue: deque = deque()
        self.dropped = 0
        self.errors = 0
        self.exported = 0
        self.position = 0  # in the sidecar: events up to this one are flushed by the backend
        self._wake = threading.Event()
        self._stop = False
        self._warned = False
        self._lock = threading.Lock()
        self.spool = None if delivery.lossless else _open_spool(backend)
        self._open: dict[str, list] | None = {} if delivery.whole_trajectories else None
        self._skip_span_start = not delivery.span_starts
        self._deduplicates = isinstance(backend, Deduplicating)
        self._publishes = isinstance(backend, Publishing)
        self._resumable = isinstance(backend, Resumable)
        self.kept_in: str | None = None  # a spool not sent before the end: the next process sends it
        self.thread = threading.Thread(target=self._run, name=f"rollscope-{backend.name}", daemon=True)
        self.thread.start()

    def submit(self, events: list[tuple]) -> None:
        if self.spool is not None:
            with self._lock:
                self._spool_events(events)
        elif self.max_queue is None:
            self.queue.extend(events)
        else:
            room = self.max_queue - len(self.queue)
            if room < len(events):
                kept = [e for e in events if is_control(e)]
                ordinary = [e for e in events if not is_control(e)]
                keep_n = max(room, 0)
                self.dropped += len(ordinary) - keep_n
                events = ordinary[:keep_n] + kept
            self.queue.extend(events)
        self._wake.set()

    def _spool_events(self, events: list) -> None:
        """Data events to disk in records (whole trajectories where the backend wants them whole),
        controls in their places."""
        records: list[list] = []
        loose: list = []
        for event in events:
            if is_control(event):
                if loose:
                    records.append(loose)
                    loose = []
                self.spool.append(records, [event])
                records = []
                continue
            if self._open is None:
                loose.append(event)
                if len(loose) == _RECORD_EVENTS:
                    records.append(loose)
                    loose = []
                continue
            if type(event) is Span:
                unit = self._open.get(event.trajectory_id)
            elif event[KIND] == SPAN_START:
                if self._skip_span_start:
                    continue
                unit = self._open.get(event[SPAN].trajectory_id)
            elif event[KIND] == TRAJECTORY_START:
                unit = self._open[event[TRAJECTORY].id] = []
            elif event[KIND] == TRAJECTORY_END:
                unit = self._open.pop(event[TRAJECTORY].id, None)
                if unit is not None:
                    unit.append(event)
                    if loose:
                        records.append(loose)
                        loose = []
                    records.append(unit)
                    continue
            else:  # a reward or a training record, by trajectory id
                unit = self._open.get(event[TRAJECTORY_ID])
            (loose if unit is None else unit).append(event)
        if loose:
            records.append(loose)
        self.spool.append(records)

    def stop(self) -> None:
        self._stop = True
        self._wake.set()

    def close(self, timeout: float | None) -> bool:
        """After ``stop``: wait for the queue and the spool to drain, then close the backend."""
        # An idle worker only has to notice the stop: it gets that second even when a hung
        # backend used up the timeout, so the local store is closed properly.
        busy = self.queue or (self.spool is not None and self.spool.has_data())
        self.thread.join(timeout if timeout is None or busy else max(timeout, 1.0))
        if self.thread.is_alive():
            self.dropped += len(self.queue)
            kept = self.spool.pending if self.spool is not None else 0
            log.warning(
                "trace backend %r did not finish in time; %d events not exported%s",
                self.name,
                len(self.queue) + kept,
                " (kept on disk)" if kept else "",
            )
        if self.spool is not None:
            with self._lock:
                self.kept_in = self.spool.close()
            if self.kept_in is not None:
                log.warning(
                    "trace backend %r: its spool %s is kept; the next tracer sending to %s sends it",
                    self.name,
                    self.kept_in,
                    self.spool.destination,
                )
        if self.thread.is_alive():
            return False
        try:
            self.backend.close()
        except Exception as exc:
            self.errors += 1
            log.warning("trace backend %r failed to close: %s", self.name, exc)
        return True

    def abandon(self) -> None:
        if self.spool is not None:
            self.spool.abandon()

    def stats(self) -> dict[str, dict[str, Any]]:
        spool = self.spool
        counts = self.backend.counts()
        dropped = self.dropped + counts.pop("dropped", 0) + (spool.dropped if spool else 0)
        return {
            self.name: {
                "exported": self.exported,
                "queued": len(self.queue) + (spool.pending if spool else 0),
                "spooled": spool.pending if spool else 0,  # of those, on disk
                "dropped": dropped,
                "late_rewards": counts.pop("late_rewards", 0),
                "errors": self.errors,
                # lost nothing so far, and will not while the disk has room
                "lossless": (self.delivery.lossless or spool is not None) and dropped == 0,
                **counts,
            }
        }

    def _run(self) -> None:
        handlers: dict[int, Callable[..., None]] = {
            TRAJECTORY_START: self.backend.on_trajectory_start,
            SPAN_START: self.backend.on_span_start,
            TRAJECTORY_END: self.backend.on_trajectory_end,
            REWARD: self.backend.on_reward,
            TRAINING: self.backend.on_training,
        }
        if self._skip_span_start:
            handlers[SPAN_START] = _ignore
        q, spool = self.queue, self.spool
        while True:
            if q:
                self._deliver([q.popleft() for _ in range(min(len(q), _MAX_BATCH))], handlers)
                continue
            if spool is not None and spool.has_data():
                with self._lock:
                    events = spool.read(self.delivery.batch)
                if self._deduplicates:
                    self.backend.sent_before(spool.from_orphan)
                if self._deliver(events, handlers):
                    spool.confirm()
                continue
            if self._stop:
                return
            self._wake.wait(0.1)
            self._wake.clear()

    def _deliver(self, events: list, handlers: dict[int, Callable[..., None]]) -> bool:
        """Hand ``events`` to the backend, then flush it; True when that flush returned."""
        did_work = False
        flushed = True
        position = None
        on_span_end = self.backend.on_span_end
        for event in events:
            if type(event) is Span:
                try:  # (``_call`` written out: this runs once per span)
                    on_span_end(event)
                    self.exported += 1
                except Exception as exc:
                    self._failed(exc)
                did_work = True
                continue
            if event[KIND] == FLUSH:
                flushed = self._call(self.backend.flush)
                if flushed and position is not None:
                    self.position, position = position, None
                if self._publishes:
                    self._call(self.backend.publish)  # an explicit flush: visible everywhere now
                did_work = False
                event[MARKER].arrive()
                continue
            if event[KIND] == POSITION:
                position = event[RECEIVED]
                if self._resumable:
                    self.backend.mark_position(position)
            else:
                handler = handlers.get(event[KIND])  # its fields, as its handler takes them
                self.exported += (
                    self._call(handler, *event[1:]) if handler is not None else self._call(_unknown_kind, event[KIND])
                )  # (that event fails, no other)
            did_work = True
        if did_work:
            flushed = self._call(self.backend.flush)
            if flushed and position is not None:
                self.position = position
        return flushed

    def _call(self, fn: Callable[..., None], *args: Any) -> bool:
        try:
            fn(*args)
            return True
        except Exception as exc:
            self._failed(exc)
            return False

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        if not self._warned:
            self._warned = True
            log.warning(
                "trace backend %r failed (%s: %s); rollouts continue, further errors are counted",
                self.backend.name,
                type(exc).__name__,
                exc,
            )


def _open_spool(backend: TraceBackend) -> Spool | None:
    """The spool for a backend that may fall behind (None, said once, where none can be made)."""
    try:
        return Spool(backend.destination())
    except Exception as exc:
        log.warning(
            "trace backend %r: no spool on disk (%s: %s); what overflows its queue in memory is "
            "dropped and counted (set ROLLSCOPE_SPOOL_DIR to a writable directory)",
            backend.name,
            type(exc).__name__,
            exc,
        )
        return None


class Exporter:
    """The ingest queue and the thread that moves its events to the workers.

    ``shape`` runs on that thread for every event (None: events go to the workers as captured,
    when every backend sits in the trace sidecar, which shapes them itself).
    """

    def __init__(self, workers: list[Any], shape: EventShaper | None) -> None:
        self.ingest: deque = deque()
        self._shape = shape
        self.workers = workers
        self.shape_errors = 0
        self._stop = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # Only the trace sidecar, and nothing to shape here: events are packed as they happen.
        self._direct = workers[0] if shape is None and len(workers) == 1 and hasattr(workers[0], "pack") else None
        #: The hot path, chosen once: where each event goes as it happens (the sidecar's ``pack``,
        #: or a bound ``deque.append`` that the exporter's thread drains), nothing more.
        self.submit: Callable[[Span | tuple], None] = self.ingest.append if self._direct is None else self._direct.pack
        if self._direct is None:
            self._thread = threading.Thread(target=self._run, name="rollscope-exporter", daemon=True)
            self._thread.start()

    def submit_many(self, events: list) -> None:
        self.ingest.extend(events)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event submitted before this call reached every backend and was flushed."""
        marker = Marker(len(self.workers))
        if not self.workers:
            marker.done.set()
        if self._direct is not None:
            self._direct.submit([flush(marker)])
        else:
            self.ingest.append(flush(marker))
            self._wake.set()
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = self.flush(timeout)
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(time_left(deadline))
        for w in self.workers:
            w.stop()
        for w in self.workers:
            ok = w.close(time_left(deadline)) and ok
        return ok

    def abandon(self) -> None:
        """In a forked child, whose copy of this exporter has no threads: release what it holds."""
        for w in self.workers:
            getattr(w, "abandon", _ignore)()

    def _run(self) -> None:
        q = self.ingest
        shape = self._shape
        while True:
            if not q:
                if self._stop:
                    return
                self._wake.wait(_IDLE_POLL_S)
                self._wake.clear()
                continue
            n = min(len(q), _MAX_BATCH)
            batch = [q.popleft() for _ in range(n)]
            if shape is None:
                batch = [span_from_leaf(e) if type(e) is tuple and e[KIND] == LEAF_SPAN else e for e in batch]
            else:
                batch = self._shaped(batch, shape)
            for w in self.workers:
                w.submit(batch)

    def _shaped(self, events: list, shape: EventShaper) -> list:
        """``events`` shaped, controls passed as they are; an event that fails to shape is counted
        and said, the others go on. One pass: it runs once per event."""
        shape.refresh_secrets()
        batch = []
        with shape.shaper.deferred():  # (the batch's long strings redacted in a few scans)
            for event in events:
                if type(event) is not Span:
                    kind = event[KIND]
                    if kind in (FLUSH, POSITION):
                        batch.append(event)
                        continue
                    if kind == LEAF_SPAN:
                        event = span_from_leaf(event)
                try:
                    batch.append(shape(event))
                except Exception as exc:
                    self.shape_errors += 1
                    log.warning("could not shape trace event: %s: %s", type(exc).__name__, exc)
        return batch

    def stats(self) -> dict[str, Any]:
        backends: dict[str, dict[str, Any]] = {}
        for w in self.workers:
            backends.update(w.stats())
        # kept, payloads (or long values whose redaction failed) replaced
        unshapeable = self._shape.unshapeable + self._shape.shaper.unredacted if self._shape is not None else 0
        return {"pending": len(self.ingest), "shape_errors": self.shape_errors + unshapeable, "backends": backends}


def _unknown_kind(kind: Any) -> None:
    raise ValueError(f"an event of unknown kind {kind!r}")


def _ignore(*_: Any) -> None:
    pass


def time_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (a ``time.monotonic()`` value), never negative; None: no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
