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

``compact`` merges small segments into ``compact~<id>~<lo>~<hi>.rstrace``, listing its sources
inside; readers leave out a segment a compacted one lists, so compaction is safe while writers
publish, and running it again finishes what a crash left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rollscope.store.schema import DDL, SHARD_SUFFIX, TRAINING_DDL

log = logging.getLogger("rollscope.store")

SEGMENTS, LIVE = "segments", "live"
DEFAULT_PUBLISH_INTERVAL_S = 5.0
SETTLE_S = 30.0  # a finished trajectory waits this long for a reward verl computes after it ends
_NAME = re.compile(r"^(?P<writer>[^~.][^~]*)~(?P<seq>\d+)~(?P<lo>-?\d+|n)~(?P<hi>-?\d+|n)"
                   + re.escape(SHARD_SUFFIX) + "$")  # fmt: skip
_LIVE_NAME = re.compile(r"^(?P<writer>[^~.][^~]*)~(?P<seq>\d+)~(?P<gen>\d+)" + re.escape(SHARD_SUFFIX) + "$")
COMPACT_WRITER = "compact"
_TRAINING_SEAL = "training~{}"  # the sealed table's entry for a segment of training records (keeps its number)
# (local database, ready ids, waiting ids, final) -> (ids to seal, ids to hold back, ids to drop)
Retain = Callable[[sqlite3.Connection, list[str], set[str], bool], tuple[list[str], set[str], list[str]]]


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


def _sources(path: Path, cache: dict[Path, list[tuple[str, str, int]]]) -> list[tuple[str, str, int]]:
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
            for name, writer, seq in _sources(s.path, cache):
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


def _write_file(target: Path, fill) -> None:
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


def _copy(db: sqlite3.Connection, source: Path | str, ids_sql: str, params: Iterable = (),
          training: str | None = None, training_params: Iterable = ()) -> None:  # fmt: skip
    """Copy whole trajectories (rows, spans) chosen by ``ids_sql`` over ``source`` into ``db``, and
    the training records chosen by the ``training`` condition (None: none)."""
    db.execute("ATTACH DATABASE ? AS src", (str(source),))
    try:
        db.execute("BEGIN")
        db.execute(f"CREATE TEMP TABLE pick AS {ids_sql}", tuple(params))
        db.execute("INSERT OR REPLACE INTO main.trajectories SELECT * FROM src.trajectories "
                   "WHERE id IN (SELECT id FROM pick)")  # fmt: skip
        db.execute("INSERT OR REPLACE INTO main.spans SELECT * FROM src.spans "
                   "WHERE trajectory_id IN (SELECT id FROM pick)")  # fmt: skip
        has_training = db.execute("SELECT 1 FROM src.sqlite_master WHERE name = 'training'").fetchone()
        if training is not None and has_training:
            db.execute(f"INSERT OR REPLACE INTO main.training SELECT * FROM src.training WHERE {training}",
                       tuple(training_params))  # fmt: skip
        db.execute("DROP TABLE pick")
        db.execute("COMMIT")
    finally:
        db.execute("DETACH DATABASE src")


