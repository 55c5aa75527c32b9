"""Where a remote backend's events wait on disk when they arrive faster than it can send them.

A training step's rollouts end together (256 prompts x 5 is 1,280 trajectories within seconds);
Weave over HTTP takes some 600 calls a second. What does not fit in a remote backend's queue in
memory is appended here, in order, and read back as the backend catches up, so a burst costs disk
space and delivery time, never trajectories. Memory stays bounded: one batch being read back (and,
before the spool, the trajectories still open).

Layout: one directory per spool, ``<root>/<destination hash>/<pid>-<random>/``, holding append-only
segment files of records (length, CRC-32, a batch of events in the trace wire's encoding), a
``cursor`` file (the segment and offset up to which the backend confirmed delivery with a flush,
replaced atomically) and a ``lock`` file its owner holds with ``flock``. A spool left behind by a
process that died (its lock free) is adopted by the next spool opened for the same destination,
which sends the rest from its cursor: nothing skipped, and after a restart at most the records
read since the last confirmed flush are sent again (Weave's and OpenTelemetry's ids are derived
from rollscope's, so those land on the same calls and spans). A torn record at a segment's end
(the writer died mid-write) ends that segment. Writes are not fsync'ed: a process's death loses
nothing written; a machine's crash may lose what the page cache still held.

Control events (a flush's marker, the sidecar's positions) are objects of this process: they stay
in memory, each attached to the count of events written before it, and are handed out in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import struct
import tempfile
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollscope._cache import cache_dir
from rollscope.tracing import _wire as wire
from rollscope.tracing._events import REWARD, SPAN_START, TRAINING, TRAJECTORY_END, TRAJECTORY_START
from rollscope.tracing.spans import Span

log = logging.getLogger("rollscope.tracing")

SEGMENT_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct("<II")  # length, crc32 of the body
_CURSOR = "cursor"
_LOCK = "lock"
DEAD_LETTERS = "dead-letters"  # beside a destination's spools: records that could not be read
# A record is at most this long (one batch of shaped events is far less): a length past it is not
# one that was written, and nothing of that size is allocated to read it.
MAX_RECORD_BYTES = 256 * 1024 * 1024


def spool_root() -> Path:
    """``ROLLSCOPE_SPOOL_DIR``, else the user's cache (``$XDG_CACHE_HOME/rollscope/spool``)."""
    configured = os.environ.get("ROLLSCOPE_SPOOL_DIR")
    if configured:
        return Path(configured)
    return cache_dir() / "spool"


def destination_dir(root: Path, destination: str) -> Path:
    return root / hashlib.sha256(destination.encode()).hexdigest()[:16]


