"""What the traced process sent the sidecar and the sidecar's store has not reported stored yet:
kept, so that a store continued in this process after the sidecar died (``parent``) gets every
event after its committed position again. Bounded: past ``max_bytes`` the oldest frames go, and
an event before ``kept_from`` can no longer be given back (the loss is then counted exactly)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

# Sent events kept until the sidecar's local store reports them stored, for a resumed store to
# take over. Beyond this, the oldest are let go (and counted if then needed).
REPLAY_MAX_BYTES = 64 * 1024 * 1024


class ReplayLog:
    """Frames of events numbered ``[first, end)`` in the order they were sent."""

    def __init__(self, unpack: Callable[[bytes], list[Any]], max_bytes: int | None = None) -> None:
        self._unpack = unpack
        self.max_bytes = REPLAY_MAX_BYTES if max_bytes is None else max_bytes
        self._frames: deque[tuple[int, int, bytes]] = deque()
        self.bytes = 0
        self.kept_from = 0  # events numbered below this are no longer kept

    def keep(self, first: int, end: int, body: bytes) -> None:
        """A frame just sent: events ``first`` to ``end - 1``."""
        self._frames.append((first, end, body))
        self.bytes += len(body)
        while self.bytes > self.max_bytes:
            _, self.kept_from, old = self._frames.popleft()
            self.bytes -= len(old)

    def stored(self, upto: int) -> None:
        """The store holds every event below ``upto``: frames wholly before it are let go."""
        while self._frames and self._frames[0][1] <= upto:
            self.bytes -= len(self._frames.popleft()[2])

    def since(self, start: int) -> Iterator[list[Any]]:
        """The kept events numbered ``start`` and after, frame by frame."""
        for first, _end, body in self._frames:
            events = self._unpack(body)[max(0, start - first) :]
            if events:
                yield events

    def clear(self) -> None:
        self._frames.clear()
        self.bytes = 0
