"""Several trace sidecars for one traced process (``init_tracing(sidecar=N)`` or
``ROLLSCOPE_TRACE_SIDECAR=N``): each is a ``SidecarWorker`` of its own, with its own process and
store shard, and a trajectory's events all go to the same one (chosen by its id), so every shard
holds whole trajectories and the readers see one store as they do for several traced processes.

One sidecar shapes and stores on one core (about 25,000 spans a second here); a process that
traces faster than that, with cores to spare, gets them used. Each sidecar still works only while
the machine has a core to spare (``_backlog``), and each keeps its own replay log and failover:
one that dies costs nothing of what the others hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rollscope.tracing._events import (
    KIND,
    LEAF_SPAN,
    MARKER,
    SPAN_START,
    TRAJECTORY,
    TRAJECTORY_END,
    TRAJECTORY_ID,
    TRAJECTORY_START,
    flush,
    is_flush,
)
from rollscope.tracing._exporter import Marker, time_left
from rollscope.tracing._sidecar.parent import SidecarWorker


def trajectory_of(event: Any) -> str | None:
    """The id of the trajectory a (non-control) event belongs to."""
    if type(event) is not tuple:  # a Span that ended
        return event.trajectory_id
    kind = event[KIND]
    if kind in (TRAJECTORY_START, TRAJECTORY_END):
        return event[TRAJECTORY].id
    if kind in (SPAN_START, LEAF_SPAN):  # the span, or (a leaf) its parent
        return event[1].trajectory_id
    return event[TRAJECTORY_ID]  # REWARD, TRAINING


class SidecarPool:
    """``count`` sidecars behind the worker interface the Exporter sees (``pack``, ``submit``,
    ``stop``, ``close``, ``stats``); a flush returns once every sidecar has passed it."""

    def __init__(self, config: dict[str, Any], shaped: bool, count: int) -> None:
        # started at once: init_tracing waits for one start, not for each in turn
        with ThreadPoolExecutor(count, thread_name_prefix="rollscope-sidecar-start") as starting:
            started = [starting.submit(SidecarWorker, config, shaped) for _ in range(count)]
        self.members: list[SidecarWorker] = [f.result() for f in started if f.exception() is None]
        failed = [f.exception() for f in started if f.exception() is not None]
        if failed:  # all or none: the sidecars that did start are closed
            self.close(10.0)
            raise failed[0]
        self.names = self.members[0].names
        self._packs: list[Callable[[Any], None]] = [m.pack for m in self.members]

    def pack(self, event: Any) -> None:
        """On the rollout's thread, per event: to its trajectory's sidecar (an event of no known
        shape to the first, whose packing reports what it cannot take: never raised here)."""
        packs = self._packs
        try:
            member = hash(trajectory_of(event)) % len(packs)
        except Exception:
            member = 0
        packs[member](event)

    def submit(self, events: list) -> None:
        for event in events:
            if is_flush(event):  # after what each sidecar was given before it
                each = Marker(len(self.members), then=event[MARKER].arrive)
                for member in self.members:
                    member.submit([flush(each)])
            else:
                self.pack(event)

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def close(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.stop()
        ok = True
        for member in self.members:
            ok = member.close(time_left(deadline)) and ok
        return ok

    def abandon(self) -> None:
        for member in self.members:
            member.abandon()

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per backend, the sidecars' counts added up (lossless: every one of them is)."""
        out: dict[str, dict[str, Any]] = {}
        for member in self.members:
            for name, counts in member.stats().items():
                total = out.setdefault(name, {})
                for key, value in counts.items():
                    if type(value) is bool:
                        total[key] = total.get(key, True) and value
                    elif isinstance(value, int | float):
                        total[key] = total.get(key, 0) + value
                    else:
                        total.setdefault(key, value)
        return out
