"""The trace sidecar's backlog: packed events wait here until the machine has a core to spare.

Storing traces from another process still costs the rollout when the rollout keeps the machine's
cores busy (an instantly answering LLM server and the loop on 2 cores: about 12 % of its
throughput, measured, for the sidecar's ~0.6 ms of work per 3-turn trajectory). So the sidecar
works on CPU nobody else wants: every ``CHECK_S`` it reads how much of the machine was idle (plus
what the sidecar itself used: that is what it would give back) and, while that is at least
``SPARE_CORES``, hands the oldest events on in slices. A traced process that keeps one core busy
on a machine with another idle is not slowed by that, so then the sidecar works beside it rather
than after it. A flush or the end hands on everything at once; a backlog over its byte bound hands
on its oldest part whatever the load; and nothing waits longer than ``MAX_HOLD_S``, however busy
the machine. Events held in memory are lost if the process is killed with its parent (Ray kills a
worker's child processes as the worker exits: ``kill_child_processes_on_worker_exit``); on a
machine kept busy all run long (verl's trainer, a vLLM engine, another job) they were held until
then, and a run's traces lost but for its flushes. Past the hold the sidecar works anyway, niced:
its work yields to the rollout's. Without /proc (not Linux) everything is handed on as it
arrives. (Under a CPU quota that /proc/stat does not show, the machine's idle cores are what is
read; the sidecar runs niced either way.)
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

CHECK_S = 0.1
SPARE_CORES = 0.5
MAX_HOLD_S = 2.0  # the longest a chunk waits for a spare core
SLICE_BYTES = 256 * 1024  # handed on per check while a core is spare
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class SpareCpu:
    """Cores the machine left idle since the last call, plus this process's own CPU time over the
    same span (None: unknown)."""

    def __init__(self, stat_path: str = "/proc/stat") -> None:
        self.path = stat_path
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last = (time.monotonic(), self._idle_s(), time.process_time())

    def _idle_s(self) -> float | None:
        try:
            with open(self.path, "rb") as f:
                fields = f.readline().split()  # "cpu  user nice system idle iowait ..." (all cores)
            return (int(fields[4]) + int(fields[5])) / self.tick
        except (OSError, IndexError, ValueError):
            return None

    def cores(self) -> float | None:
        now, idle, own = time.monotonic(), self._idle_s(), time.process_time()
        (then, idle_before, own_before), self.last = self.last, (now, idle, own)
        if idle is None or idle_before is None or now <= then:
            return None
        return (idle - idle_before + own - own_before) / (now - then)


class Backlog:
    """Ordered chunks of packed events, handed to ``release`` (with their event count) one chunk
    at a time, in order."""

    def __init__(
        self,
        release: Callable[[bytes, int], None],
        max_bytes: int = DEFAULT_MAX_BYTES,
        spare: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``spare``: the cores to spare since the last call (default: ``SpareCpu``); ``clock``:
        seconds, for the hold. Tests give their own, so no test depends on how busy or how fast
        the machine is."""
        self._release = release
        self._spare = spare or SpareCpu().cores
        self._clock = clock
        self.max_bytes = max_bytes
        self._chunks: deque[tuple[bytes, int, float]] = deque()  # (chunk, its events, when it came)
        self.bytes = 0
        self.events = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollscope-backlog", daemon=True)
        self._thread.start()

    def add(self, chunk: bytes, events: int) -> None:
        with self._lock:
            self._chunks.append((chunk, events, self._clock()))
            self.bytes += len(chunk)
            self.events += events
            while self.bytes > self.max_bytes:  # bounded memory: the oldest go on now
                self._release_one()

    def drain(self) -> None:
        """Everything, now (a flush, the end)."""
        with self._lock:
            while self._chunks:
                self._release_one()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.drain()

    def _release_one(self) -> None:
        chunk, events, _ = self._chunks.popleft()
        self.bytes -= len(chunk)
        self.events -= events
        self._release(chunk, events)

    def _run(self) -> None:
        while not self._stop.wait(CHECK_S):
            spare = self._spare()
            if spare is not None and spare < SPARE_CORES:  # the machine is busy: wait, up to the hold
                due = self._clock() - MAX_HOLD_S
                with self._lock:
                    while self._chunks and self._chunks[0][2] <= due:
                        self._release_one()
                continue
            with self._lock:
                released = 0
                while self._chunks and (spare is None or released < SLICE_BYTES):
                    released += len(self._chunks[0][0])
                    self._release_one()