class Publisher:
    """A writer's side: seals finished trajectories of its local database into segments of the
    shared directory, and keeps its live view there current. Used from the writer's own thread.

    Only what changed is looked at: rows added since the last publish (by rowid, which an upsert
    keeps) and those held back then (still running, or waiting for a reward)."""

    def __init__(self, db: sqlite3.Connection, local_path: Path, shared: Path, writer: str,
                 interval_s: float = DEFAULT_PUBLISH_INTERVAL_S, retain: Retain | None = None) -> None:  # fmt: skip
        """``retain``: which finished trajectories to seal and which to drop, decided on their
        rewards (``store.retention.at_sealing``); None seals them all."""
        self.db, self.local_path, self.shared, self.writer = db, local_path, shared, writer
        self.interval_s = interval_s
        self.retain = retain
        self.retention_dropped = 0  # finished trajectories a retention policy left out of the segments
        db.execute("CREATE TABLE IF NOT EXISTS sealed (id TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
        self.seq = db.execute("SELECT MAX(seq) FROM sealed").fetchone()[0] or 0
        self.mark = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM trajectories").fetchone()[0]
        unsealed = db.execute("SELECT id FROM trajectories WHERE id NOT IN (SELECT id FROM sealed)")
        self.waiting = {r[0] for r in unsealed}
        # the training records (a trainer's process) published so far, by rowid: kept with the data
        found = db.execute("SELECT value FROM meta WHERE key = 'training_published'").fetchone()
        self.training_mark = int(found[0]) if found else 0
        self.gen = 0
        self.live_shown = True  # a view of this writer may be in the shared directory
        self.next_at = time.monotonic() + interval_s
        self.rewards_after_seal = 0  # kept in the local database only: a sealed segment never changes
        for d in (SEGMENTS, LIVE):  # the layout is there before the first segment: readers see live views
            (shared / d).mkdir(parents=True, exist_ok=True)

    def note_rewards(self, ids: list[str]) -> None:
        """Count rewards for trajectories already sealed (they arrived more than ``SETTLE_S`` after
        their trajectory ended), said once: the shared directory shows those without them."""
        n = self.db.execute("SELECT COUNT(*) FROM sealed WHERE seq > 0 AND id IN (SELECT value FROM json_each(?))",
                            (json.dumps(ids),)).fetchone()[0]  # fmt: skip
        if n and not self.rewards_after_seal:
            log.warning("trace store: %d reward(s) arrived more than %.0f s after their trajectory ended and was "
                        "published to %s; they are in %s only (further ones counted: rewards_after_seal)",
                        n, SETTLE_S, self.shared, self.local_path)  # fmt: skip
        self.rewards_after_seal += n

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def publish(self, final: bool = False) -> int:
        """Seal what is finished (everything when ``final``) and refresh the live view; returns the
        trajectories sealed. A failure (the shared directory gone, full) is logged, and retried
        at the next publish: the local database keeps everything meanwhile."""
        self.next_at = time.monotonic() + self.interval_s
        try:
            rows = self.db.execute("SELECT rowid, id, status, reward, end_ns FROM trajectories WHERE rowid > ?",
                                   (self.mark,)).fetchall()  # fmt: skip
            if self.waiting:
                marks = ",".join("?" * len(self.waiting))
                rows += self.db.execute(f"SELECT rowid, id, status, reward, end_ns FROM trajectories "
                                        f"WHERE id IN ({marks}) AND rowid <= ?",
                                        [*self.waiting, self.mark]).fetchall()  # fmt: skip
            settled_before = time.time_ns() - int(SETTLE_S * 1e9)
            ready, waiting = [], set()
            for rowid, tid, status, reward, end_ns in rows:
                self.mark = max(self.mark, rowid)
                if final or (status != "running" and (reward is not None or (end_ns or 0) < settled_before)):
                    ready.append(tid)
                else:
                    waiting.add(tid)
            if self.retain is not None and ready:
                ready, held, dropped = self.retain(self.db, ready, waiting, final)
                waiting |= held
                # never published: marked as handled (number 0), counted
                self.db.execute("INSERT OR IGNORE INTO sealed SELECT value, 0 FROM json_each(?)",
                                (json.dumps(dropped),))  # fmt: skip
                self.retention_dropped += len(dropped)
            if ready:
                self._seal(ready)
            self._seal_training()
            self.waiting = waiting
            self._live_view(final)
        except (OSError, sqlite3.Error) as exc:
            log.warning("trace store: publishing to %s failed (%s); the local store %s keeps it, retried",
                        self.shared, exc, self.local_path)  # fmt: skip
            return 0
        return len(ready)

    def _seal(self, ids: list[str]) -> None:
        marks = ",".join("?" * len(ids))
        steps = self.db.execute(f"SELECT MIN(step), MAX(step), COUNT(step) = COUNT(*) FROM trajectories "
                                f"WHERE id IN ({marks})", ids).fetchone()  # fmt: skip
        lo, hi = (steps[0], steps[1]) if steps[2] and all(type(v) is int for v in steps[:2]) else ("n", "n")
        seq = self.seq + 1
        target = self.shared / SEGMENTS / f"{self.writer}~{seq:08d}~{lo}~{hi}{SHARD_SUFFIX}"
        _write_file(target, lambda db: _copy(db, self.local_path, "SELECT value AS id FROM json_each(?)",
                                             (json.dumps(ids),)))  # fmt: skip
        # after the rename: a crash in between is reconciled from the segment (``reconcile``)
        self.db.execute("INSERT OR IGNORE INTO sealed SELECT value, ? FROM json_each(?)", (seq, json.dumps(ids)))
        self.seq = seq

    def _seal_training(self) -> None:
        """The training records written since the last publish, as a segment of their own (they
        join trajectories other writers published); a record re-sent later is published again,
        and the reader takes the newest."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'training'").fetchone():
            return
        upto = self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM training").fetchone()[0]
        if upto <= self.training_mark:
            return
        seq = self.seq + 1
        target = self.shared / SEGMENTS / f"{self.writer}~{seq:08d}~n~n{SHARD_SUFFIX}"
        _write_file(target, lambda db: _copy(db, self.local_path, "SELECT NULL AS id WHERE 0", (),
                                             "rowid > ? AND rowid <= ?", (self.training_mark, upto)))  # fmt: skip
        self.db.execute("BEGIN")
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('training_published', ?)", (str(upto),))
        self.db.execute("INSERT OR IGNORE INTO sealed VALUES (?, ?)", (_TRAINING_SEAL.format(seq), seq))
        self.db.execute("COMMIT")
        self.seq, self.training_mark = seq, upto

    def training_pending(self) -> bool:
        """Whether training records are written here that no segment holds yet."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'training'").fetchone():
            return False
        return self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM training").fetchone()[0] > self.training_mark

    def _live_view(self, final: bool) -> None:
        """The writer's unsealed trajectories as one file (none needed when there are none)."""
        if not self.waiting and not self.live_shown:
            return
        live = self.shared / LIVE
        old = sorted(live.glob(f"{self.writer}~*{SHARD_SUFFIX}")) if live.is_dir() else []
        target = None
        if self.waiting and not final:
            self.gen += 1
            target = live / f"{self.writer}~{self.seq:08d}~{self.gen:08d}{SHARD_SUFFIX}"
            _write_file(target, lambda db: _copy(db, self.local_path, "SELECT value AS id FROM json_each(?)",
                                                 (json.dumps(sorted(self.waiting)),)))  # fmt: skip
        self.live_shown = target is not None
        for path in old:  # readers that opened one keep reading it: it is never written again
            if path != target:
                with contextlib.suppress(OSError):
                    path.unlink()