class _SpoolDir:
    """One directory of segments: written by its owner, read from its cursor on."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self.lock_fd = lock_fd
        self.read_segment, self.read_offset = self._load_cursor()
        self.confirmed = (self.read_segment, self.read_offset)
        self._file: Any = None
        self._file_segment = -1
        self.dead = 0  # records that could not be read, kept in the dead letters

    def _load_cursor(self) -> tuple[int, int]:
        try:
            segment, offset = (self.path / _CURSOR).read_text().split()
            return int(segment), int(offset)
        except (OSError, ValueError):
            segments = self.segments()
            return (segments[0] if segments else 0), 0

    def segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.path.glob("*.seg"))

    def segment_path(self, n: int) -> Path:
        return self.path / f"{n:08d}.seg"

    def read(self) -> list[Any] | None:
        """The next record's events (None: nothing more here now). A spool may be another
        process's (an orphan adopted): a record that does not decode to events is moved to the
        dead letters beside the spools, counted (``dead``) and said, and reading goes on."""
        while True:
            f = self._reader()
            if f is not None:
                f.seek(self.read_offset)
                header = f.read(_HEADER.size)
                if len(header) == _HEADER.size:
                    length, crc = _HEADER.unpack(header)
                    body = f.read(length) if length <= MAX_RECORD_BYTES else b""
                    if len(body) == length and zlib.crc32(body) == crc:
                        self.read_offset += _HEADER.size + length
                        try:
                            return _events_of(wire.decode(body))
                        except Exception as exc:  # crafted or corrupt: that record only
                            self._dead_letter(body, exc)
                            continue
                    if length > MAX_RECORD_BYTES:
                        self._dead_letter(header, ValueError(f"a record that says it has {length:,} bytes"))
            later = [s for s in self.segments() if s > self.read_segment]
            if not later:
                return None
            self.read_segment, self.read_offset = later[0], 0  # a torn tail ends its segment

    def _dead_letter(self, record: bytes, problem: Exception) -> None:
        """Keep an unreadable record apart (``<destination>/dead-letters/``), count it, say it."""
        folder = self.path.parent / DEAD_LETTERS
        name = f"{self.path.name}-{self.read_segment:08d}-{self.read_offset}.record"
        with contextlib.suppress(OSError):
            folder.mkdir(exist_ok=True)
            (folder / name).write_bytes(record)
        self.dead += 1
        log.warning(
            "trace spool: a record in %s could not be read (%s: %s); kept in %s, the rest is sent",
            self.segment_path(self.read_segment),
            type(problem).__name__,
            str(problem)[:200],
            folder / name,
        )

    def _reader(self) -> Any:
        """The open file of the segment being read (kept open: a record at a time is read)."""
        if self._file is not None and self._file_segment == self.read_segment:
            return self._file
        self.close_reader()
        try:
            self._file = open(self.segment_path(self.read_segment), "rb")  # noqa: SIM115
        except FileNotFoundError:
            return None
        self._file_segment = self.read_segment
        return self._file

    def close_reader(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def confirm(self) -> None:
        """What was read so far was delivered: persist the cursor, delete finished segments."""
        if self.confirmed == (self.read_segment, self.read_offset):
            return
        self.confirmed = (self.read_segment, self.read_offset)
        tmp = self.path / f"{_CURSOR}.tmp"
        tmp.write_text(f"{self.read_segment} {self.read_offset}")
        os.replace(tmp, self.path / _CURSOR)
        for n in self.segments():
            if n < self.read_segment:
                self.segment_path(n).unlink(missing_ok=True)

    def remove(self) -> None:
        self.close_reader()
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self.lock_fd)


class Spool:
    """A FIFO of event records on disk for one destination, the orphans of dead processes in front.

    Not thread-safe: the owning worker serializes ``append`` (from the exporter's thread) and
    ``read`` (from its own) with its lock.
    """

    def __init__(self, destination: str, root: Path | None = None) -> None:
        self.destination = destination
        self.root = destination_dir(root or spool_root(), destination)
        self.root.mkdir(parents=True, exist_ok=True)
        self.own = self._create()
        self.adopted: deque[_SpoolDir] = deque(self._orphans())
        self.from_orphan = False  # the last read came from an adopted spool (``read``)
        self._segment = 0
        self._file: Any = None
        self._written = 0  # bytes in the open segment
        self.written_events = 0
        self.read_events = 0
        self.dropped = 0  # events that could not be written (a full disk), counted exactly
        self._controls: deque[tuple[int, Any]] = deque()  # (events written before it, control event)

    def _create(self) -> _SpoolDir:
        path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=self.root))
        fd = os.open(path / _LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return _SpoolDir(path, fd)

    def _orphans(self) -> list[_SpoolDir]:
        """Spools of this destination whose owner is gone (their lock is free), oldest first."""
        found = []
        for path in sorted(self.root.iterdir(), key=_mtime):
            if path == self.own.path or not path.is_dir() or path.name == DEAD_LETTERS:
                continue
            try:
                fd = os.open(path / _LOCK, os.O_CREAT | os.O_RDWR, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # a live owner
                continue
            found.append(_SpoolDir(path, fd))
        if found:
            log.warning(
                "trace spool: sending on what %d earlier process(es) left for %s (%s)",
                len(found),
                self.destination,
                self.root,
            )
        return found

    @property
    def pending(self) -> int:
        """Events written here and not read back yet (the orphans' are not known until read)."""
        return self.written_events - self.read_events

    def has_data(self) -> bool:
        return bool(self.adopted) or self.pending > 0 or bool(self._controls)

    def append(self, records: list[list[Any]], controls: Sequence[Any] = ()) -> None:
        """Each record (a list of events, read back whole) on disk, then ``controls`` in memory,
        in their place after them."""
        for n, events in enumerate(records):
            try:
                self._write(events)
            except Exception as exc:  # a full disk, a failing device: these events are lost, said
                lost = sum(map(len, records[n:]))
                if not self.dropped:
                    log.warning(
                        "trace spool %s: cannot write (%s: %s); %d events lost, further losses counted",
                        self.own.path,
                        type(exc).__name__,
                        exc,
                        lost,
                    )
                self.dropped += lost
                self._next_segment()  # a torn record ends its segment; the next write starts one
                break
        self._controls.extend((self.written_events, c) for c in controls)

    def _next_segment(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
            self._segment += 1

    def _write(self, events: list[Any]) -> None:
        body = wire.encode(events)
        if self._file is not None and self._written >= SEGMENT_BYTES:
            self._next_segment()
        if self._file is None:
            self._file = open(self.own.segment_path(self._segment), "ab", buffering=0)  # noqa: SIM115
            self._written = 0
        record = _HEADER.pack(len(body), zlib.crc32(body)) + body
        if self._file.write(record) != len(record):
            raise OSError(f"short write to {self.own.segment_path(self._segment)}")
        self._written += _HEADER.size + len(body)
        self.written_events += len(events)

    def read(self, max_events: int) -> list[Any]:
        """The next whole records, about ``max_events`` events, in order (the orphans' first), with
        this process's controls in their places. ``from_orphan`` says whether they came from a
        spool a dead process left: its owner may have sent them already."""
        while self.adopted:
            events = self.adopted[0].read()
            if events is not None:
                self.from_orphan = True
                return events
            self.adopted.popleft().remove()
        self.from_orphan = False
        out: list[Any] = []
        while True:
            while self._controls and self._controls[0][0] <= self.read_events:
                out.append(self._controls.popleft()[1])
            if self.pending <= 0 or len(out) >= max_events:
                return out
            events = self.own.read()
            if events is None:  # written but unreadable (a torn record): counted as lost
                self.dropped += self.pending
                self.read_events = self.written_events
                continue
            self.read_events += len(events)
            out.extend(events)

    def confirm(self) -> None:
        """Everything read so far was delivered (the backend's flush returned)."""
        for d in (*self.adopted, self.own):
            with contextlib.suppress(OSError):
                d.confirm()

    def abandon(self) -> None:
        """In a forked child: let go of the parent's files, so its lock ends with the parent."""
        for d in (self.own, *self.adopted):
            with contextlib.suppress(OSError):
                os.close(d.lock_fd)

    def close(self) -> str | None:
        """Remove the spool when everything in it was delivered; otherwise keep it for the next
        process (its lock released) and return its path."""
        self._next_segment()
        if self.pending <= 0 and not self.adopted:
            self.own.remove()
            return None
        for d in (self.own, *self.adopted):  # the cursors stay where the last confirmed flush put them
            d.close_reader()
            os.close(d.lock_fd)
        return str(self.own.path)


def _events_of(decoded: Any) -> list[Any]:
    """A record's events, checked for the shapes ``append`` writes: a list of spans and event
    tuples of a known kind (anything else would fail the backend that reads it)."""
    if type(decoded) is not list:
        raise ValueError(f"a record of a {type(decoded).__name__}, not a list of events")
    for event in decoded:
        if type(event) is not Span and not (type(event) is tuple and event and event[0] in _EVENT_KINDS):
            raise ValueError(f"an event of a {type(event).__name__} ({str(event)[:60]!r})")
    return decoded


# What ``append`` writes (a flush's marker and the sidecar's positions stay in memory).
_EVENT_KINDS = frozenset({TRAJECTORY_START, SPAN_START, TRAJECTORY_END, REWARD, TRAINING})


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
