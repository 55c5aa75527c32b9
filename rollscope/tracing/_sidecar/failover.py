"""When the sidecar dies, its backends continue in the traced process.

A backend that can be continued (the local store: ``TraceBackend.resume_options``) is reopened at
the position it committed last and given every kept event after it (``ReplayLog``); anything
before what the log still holds is counted lost. Any other backend starts afresh here, and what the
child had been sent but had not reported flushed is counted lost for it, exactly."""

from __future__ import annotations

import logging
import time
from typing import Any

from rollscope.tracing._events import flush
from rollscope.tracing._exporter import BackendWorker, Marker, time_left
from rollscope.tracing._shaping import EventShaper
from rollscope.tracing._sidecar.protocol import shaper_for, worker_for
from rollscope.tracing._sidecar.replay_log import ReplayLog

log = logging.getLogger("rollscope.tracing")


class Failover:
    """The child's backends, once they run here (``workers`` is None until ``take_over``).

    ``config`` is the one the child was started with; ``resume`` the child's greeting; ``pid`` the
    child's, to say which one stopped."""

    def __init__(self, config: dict[str, Any], resume: dict[str, dict | None], pid: int) -> None:
        self.config = config
        self.pid = pid
        self.resume = resume
        self.workers: list[BackendWorker] | None = None
        self.lost: dict[str, int] = {}  # per backend: events it never got
        self.resumed: set[str] = set()  # backends continued from the child's position
        self.errors = 0  # backends that could not be started here
        self._shape: EventShaper | None = None

    @property
    def active(self) -> bool:
        return self.workers is not None

    def take_over(self, why: str, sent: int, acked: dict[str, int], replay: ReplayLog) -> None:
        """Start the child's backends here. ``sent``: events written to the child; ``acked``: per
        backend, how many of them the child reported flushed; ``replay``: what it kept of them."""
        self._shape = shaper_for(self.config)
        workers = []
        for name, path, options in self.config["backends"]:
            worker = self._continue(name, path, options, sent, acked, replay)
            if worker is not None:
                workers.append(worker)
        names = ", ".join(name for name, _, _ in self.config["backends"])
        lost = ", ".join(f"{n} {name}" for name, n in self.lost.items() if n)
        log.warning(
            "trace sidecar (pid %d) stopped: %s; %s continue in this process%s",
            self.pid,
            why,
            names,
            f"; events lost: {lost}" if lost else ", nothing lost",
        )
        self.workers = workers

    def _continue(
        self, name: str, path: str, options: dict[str, Any], sent: int, acked: dict[str, int], replay: ReplayLog
    ) -> BackendWorker | None:
        resume = self.resume.get(name)
        if resume:
            try:
                worker = worker_for(self.config, path, options, resume)
            except Exception as exc:
                log.warning("trace backend %r could not be continued from %s: %s", name, resume, exc)
            else:
                start = worker.backend.resumed_position
                self.lost[name] = max(0, replay.kept_from - start)
                self.resumed.add(name)
                for events in replay.since(max(start, replay.kept_from)):
                    worker.submit(self._shaped(events))
                return worker
        self.lost[name] = sent - acked.get(name, 0)
        try:
            return worker_for(self.config, path, options)
        except Exception as exc:  # what it would have got stays counted lost
            self.errors += 1
            log.warning("trace backend %r could not be restarted here: %s", name, exc)
            return None

    def submit(self, events: list) -> None:
        batch = self._shaped(events)
        for w in self.workers or ():
            w.submit(batch)

    def unread(self, events: list) -> None:
        """A batch the child never read (its pipe closed as it was written): a continued store had
        it replayed; the other backends get it now, and it is not lost for them."""
        fresh = [w for w in self.workers or () if w.name not in self.resumed]
        batch = self._shaped(events)
        for w in fresh:
            self.lost[w.name] -= len(events)
            w.submit(batch)

    def flush(self, marker: Marker) -> None:
        workers = self.workers or []
        if not workers:
            marker.arrive()
            return
        inner = Marker(len(workers), then=marker.arrive)
        for w in workers:
            w.submit([flush(inner)])

    def close(self, timeout: float | None) -> bool:
        """The sender has handed them everything: they may stop now."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for w in self.workers or ():
            w.stop()
        return all(w.close(time_left(deadline)) for w in self.workers or ())

    def stats(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for w in self.workers or ():
            out.update(w.stats())
        return out

    def _shaped(self, events: list) -> list:
        return events if self._shape is None else [self._shape(e) for e in events]
