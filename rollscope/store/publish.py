"""A writer's side of the shared-filesystem layout (``segments``): its finished trajectories sealed
from its node-local database into segments of the shared directory, and its live view kept
current there, every ``publish_interval_s`` and at flush and close."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from rollscope.store.schema import SHARD_SUFFIX
from rollscope.store.segments import LIVE, SEGMENTS, copy_trajectories, write_segment

log = logging.getLogger("rollscope.store")

DEFAULT_PUBLISH_INTERVAL_S = 5.0
SETTLE_S = 30.0  # a finished trajectory waits this long for a reward verl computes after it ends
TRAINING_SEAL = "training~{}"  # the sealed table's entry for a segment of training records (keeps its number)
# (local database, ready ids, waiting ids, final) -> (ids to seal, ids to hold back, ids to drop)
_LISTED = "SELECT value AS id FROM json_each(?)"  # the trajectories of a JSON list of ids
Retain = Callable[[sqlite3.Connection, list[str], set[str], bool], tuple[list[str], set[str], list[str]]]


class Publisher:
    """A writer's side: seals finished trajectories of its local database into segments of the
    shared directory, and keeps its live view there current. Used from the writer's own thread.

    Only what changed is looked at: rows added since the last publish (by rowid, which an upsert
    keeps) and those held back then (still running, or waiting for a reward)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        local_path: Path,
        shared: Path,
        writer: str,
        interval_s: float = DEFAULT_PUBLISH_INTERVAL_S,
        retain: Retain | None = None,
    ) -> None:
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
        n = self.db.execute(
            "SELECT COUNT(*) FROM sealed WHERE seq > 0 AND id IN (SELECT value FROM json_each(?))", (json.dumps(ids),)
        ).fetchone()[0]
        if n and not self.rewards_after_seal:
            log.warning(
                "trace store: %d reward(s) arrived more than %.0f s after their trajectory ended and was "
                "published to %s; they are in %s only (further ones counted: rewards_after_seal)",
                n,
                SETTLE_S,
                self.shared,
                self.local_path,
            )
        self.rewards_after_seal += n

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def publish(self, final: bool = False) -> int:
        """Seal what is finished (everything when ``final``) and refresh the live view; returns the
        trajectories sealed. A failure (the shared directory gone, full) is logged, and retried
        at the next publish: the local database keeps everything meanwhile."""
        self.next_at = time.monotonic() + self.interval_s
        try:
            rows = self.db.execute(
                "SELECT rowid, id, status, reward, end_ns FROM trajectories WHERE rowid > ?", (self.mark,)
            ).fetchall()
            if self.waiting:
                marks = ",".join("?" * len(self.waiting))
                rows += self.db.execute(
                    f"SELECT rowid, id, status, reward, end_ns FROM trajectories WHERE id IN ({marks}) AND rowid <= ?",
                    [*self.waiting, self.mark],
                ).fetchall()
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
                self.db.execute(
                    "INSERT OR IGNORE INTO sealed SELECT value, 0 FROM json_each(?)", (json.dumps(dropped),)
                )
                self.retention_dropped += len(dropped)
            if ready:
                self._seal(ready)
            self._seal_training()
            self.waiting = waiting
            self._live_view(final)
        except (OSError, sqlite3.Error) as exc:
            log.warning(
                "trace store: publishing to %s failed (%s); the local store %s keeps it, retried",
                self.shared,
                exc,
                self.local_path,
            )
            return 0
        return len(ready)

    def _seal(self, ids: list[str]) -> None:
        marks = ",".join("?" * len(ids))
        steps = self.db.execute(
            f"SELECT MIN(step), MAX(step), COUNT(step) = COUNT(*) FROM trajectories WHERE id IN ({marks})", ids
        ).fetchone()
        lo, hi = (steps[0], steps[1]) if steps[2] and all(type(v) is int for v in steps[:2]) else ("n", "n")
        seq = self.seq + 1
        target = self.shared / SEGMENTS / f"{self.writer}~{seq:08d}~{lo}~{hi}{SHARD_SUFFIX}"
        write_segment(target, lambda db: copy_trajectories(db, self.local_path, _LISTED, (json.dumps(ids),)))
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
        write_segment(
            target,
            lambda db: copy_trajectories(
                db,
                self.local_path,
                "SELECT NULL AS id WHERE 0",
                (),
                "rowid > ? AND rowid <= ?",
                (self.training_mark, upto),
            ),
        )
        self.db.execute("BEGIN")
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('training_published', ?)", (str(upto),))
        self.db.execute("INSERT OR IGNORE INTO sealed VALUES (?, ?)", (TRAINING_SEAL.format(seq), seq))
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
            write_segment(
                target, lambda db: copy_trajectories(db, self.local_path, _LISTED, (json.dumps(sorted(self.waiting)),))
            )
        self.live_shown = target is not None
        for path in old:  # readers that opened one keep reading it: it is never written again
            if path != target:
                with contextlib.suppress(OSError):
                    path.unlink()