def reconcile(db: sqlite3.Connection, shared: Path, writer: str) -> None:
    """After a crash: the segments this writer renamed into place but did not record as sealed."""
    db.execute("CREATE TABLE IF NOT EXISTS sealed (id TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
    known = db.execute("SELECT MAX(seq) FROM sealed").fetchone()[0] or 0
    for s in map(parse, sorted((shared / SEGMENTS).glob(f"{writer}~*{SHARD_SUFFIX}"))):
        if s is not None and s.writer == writer and s.seq > known:
            seg = open_immutable(s.path)
            ids = [r[0] for r in seg.execute("SELECT id FROM trajectories")]
            trained = seg.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'training'").fetchone()[0]
            seg.close()
            # (a segment of training records only holds no trajectory: its number is kept all the same)
            ids = ids or ([_TRAINING_SEAL.format(s.seq)] if trained else [])
            db.execute("INSERT OR IGNORE INTO sealed SELECT value, ? FROM json_each(?)", (s.seq, json.dumps(ids)))


def recover(local_dir: Path, shared: Path, *, alive: set[int] | None = None) -> list[tuple[Path, int]]:
    """Publish what writers that died left in ``local_dir`` (their live databases), then remove
    those databases. A database whose writer still runs on this host is left alone. Returns
    (database, trajectories published) per database recovered."""
    import socket

    host = socket.gethostname()
    done = []
    for path in sorted(Path(local_dir).glob(f"*{SHARD_SUFFIX}")):
        writer = path.name[: -len(SHARD_SUFFIX)]
        pid = _pid_of(writer, host)
        if pid is not None and ((alive is not None and pid in alive) or (alive is None and _running(pid))):
            continue
        lock = open(f"{path}.lock", "w")  # noqa: SIM115  (held across the recovery)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process on this node is recovering it
            lock.close()
            continue
        try:
            db = sqlite3.connect(path, isolation_level=None)
            try:
                reconcile(db, shared, writer)
                publisher = Publisher(db, path, shared, writer)
                sealed = publisher.publish(final=True)
                unsealed = "SELECT COUNT(*) FROM trajectories WHERE id NOT IN (SELECT id FROM sealed)"
                left = db.execute(unsealed).fetchone()[0] + publisher.training_pending()
            finally:
                db.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}.lock")
            lock.close()
        if left == 0:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{path}{suffix}").unlink()
        done.append((path, sealed))
    return done


