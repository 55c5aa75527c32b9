"""Sealed segments: how a store on a shared filesystem (NFS, Lustre, GPFS, a cloud file store) is
written by many hosts and read by others safely.

A writer keeps its live SQLite database on node-local disk (WAL needs one host's shared memory)
and publishes into the shared directory, every ``publish_interval_s`` and at flush and close:

- ``segments/<writer>~<seq>~<lo>~<hi>.rstrace``: the trajectories it finished since the last
  segment, each whole (row and spans) and each in exactly one segment; ``lo``-``hi`` is the step
  range inside (readers skip segments outside a step they are asked for);
- ``live/<writer>~<seq>~<gen>.rstrace``: its trajectories still running (or waiting for their
  reward), consistent with its segments up to ``seq``.

Every file is written under a dot-name, fsynced and renamed into place, so no reader ever sees a
half-written one; once there it never changes. Readers open only these immutable files
(``mode=ro&immutable=1``), never another process's database. A live view counts only when its
``seq`` is its writer's newest segment (else a trajectory could show twice while the next one is
renamed in), so running trajectories from other hosts show within one publish interval.

A compacted segment (``compaction``) lists the segments it replaced inside; readers leave those
out (``visible``). This module holds the layout, what readers see of it, and how a segment file is
made; a writer's side is ``publish`` (and ``recovery`` for writers that died), merging is
``compaction``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rollscope.store.schema import DDL, SHARD_SUFFIX, TRAINING_DDL

SEGMENTS, LIVE = "segments", "live"
_NAME = re.compile(
    r"^(?P<writer>[^~.][^~]*)~(?P<seq>\d+)~(?P<lo>-?\d+|n)~(?P<hi>-?\d+|n)" + re.escape(SHARD_SUFFIX) + "$"
)
_LIVE_NAME = re.compile(r"^(?P<writer>[^~.][^~]*)~(?P<seq>\d+)~(?P<gen>\d+)" + re.escape(SHARD_SUFFIX) + "$")
COMPACT_WRITER = "compact"


@dataclass(frozen=True)
class Segment:
    path: Path
    writer: str
    seq: int
    lo: int | None
    hi: int | None

    def may_hold(self, step: int) -> bool:
        return self.lo is None or self.hi is None or self.lo <= step <= self.hi


def parse(path: Path) -> Segment | None:
    m = _NAME.match(path.name)
    if m is None:
        return None
    lo, hi = (None if m[k] == "n" else int(m[k]) for k in ("lo", "hi"))
    return Segment(path, m["writer"], int(m["seq"]), lo, hi)


def is_segmented(directory: Path) -> bool:
    return (directory / SEGMENTS).is_dir() or (directory / LIVE).is_dir()


def open_immutable(path: Path) -> sqlite3.Connection:
    """A published file, read as the immutable file it is: no lock, no journal, no -shm."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def sources_of(path: Path, cache: dict[Path, list[tuple[str, str, int]]]) -> list[tuple[str, str, int]]:
    found = cache.get(path)
    if found is None:
        db = open_immutable(path)
        try:
            found = [tuple(r) for r in db.execute("SELECT name, writer, seq FROM sources")]
        except sqlite3.DatabaseError:
            found = []
        finally:
            db.close()
        cache[path] = found
    return found


def visible(directory: Path, cache: dict[Path, list]) -> tuple[list[Segment], list[Path]]:
    """(the segments to read, the live views to read) of a segmented store, as listed now."""
    folder = directory / SEGMENTS
    segments = [s for s in (parse(folder / name) for name in _names(folder)) if s is not None]
    replaced: set[str] = set()
    newest: dict[str, int] = {}
    for s in segments:
        if s.writer == COMPACT_WRITER:
            for name, writer, seq in sources_of(s.path, cache):
                replaced.add(name)
                newest[writer] = max(newest.get(writer, 0), seq)
        else:
            newest[s.writer] = max(newest.get(s.writer, 0), s.seq)
    segments = [s for s in segments if s.path.name not in replaced]
    views: dict[str, tuple[int, Path]] = {}
    live = directory / LIVE
    for path in (live / name for name in _names(live)):
        m = _LIVE_NAME.match(path.name)
        if m is None or int(m["seq"]) != newest.get(m["writer"], 0):
            continue  # a view older than its writer's newest segment would repeat what that segment holds
        if int(m["gen"]) >= views.get(m["writer"], (-1, path))[0]:
            views[m["writer"]] = (int(m["gen"]), path)
    return segments, [p for _, p in views.values()]


def _names(folder: Path) -> list[str]:
    """The store files in ``folder``, by name (sorting names, not Paths: 1,000 segments are listed
    at every query)."""
    try:
        with os.scandir(folder) as entries:
            return sorted(e.name for e in entries if e.name.endswith(SHARD_SUFFIX))
    except FileNotFoundError:
        return []


def _split_ddl() -> tuple[str, str]:
    """The store's DDL as (tables, indexes); a segment always has the training table (it may hold
    a trainer's records)."""
    lines = "\n".join(line for line in (DDL + TRAINING_DDL).splitlines() if not line.lstrip().startswith("--"))
    statements = [s.strip() for s in lines.split(";") if s.strip()]
    indexes = [s for s in statements if s.upper().startswith("CREATE INDEX")]
    tables = [s for s in statements if s not in indexes]
    return ";\n".join(tables) + ";", ";\n".join(indexes) + ";"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_segment(target: Path, fill) -> None:
    """Create ``target`` as a new database, atomically: built under a dot-name, fsynced, renamed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    db = sqlite3.connect(f"file:{temp}", uri=True, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=OFF")  # a crash leaves a dot-file nobody reads
        tables, indexes = _split_ddl()
        db.executescript(tables)
        fill(db)
        db.executescript(indexes)  # built once over the rows: cheaper than kept up row by row
        db.execute("PRAGMA journal_mode=DELETE")
    finally:
        db.close()
    _fsync(temp)
    temp.replace(target)
    _fsync(target.parent)


def copy_trajectories(
    db: sqlite3.Connection,
    source: Path | str,
    ids_sql: str,
    params: Iterable = (),
    training: str | None = None,
    training_params: Iterable = (),
) -> None:
    """Copy whole trajectories (rows, spans) chosen by ``ids_sql`` over ``source`` into ``db``, and
    the training records chosen by the ``training`` condition (None: none)."""
    db.execute("ATTACH DATABASE ? AS src", (str(source),))
    try:
        db.execute("BEGIN")
        db.execute(f"CREATE TEMP TABLE pick AS {ids_sql}", tuple(params))
        db.execute(
            "INSERT OR REPLACE INTO main.trajectories SELECT * FROM src.trajectories WHERE id IN (SELECT id FROM pick)"
        )
        db.execute(
            "INSERT OR REPLACE INTO main.spans SELECT * FROM src.spans WHERE trajectory_id IN (SELECT id FROM pick)"
        )
        has_training = db.execute("SELECT 1 FROM src.sqlite_master WHERE name = 'training'").fetchone()
        if training is not None and has_training:
            db.execute(
                f"INSERT OR REPLACE INTO main.training SELECT * FROM src.training WHERE {training}",
                tuple(training_params),
            )
        db.execute("DROP TABLE pick")
        db.execute("COMMIT")
    finally:
        db.execute("DETACH DATABASE src")
