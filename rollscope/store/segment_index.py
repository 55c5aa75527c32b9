"""The trajectory and training rows of every sealed segment in one in-memory database, for a
reader that lives long (the viewer).

Over the shared-filesystem layout a query otherwise runs once per segment: a page over 1,000
segments is 1,000 SQLite queries, ~0.5 s however little it returns. Segments never change once
published, so their small rows (not their spans, which stay in the segment and are read per
trajectory) can be copied once into one database with the store's own indexes; the reader then
asks it as it would ask one shard. ``sync`` follows the directory: new segments are copied in,
segments gone (compacted, removed) are taken out.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rollscope.store.schema import (
    ADDED_COLUMNS,
    DDL,
    TRAINING_ADDED_COLUMNS,
    TRAINING_COLUMNS,
    TRAINING_DDL,
    TRAJECTORY_COLUMNS,
)

# The index's own name among the shards a query reads; never a file.
INDEX = Path("<sealed segments>")

# The same tables as a shard, keyed by segment: an id is not unique here until a reader has
# chosen one of its copies, as it is not across shards. Beyond a shard's indexes: the viewer's
# whole sort orders (a deep page walks an index instead of sorting 100,000 rows) and its reward
# and error filters (counted from the index alone).
_TABLES = (
    (DDL + TRAINING_DDL)
    .replace("id TEXT PRIMARY KEY,", "id TEXT NOT NULL,", 1)
    .replace("trajectory_id TEXT PRIMARY KEY,", "trajectory_id TEXT NOT NULL,", 1)
)
_KEYS = """
ALTER TABLE trajectories ADD COLUMN segment INTEGER;
ALTER TABLE training ADD COLUMN segment INTEGER;
CREATE INDEX traj_id ON trajectories (id);
CREATE INDEX traj_segment ON trajectories (segment);
CREATE INDEX traj_reward_id ON trajectories (reward, id);
CREATE INDEX traj_order ON trajectories (step, sample_index, rollout_n, start_ns, id);
CREATE INDEX traj_reward_errors ON trajectories (reward, num_tool_errors, num_errors);
CREATE INDEX training_id ON training (trajectory_id);
CREATE INDEX training_segment ON training (segment);
"""


class SegmentIndex:
    """Rows of the segments given to ``sync``; ``db`` answers the store's queries, ``generation``
    changes whenever its rows do (its own writes do not move SQLite's ``data_version``)."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self.db.executescript(_TABLES + _KEYS)
        self.generation = 0
        self._ids: dict[Path, int] = {}
        self._paths: dict[int, Path] = {}
        self._next = 0

    def sync(self, segments: list[Path]) -> dict[Path, str]:
        """Hold exactly the rows of ``segments``; returns the segments that could not be read
        (path -> error), which stay out."""
        wanted = set(segments)
        gone = [p for p in self._ids if p not in wanted]
        new = [p for p in segments if p not in self._ids]
        failed: dict[Path, str] = {}
        if not gone and not new:
            return failed
        for path in gone:
            self._remove(self._ids.pop(path))
        for path in new:
            try:
                self._copy(path)
            except sqlite3.DatabaseError as exc:
                failed[path] = str(exc)
        self.generation += 1
        return failed

    def _remove(self, number: int) -> None:
        del self._paths[number]
        with self.db:
            self.db.execute("DELETE FROM trajectories WHERE segment = ?", [number])
            self.db.execute("DELETE FROM training WHERE segment = ?", [number])

    def _copy(self, path: Path) -> None:
        self._next += 1
        number = self._next
        self.db.execute("ATTACH DATABASE ? AS seg", [f"{path.resolve().as_uri()}?mode=ro&immutable=1"])
        try:
            self.db.execute("BEGIN")
            for table, columns, defaults in (
                ("trajectories", TRAJECTORY_COLUMNS, ADDED_COLUMNS),
                ("training", TRAINING_COLUMNS, TRAINING_ADDED_COLUMNS),
            ):
                present = {row[1] for row in self.db.execute(f"PRAGMA seg.table_info({table})")}
                if not present:
                    continue  # a segment written before its store had training records
                values = ", ".join(c if c in present else defaults.get(c, "NULL") for c in columns)
                self.db.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}, segment) SELECT {values}, {number} FROM seg.{table}"
                )
            self.db.execute("COMMIT")
        except sqlite3.DatabaseError:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        finally:
            self.db.execute("DETACH DATABASE seg")
        self._ids[path] = number
        self._paths[number] = path

    def segment_of(self, trajectory_id: str) -> Path | None:
        """The segment holding a trajectory's spans."""
        row = self.db.execute("SELECT segment FROM trajectories WHERE id = ? LIMIT 1", [trajectory_id]).fetchone()
        return self._paths.get(row[0]) if row else None