def _pid_of(writer: str, host: str) -> int | None:
    """The pid in a writer name made on this host (``<host>-<pid>-<random>``), else None."""
    prefix = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)[:40] + "-"
    if not writer.startswith(prefix):
        return None
    pid = writer[len(prefix) :].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def compact(directory: Path, *, min_segments: int = 2, target_bytes: int = 64 * 2**20,
            drop: Iterable[str] = ()) -> list[Path]:  # fmt: skip
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
                _copy(db, f"{s.path.resolve().as_uri()}?mode=ro&immutable=1",
                      "SELECT id FROM src.trajectories WHERE id NOT IN (SELECT value FROM json_each(?))", (dropped,),
                      "trajectory_id NOT IN (SELECT value FROM json_each(?))", (dropped,))  # fmt: skip
                for name, writer, seq in (_sources(s.path, cache) if s.writer == COMPACT_WRITER
                                          else [(s.path.name, s.writer, s.seq)]):  # fmt: skip
                    db.execute("INSERT OR IGNORE INTO sources VALUES (?, ?, ?)", (name, writer, seq))

        _write_file(target, fill)
        made.append(target)
        for s in batch:
            with contextlib.suppress(FileNotFoundError):
                s.path.unlink()
    return made


def _holds_any(path: Path, ids: str) -> bool:
    """Whether the segment at ``path`` holds a trajectory or training record of ``ids`` (JSON)."""
    db = open_immutable(path)
    try:
        found = db.execute("SELECT 1 FROM trajectories WHERE id IN (SELECT value FROM json_each(?)) LIMIT 1",
                           (ids,)).fetchone()  # fmt: skip
        if not found and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'training'").fetchone():
            found = db.execute("SELECT 1 FROM training WHERE trajectory_id IN (SELECT value FROM json_each(?)) "
                               "LIMIT 1", (ids,)).fetchone()  # fmt: skip
        return bool(found)
    finally:
        db.close()


def _remove_replaced(directory: Path, cache: dict[Path, list]) -> None:
    """Sources a compacted segment already holds, left by a compaction that stopped early."""
    listed = sorted((directory / SEGMENTS).glob(f"*{SHARD_SUFFIX}"))
    names = {name for p in listed if p.name.startswith(COMPACT_WRITER + "~") for name, _, _ in _sources(p, cache)}
    for p in listed:
        if p.name in names:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
