"""Compaction of the shared-filesystem layout: small sealed segments merged into
``compact~<id>~<lo>~<hi>.rstrace``, which lists its sources inside; readers leave out a segment a
compacted one lists (``segments.visible``), so compaction is safe while writers publish, and
running it again finishes what a crash left. With ``drop``, it is also how retention
(``store.retention``) removes groups from sealed segments.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from rollscope.store.schema import SHARD_SUFFIX
from rollscope.store.segments import (
    COMPACT_WRITER,
    SEGMENTS,
    Segment,
    copy_trajectories,
    open_immutable,
    sources_of,
    visible,
    write_segment,
)


def compact(
    directory: Path, *, min_segments: int = 2, target_bytes: int = 64 * 2**20, drop: Iterable[str] = ()
) -> list[Path]:
    """Merge sealed segments into ``compact~...`` segments of up to ``target_bytes``; returns the new
    files. Safe while writers publish: readers leave out what a compacted segment lists as its
    sources; the sources are removed afterwards (and by the next run, if a crash intervened).
    ``drop``: trajectories (and their training records) left out of what is written — with it,
    every segment holding one is rewritten, however few there are (``store.retention``)."""
    cache: dict[Path, list] = {}
    segments, _ = visible(directory, cache)
    _remove_replaced(directory, cache)
    dropped = json.dumps(sorted(set(drop)))
    if dropped != "[]":
        segments = [s for s in segments if _holds_any(s.path, dropped)]
        min_segments = 1
    batches: list[list[Segment]] = [[]]
    size = 0
    for s in segments:
        length = s.path.stat().st_size
        if batches[-1] and size + length > target_bytes:
            batches.append([])
            size = 0
        batches[-1].append(s)
        size += length
    made = []
    for batch in batches:
        if len(batch) < min_segments:
            continue
        steps = [v for s in batch for v in (s.lo, s.hi)]
        lo, hi = (min(steps), max(steps)) if all(v is not None for v in steps) else ("n", "n")
        name = f"{COMPACT_WRITER}~{time.time_ns()}{os.getpid()}~{lo}~{hi}{SHARD_SUFFIX}"
        target = directory / SEGMENTS / name

        def fill(db: sqlite3.Connection, batch: list[Segment] = batch) -> None:
            db.execute("CREATE TABLE sources (name TEXT PRIMARY KEY, writer TEXT NOT NULL, seq INTEGER NOT NULL)")
            for s in batch:
                copy_trajectories(
                    db,
                    f"{s.path.resolve().as_uri()}?mode=ro&immutable=1",
                    "SELECT id FROM src.trajectories WHERE id NOT IN (SELECT value FROM json_each(?))",
                    (dropped,),
                    "trajectory_id NOT IN (SELECT value FROM json_each(?))",
                    (dropped,),
                )
                for name, writer, seq in (
                    sources_of(s.path, cache) if s.writer == COMPACT_WRITER else [(s.path.name, s.writer, s.seq)]
                ):
                    db.execute("INSERT OR IGNORE INTO sources VALUES (?, ?, ?)", (name, writer, seq))

        write_segment(target, fill)
        made.append(target)
        for s in batch:
            with contextlib.suppress(FileNotFoundError):
                s.path.unlink()
    return made


def _holds_any(path: Path, ids: str) -> bool:
    """Whether the segment at ``path`` holds a trajectory or training record of ``ids`` (JSON)."""
    db = open_immutable(path)
    try:
        found = db.execute(
            "SELECT 1 FROM trajectories WHERE id IN (SELECT value FROM json_each(?)) LIMIT 1", (ids,)
        ).fetchone()
        if not found and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'training'").fetchone():
            found = db.execute(
                "SELECT 1 FROM training WHERE trajectory_id IN (SELECT value FROM json_each(?)) LIMIT 1", (ids,)
            ).fetchone()
        return bool(found)
    finally:
        db.close()


def _remove_replaced(directory: Path, cache: dict[Path, list]) -> None:
    """Sources a compacted segment already holds, left by a compaction that stopped early."""
    listed = sorted((directory / SEGMENTS).glob(f"*{SHARD_SUFFIX}"))
    names = {name for p in listed if p.name.startswith(COMPACT_WRITER + "~") for name, _, _ in sources_of(p, cache)}
    for p in listed:
        if p.name in names:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
