"""Writes one process's trajectories and spans into its own shard file, in batched transactions."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rollscope.store.publish import DEFAULT_PUBLISH_INTERVAL_S, Publisher
from rollscope.store.recovery import reconcile, recover
from rollscope.store.retention import RetentionPolicy, at_sealing
from rollscope.store.schema import (
    DDL,
    SHARD_SUFFIX,
    SPAN_COLUMNS,
    TRAINING_COLUMNS,
    TRAINING_DDL,
    TRAJECTORY_COLUMNS,
    span_record,
)
from rollscope.trajectory.summary import TrajectorySummary

_UPSERT_TRAJECTORY = (
    f"INSERT INTO trajectories ({', '.join(TRAJECTORY_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(TRAJECTORY_COLUMNS))}) "
    "ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in TRAJECTORY_COLUMNS if c not in ("id", "reward"))
    + ", reward = COALESCE(excluded.reward, trajectories.reward)"
)
_INSERT_SPAN = f"INSERT OR REPLACE INTO spans ({', '.join(SPAN_COLUMNS)}) VALUES ({', '.join('?' * len(SPAN_COLUMNS))})"
_SET_REWARD = (
    "UPDATE trajectories SET reward = COALESCE(?, reward), "
    "attributes = json_set(COALESCE(attributes, '{}'), '$.reward_details', json(?)) WHERE id = ?"
)
_INSERT_TRAINING = (
    f"INSERT OR REPLACE INTO training ({', '.join(TRAINING_COLUMNS)}) VALUES ({', '.join('?' * len(TRAINING_COLUMNS))})"
)
_SET_POSITION = "INSERT OR REPLACE INTO meta VALUES ('position', ?)"
_ADD_COUNTS = (
    "UPDATE trajectories SET num_spans = num_spans + ?, num_llm_calls = num_llm_calls + ?, "
    "num_tool_calls = num_tool_calls + ?, num_errors = num_errors + ?, num_tokens = num_tokens + ?, "
    "num_tool_errors = num_tool_errors + ? WHERE id = ?"
)


def shard_name() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40]
    return f"{host}-{os.getpid()}-{os.urandom(3).hex()}{SHARD_SUFFIX}"


class ShardWriter:
    """Owns one shard file. Not thread-safe: the local backend's worker thread is its only user.

    ``existing``: continue a shard whose writer is gone (a killed trace sidecar's) instead of
    starting one; SQLite rolls back whatever transaction it left unfinished.

    ``local_dir``: the shared-filesystem layout (``segments``). The database lives in ``local_dir``
    (node-local disk) and what it holds is published into ``directory`` as sealed segments every
    ``publish_interval_s`` and at ``publish``/``close``; databases that writers on this host left
    behind when they died are published first. ``retain``: a retention policy applied as segments
    are sealed (``store.retention``): the groups it does not keep are never published."""

    def __init__(
        self,
        directory: str | os.PathLike,
        existing: str | os.PathLike | None = None,
        local_dir: str | os.PathLike | None = None,
        publish_interval_s: float = DEFAULT_PUBLISH_INTERVAL_S,
        retain: RetentionPolicy | None = None,
    ) -> None:
        if retain is not None and local_dir is None:
            raise ValueError(
                f"retain={retain.describe()!r} applies where segments are sealed (local_dir, or a "
                f"trace_dir on a network filesystem); for {directory} run `rollscope traces compact "
                "--retain` once the run is done"
            )
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if local_dir is not None:
                Path(local_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(f"cannot create trace directory {exc.filename}: {exc.strerror or exc}") from exc
        home = Path(local_dir) if local_dir is not None else self.directory
        if local_dir is not None and existing is None:
            recover(home, self.directory)
        self.path = Path(existing) if existing is not None else home / shard_name()
        if existing is not None and not self.path.is_file():
            raise OSError(f"cannot continue trace store {self.path}: no such file")
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed transaction survives a killed process (not a power cut).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(DDL)
        except sqlite3.Error as exc:
            raise OSError(f"cannot create trace store {self.path}: {exc}") from exc
        self._has_training = False  # the training table: made with the first training record
        self.publisher: Publisher | None = None
        if local_dir is not None:
            writer = self.path.name[: -len(SHARD_SUFFIX)]
            reconcile(self._db, self.directory, writer)
            self.publisher = Publisher(
                self._db,
                self.path,
                self.directory,
                writer,
                publish_interval_s,
                at_sealing(retain) if retain is not None else None,
            )

    def write(
        self,
        trajectories: Iterable[Sequence[Any]] = (),
        spans: Iterable[Sequence[Any]] = (),
        rewards: Iterable[tuple[str, float | None, dict[str, Any]]] = (),
        counts: Iterable[tuple[int, int, int, int, int, int, str]] = (),
        position: int | None = None,
        training: Iterable[Sequence[Any]] = (),
    ) -> None:
        """One transaction: either all of it is in the shard afterwards or none of it. ``position``
        (the trace sidecar's count of events this data completes) is committed with it."""
        db = self._db
        rewards = list(rewards)
        db.execute("BEGIN")
        try:
            db.executemany(_UPSERT_TRAJECTORY, trajectories)
            db.executemany(_INSERT_SPAN, spans)
            db.executemany(
                _SET_REWARD,
                ((reward, json.dumps(details, default=str), tid) for tid, reward, details in rewards),
            )
            if rewards and self.publisher is not None:
                self.publisher.note_rewards([tid for tid, _, _ in rewards])
            db.executemany(_ADD_COUNTS, counts)
            training = list(training)
            if training:
                if not self._has_training:
                    for statement in TRAINING_DDL.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    self._has_training = True
                db.executemany(_INSERT_TRAINING, training)
            if position is not None:
                db.execute(_SET_POSITION, (str(position),))
            db.execute("COMMIT")
            if self.publisher is not None and self.publisher.due():
                self.publisher.publish()
        except sqlite3.Error as exc:
            if db.in_transaction:  # SQLite has already rolled back on some errors (a full disk)
                db.execute("ROLLBACK")
            raise sqlite3.OperationalError(f"trace store {self.path}: {exc}") from exc
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def position(self) -> int:
        """The position committed last (0: none)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()
        return int(row[0]) if row else 0

    def running_summaries(self) -> dict[str, TrajectorySummary]:
        """Per trajectory still marked running: the summary of its stored spans."""
        summaries = {
            tid: TrajectorySummary()
            for (tid,) in self._db.execute("SELECT id FROM trajectories WHERE status = 'running'")
        }
        rows = self._db.execute(
            "SELECT s.id, s.trajectory_id, s.parent_id, s.name, s.kind, s.start_ns, s.end_ns, s.status, s.error_type, "
            "s.error_message, s.payload FROM spans s JOIN trajectories t ON t.id = s.trajectory_id "
            "WHERE t.status = 'running' ORDER BY s.start_ns, s.id"
        )
        for *columns, payload in rows:
            summaries[columns[1]].add(span_record(columns, payload)[0])
        return summaries

    def publish(self) -> None:
        """Make what is stored visible to readers on other hosts now (shared layout only)."""
        if self.publisher is not None:
            self.publisher.publish()

    def close(self) -> None:
        publisher, done = self.publisher, False
        if publisher is not None:
            publisher.publish(final=True)
            left = self._db.execute("SELECT COUNT(*) FROM trajectories WHERE id NOT IN (SELECT id FROM sealed)")
            # (a reward that came after its trajectory was sealed lives here only: this database stays)
            done = left.fetchone()[0] == 0 and not publisher.training_pending() and not publisher.rewards_after_seal
        self._db.close()
        if done:  # all of it is in the shared directory now
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{self.path}{suffix}").unlink()
