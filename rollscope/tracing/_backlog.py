"""The trace sidecar's backlog: packed events wait here until the traced process leaves the CPU.

Storing traces from another process still costs the rollout when the rollout keeps the machine's
cores busy (an instantly answering LLM on 2 cores: about 12 % of its throughput, measured, for
the sidecar's ~0.6 ms of work per 3-turn trajectory). So the sidecar does its work while the
traced process waits: on the LLM, or between rollout steps while the trainer runs. It reads the
traced process's CPU time from /proc every ``CHECK_S`` and, while that process used less than
``BUSY_SHARE`` of a core, hands the oldest events on in slices. A flush or the end hands on
everything at once; a backlog over its byte bound hands on its oldest part whatever the load.
Without /proc (not Linux) everything is handed on as it arrives.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

CHECK_S = 0.1
BUSY_SHARE = 0.5  # of one core
SLICE_BYTES = 256 * 1024  # handed on per check while the traced process idles
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class ProcessLoad:
    """How much CPU a process used since the last call, as a share of one core (None: unknown)."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/stat"
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last = (time.monotonic(), self._cpu_s())

    def _cpu_s(self) -> float | None:
        try:
            with open(self.path, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime
        except (OSError, IndexError, ValueError):
            return None

    def share(self) -> float | None:
        now, cpu = time.monotonic(), self._cpu_s()
        (then, before), self.last = self.last, (now, cpu)
        if cpu is None or before is None or now <= then:
            return None
        return (cpu - before) / (now - then)


class Backlog:
    """Ordered chunks of packed events, handed to ``release`` (with their event count) one chunk
    at a time, in order."""

    def __init__(self, release: Callable[[bytes, int], None], pid: int, max_bytes: int = DEFAULT_MAX_BYTES,
                 load: Callable[[], float | None] | None = None) -> None:  # fmt: skip
        """``load``: the traced process's CPU share since the last call (default: read from /proc
        for ``pid``; tests give their own reading, so no test depends on how busy the machine is)."""
        self._release = release
        self._share = load or ProcessLoad(pid).share
        self.max_bytes = max_bytes
        self._chunks: deque[tuple[bytes, int]] = deque()
        self.bytes = 0
        self.events = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollscope-backlog", daemon=True)
        self._thread.start()

    def add(self, chunk: bytes, events: int) -> None:
        with self._lock:
            self._chunks.append((chunk, events))
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
        chunk, events = self._chunks.popleft()
        self.bytes -= len(chunk)
        self.events -= events
        self._release(chunk, events)

    def _run(self) -> None:
        while not self._stop.wait(CHECK_S):
            share = self._share()
            if share is not None and share >= BUSY_SHARE:
                continue  # the traced process is working: wait
            with self._lock:
                released = 0
                while self._chunks and (share is None or released < SLICE_BYTES):
                    released += len(self._chunks[0][0])
                    self._release_one()
