"""Reads a store directory: every shard, merged, filtered by indexed columns."""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import operator
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rollscope.semconv import UNREADABLE, WANDB_RUN
from rollscope.store import rescorings
from rollscope.store.schema import (
    ADDED_COLUMNS,
    SHARD_SUFFIX,
    SPAN_COLUMNS,
    TRAINING_ADDED_COLUMNS,
    TRAINING_COLUMNS,
    TRAJECTORY_COLUMNS,
    PayloadError,
    check_shard,
    decode_payload,
    resolve_dir,
    span_record,
)
from rollscope.store.segment_index import INDEX, SegmentIndex
from rollscope.store.segments import LIVE, SEGMENTS, is_segmented, open_immutable, visible
from rollscope.trajectory.records import SpanRecord, StepStats, TrainingRecord, TrajectoryRecord
from rollscope.trajectory.turns import Prompts

# order name -> SQL sort terms; every order ends with id, so equal keys page deterministically
_ORDER = {
    "start": "start_ns, id",
    "end": "end_ns, id",
    "step": "step, sample_index, rollout_n, start_ns, id",
    "reward": "reward, id",
    "duration": "(end_ns - start_ns), id",
    "experiment": "experiment, step, sample_index, rollout_n, id",
    "turns": "num_llm_calls, id",
    "tools": "num_tool_calls, id",
    "tokens": "num_tokens, id",
    "errors": "num_errors, id",
}
ORDERS = tuple(_ORDER)
_SELECT_TRAJ = f"SELECT {', '.join(TRAJECTORY_COLUMNS)} FROM trajectories"
log = logging.getLogger("rollscope.store")
# A query on one shard runs at most this long (ROLLSCOPE_QUERY_TIMEOUT_S): then that shard is left out.
QUERY_TIMEOUT_S = float(os.environ.get("ROLLSCOPE_QUERY_TIMEOUT_S") or 60)
_COUNT_COLUMNS = ("num_llm_calls", "num_tool_calls", "num_tokens", "num_errors")
_TIME_COLUMNS = ("start_ns", "end_ns")
_SELECT_TRAINING = f"SELECT {', '.join(TRAINING_COLUMNS)} FROM training"
_SELECT_SPANS = f"SELECT {', '.join(SPAN_COLUMNS)} FROM spans WHERE trajectory_id = ? ORDER BY start_ns, id"


class TraceStore:
    """``TraceStore(dir).trajectories(step=3)``; ``.get(id)``; ``.group(step, sample)``; ``.diff(a, b)``.

    Safe to use while writers are running: each query sees every committed transaction,
    including shards created since the last query. A damaged shard (truncated, overwritten) is
    skipped with one warning naming it (``damaged`` lists them); every other shard still answers.
    A store on a read-only file system is read as it is.

    ``index_segments``: for a reader that lives long (the viewer), sealed segments' trajectory
    rows are copied into one in-memory index (``store.segment_index``) as they appear, so a query
    over 1,000 segments is one query; a one-off reader leaves it off and opens what it reads.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, index_segments: bool = False) -> None:
        self.path = resolve_dir(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"no trace store at {self.path} (set --dir or ROLLSCOPE_TRACE_DIR)")
        self._conns: dict[Path, sqlite3.Connection] = {}
        self.damaged: dict[Path, str] = {}  # shard -> what was wrong with it
        self.unreadable: dict[Path, int] = {}  # shard -> rows and payloads read back marked
        # Threads may share one store (the viewer's requests): SQLite serializes each connection's
        # use, the listing and the opening of connections take this lock, and each thread's query
        # has its own deadline. No lock is held while a query runs or a page is drawn.
        self._lock = threading.RLock()
        self._local = threading.local()  # .deadline: when this thread's query is interrupted (``_over_time``)
        self._cache: dict[tuple, tuple[int, list[tuple]]] = {}  # (shard, query, params) -> (data_version, rows)
        self._immutable: set[Path] = set()  # published segments and live views (shared layout)
        self._sources: dict[Path, list] = {}  # compacted segment -> what it replaced
        self._index = SegmentIndex() if index_segments else None
        self._listed: tuple | None = None  # (folders' mtimes, when, listing): ``_listing``
        self._derived: dict[tuple, tuple[list, Any]] = {}  # ``aggregate``: (sql, params, fn) -> (rows, result)

    # ---- shards ----
    def shards(self, step: Any = None) -> list[Path]:
        """The files to read: the shards in the directory and, in the shared layout, the visible
        segments (those that may hold ``step``, when given) and live views (``store.segments``)."""
        shards, segments, views = self._listing()
        if self._index is not None and segments:
            return [*shards, INDEX, *views]
        return shards + [s.path for s in segments if type(step) is not int or s.may_hold(step)] + views

    def _listing(self) -> tuple[list[Path], list, list[Path]]:
        """(shards, visible segments, live views), listed again when a folder's mtime moved or a
        second has passed (a file system whose mtimes are coarse); several queries of one page
        list once."""
        with self._lock:
            return self._list()

    def _list(self) -> tuple[list[Path], list, list[Path]]:
        folders = (self.path, self.path / SEGMENTS, self.path / LIVE)
        stamp = tuple(_mtime_ns(f) for f in folders)
        now = time.monotonic()
        if self._listed is not None and self._listed[0] == stamp and now - self._listed[1] < _RELIST_S:
            return self._listed[2]
        shards = sorted(self.path.glob(f"*{SHARD_SUFFIX}"))
        segments, views = visible(self.path, self._sources) if is_segmented(self.path) else ([], [])
        self._immutable.update(s.path for s in segments)
        self._immutable.update(views)
        listed = {*shards, *views, *(s.path for s in segments)}
        gone = [p for p in self._conns if p not in listed]  # removed, replaced or compacted since
        for path in gone:
            self._conns.pop(path).close()
            self._immutable.discard(path)
        if gone:
            self._cache = {key: rows for key, rows in self._cache.items() if key[0] in listed}
            self._derived.clear()
        if self._index is not None and segments:
            for path, error in self._index.sync([s.path for s in segments if s.path not in self.damaged]).items():
                self._skip(path, sqlite3.DatabaseError(error))
        self._listed = (stamp, now, (shards, segments, views))
        return shards, segments, views

    def _conn(self, shard: Path) -> sqlite3.Connection:
        if shard is INDEX:
            return self._index.db
        db = self._conns.get(shard)
        if db is not None:
            return db
        with self._lock:
            return self._conns.get(shard) or self._open(shard)

    def _open(self, shard: Path) -> sqlite3.Connection:
        """A connection to ``shard``, checked, with its reading set up (under ``_lock``)."""
        try:
            # A published file never changes and belongs to no one here: opened as immutable
            # (no lock, no -shm), so no reader takes part in another host's database.
            db = open_immutable(shard) if shard in self._immutable else sqlite3.connect(shard, check_same_thread=False)
            columns = {row[1] for row in db.execute("PRAGMA table_info(trajectories)")}
        except sqlite3.OperationalError as exc:
            if _not_yet(exc):  # its writer holds it this moment: asked again at the next query
                db.close()
                raise
            # A read-only file system (or directory): a WAL database cannot make its shared-memory
            # file there. Nobody can be writing it then, so it is read as the immutable file it is.
            db = sqlite3.connect(f"{shard.resolve().as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            columns = {row[1] for row in db.execute("PRAGMA table_info(trajectories)")}
        try:
            check_shard(db)
        except sqlite3.DatabaseError:
            db.close()
            raise
        # Every query on it is bounded in time (a shard is other people's writing): past the
        # bound SQLite interrupts it, and the shard is left out as a damaged one is.
        db.set_progress_handler(self._over_time, 10_000)
        if columns and any(c not in columns for c in ADDED_COLUMNS):
            # An older shard: a view in this connection's own temp schema, which SQLite looks
            # in first, gives its table the columns added since, with what they read as.
            selected = ", ".join(c if c in columns else f"{ADDED_COLUMNS[c]} AS {c}" for c in TRAJECTORY_COLUMNS)
            db.execute(f"CREATE TEMP VIEW trajectories AS SELECT {selected} FROM main.trajectories")
        trained = {row[1] for row in db.execute("PRAGMA table_info(training)")}
        if trained and any(c not in trained for c in TRAINING_ADDED_COLUMNS):  # the same for its training table
            selected = ", ".join(c if c in trained else f"{TRAINING_ADDED_COLUMNS[c]} AS {c}" for c in TRAINING_COLUMNS)
            db.execute(f"CREATE TEMP VIEW training AS SELECT {selected} FROM main.training")
        db.execute("PRAGMA query_only=ON")
        self._conns[shard] = db
        return db

    def _query(self, sql: str, params: list[Any], step: Any = None, cached: bool = False) -> list[tuple[Path, tuple]]:
        """Every shard's rows for ``sql``. ``cached``: an aggregate over whole shards, kept per shard
        until that shard changes (SQLite's ``data_version``): finished shards are not rescanned."""
        return [(shard, r) for shard, rows in self._parts(sql, params, step, cached) for r in rows]

    def _parts(self, sql: str, params: list[Any], step: Any = None, cached: bool = False) -> list[tuple[Path, list]]:
        """``_query``'s rows, per shard."""
        parts: list[tuple[Path, list]] = []
        for shard in self.shards(step):
            if shard in self.damaged:
                continue
            if shard in self._immutable and shard not in self._conns and not shard.exists():
                continue  # a live view replaced since the listing: its successor is read next time
            try:
                self._local.deadline = time.monotonic() + QUERY_TIMEOUT_S
                if cached:
                    parts.append((shard, self._cached_rows(shard, sql, params)))
                    continue
                parts.append((shard, self._conn(shard).execute(sql, params).fetchall()))
            except sqlite3.DatabaseError as exc:
                if _not_yet(exc):
                    continue
                self._skip(shard, exc)
        return parts

    def aggregate(self, sql: str, params: list[Any], combine: Callable[[list[tuple]], Any]) -> Any:
        """``combine`` of every shard's rows for a whole-shard aggregate ``sql``, kept until some
        shard's rows change (``combine`` must be a function of the rows alone, its result read
        only): a page that merges 10,000 GRPO groups in Python does so once per change."""
        parts = [rows for _, rows in self._parts(sql, params, cached=True)]
        key = (sql, tuple(params), combine)
        found = self._derived.get(key)
        if found is not None and len(found[0]) == len(parts) and all(map(operator.is_, found[0], parts)):
            return found[1]
        result = combine([row for rows in parts for row in rows])
        self._derived[key] = (parts, result)  # (the parts held: an identity compared is never reused)
        return result

    def _over_time(self) -> bool:
        """SQLite's progress handler: True interrupts the query running past its bound."""
        return time.monotonic() > getattr(self._local, "deadline", 0.0)

    def _unreadable(self, shard: Path, what: str) -> None:
        """A row or payload that could not be read: marked where it is, counted per shard
        (``unreadable``), said once per shard."""
        first = shard not in self.unreadable
        self.unreadable[shard] = self.unreadable.get(shard, 0) + 1
        if first:
            log.warning(
                "trace store: %s in %s could not be read and is shown marked (%s); other rows are read",
                what.split(":", 1)[0],
                shard,
                what,
            )

    def _skip(self, shard: Path, exc: Exception) -> None:
        """Leave a damaged shard out of every answer from now on, saying so once."""
        self.damaged[shard] = str(exc)
        self._listed = None  # listed again without it
        db = self._conns.pop(shard, None)
        if db is not None:
            db.close()
        log.warning("trace store: skipping damaged shard %s (%s); the other shards are read", shard, exc)

    @property
    def where(self) -> str:
        """The store, as messages name it."""
        return str(self.path)

    def load_spans(self, trajectory_ids: list[str]) -> None:
        """Make these trajectories' spans readable here: they are, in the local store (a remote
        source fetches them: ``rollscope.sources``)."""

    # ---- rescorings, stored beside the run (``store.rescorings``) ----
    def rescoring_names(self) -> list[str]:
        return rescorings.names(self.path)

    def rescoring(self, name: str, ids: Iterable[str] | None = None) -> rescorings.Rescoring:
        return rescorings.load(self.path, name, ids)

    def save_rescoring(self, name: str, meta: dict[str, Any], rewards: list[rescorings.RescoredReward]) -> str:
        """Store a rescoring (replacing one of that name); returns where it is."""
        return str(rescorings.write(self.path, name, meta, rewards))

    def close(self) -> None:
        for db in self._conns.values():
            db.close()
        self._conns.clear()

    # ---- trajectories ----
    def trajectories(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        step: int | None = None,
        sample_index: Any = None,
        rollout_n: int | None = None,
        validate: bool | None = None,
        agent: str | None = None,
        status: str | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        has_error: bool | None = None,
        tool_error: bool | None = None,
        replays: bool | None = None,
        replay_of: str | None = None,
        ended_after: int | None = None,
        wandb_run: str | None = None,
        order_by: str = "step",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[TrajectoryRecord]:
        """Trajectories matching every given filter, sorted, then sliced by offset/limit."""
        where, params = where_clause(
            project=project,
            experiment=experiment,
            step=step,
            sample_index=sample_index,
            rollout_n=rollout_n,
            validate=validate,
            agent=agent,
            status=status,
            min_reward=min_reward,
            max_reward=max_reward,
            has_error=has_error,
            tool_error=tool_error,
            replays=replays,
            replay_of=replay_of,
            ended_after=ended_after,
            wandb_run=wandb_run,
        )
        if order_by not in _ORDER:
            raise ValueError(f"order_by must be one of {', '.join(_ORDER)}, got {order_by!r}")
        direction = " DESC" if descending else ""
        terms = _ORDER[order_by].split(", ")
        order = ", ".join(f"{c}{direction}" for c in terms)
        if limit is None:
            rows = self._query(f"{_SELECT_TRAJ}{where} ORDER BY {order}", params, step)
            records = [self._record(shard, row) for shard, row in rows]
            if len({shard for shard, _ in rows}) > 1:
                records.sort(key=lambda r: _null_first_key(_record_key(r, order_by)), reverse=descending)
            return records[offset:]
        sources = [s for s in self.shards(step) if s not in self.damaged]
        if len(sources) == 1:  # one database (a store of one shard, or a finished run's segment index)
            rows = self._query(
                f"{_SELECT_TRAJ}{where} ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}", params, step
            )
            return [self._record(shard, row) for shard, row in rows]
        return self._merged_page(where, params, step, terms, order, limit, offset, descending)

    def _merged_page(
        self,
        where: str,
        params: list,
        step: int | None,
        terms: list[str],
        order: str,
        limit: int,
        offset: int,
        descending: bool,
    ) -> list[TrajectoryRecord]:
        """A page over several databases: each one's first offset+limit sort keys (small tuples,
        sorted by SQLite), merged; whole rows are read only for the page itself."""
        keys = f"SELECT {', '.join(terms)} FROM trajectories{where} ORDER BY {order} LIMIT {int(limit) + int(offset)}"
        streams: dict[Path, list[tuple]] = {}  # per shard: (*sort keys as null_first tuples, shard); id last
        for shard, row in self._query(keys, params, step):
            streams.setdefault(shard, []).append((*map(null_first, row), shard))
        merged = heapq.merge(*streams.values(), reverse=descending)
        page = list(itertools.islice(merged, offset, offset + limit))
        wanted: dict[Path, list[str]] = {}
        for *_, tid, shard in page:
            wanted.setdefault(shard, []).append(tid[2])
        found: dict[tuple[Path, str], TrajectoryRecord] = {}
        for shard, ids in wanted.items():
            marks = ", ".join("?" * len(ids))
            for row in self._conn(shard).execute(f"{_SELECT_TRAJ} WHERE id IN ({marks})", ids):
                record = self._record(shard, row)
                found[(shard, record.id)] = record
        return [found[(shard, tid[2])] for *_, tid, shard in page]

    def count(self, **filters: Any) -> int:
        where, params = where_clause(**filters)
        rows = self._query(f"SELECT COUNT(*) FROM trajectories{where}", params, filters.get("step"))
        return sum(r[0] for _, r in rows)

    def steps(self, **filters: Any) -> list[StepStats]:
        """Per-step aggregates of the matching trajectories, one series per experiment (steps of
        different runs are different steps): one indexed GROUP BY per shard. Replays are left
        out unless ``replays=True``."""
        where, params = where_clause(**{"replays": False, **filters})
        sql = (
            "SELECT project, experiment, step, COUNT(*), COUNT(reward), TOTAL(reward), TOTAL(num_tool_calls), "
            "TOTAL(num_errors > 0), TOTAL(num_llm_calls), TOTAL(num_tokens) "
            f"FROM trajectories{where} GROUP BY project, experiment, step"
        )
        merged: dict[tuple, list[float]] = {}
        for _, (project, experiment, step, *values) in self._query(sql, params, cached=True):
            acc = merged.setdefault((project, experiment, step), [0.0] * len(values))
            for i, v in enumerate(values):
                acc[i] += v
        return [
            StepStats(
                step, int(n), int(rewarded), total, int(tools), int(errors), int(llm), int(tokens), project, experiment
            )
            for (project, experiment, step), (n, rewarded, total, tools, errors, llm, tokens) in sorted(
                merged.items(), key=lambda kv: (null_first(kv[0][0]), null_first(kv[0][1]), null_first(kv[0][2]))
            )
        ]

    def experiments(self) -> list[tuple[str | None, str | None]]:
        """Every (project, experiment) in the store, sorted."""
        found = {tuple(row) for row in self._unchanged("SELECT DISTINCT project, experiment FROM trajectories")}
        return sorted(found, key=lambda pe: (null_first(pe[0]), null_first(pe[1])))

    def total(self) -> int:
        """How many trajectories the store holds (``count()`` without filters)."""
        return sum(row[0] for row in self._unchanged("SELECT COUNT(*) FROM trajectories"))

    def _unchanged(self, sql: str) -> list[tuple]:
        """Every shard's rows for a whole-table query (``_query(..., cached=True)``)."""
        return [row for _, row in self._query(sql, [], cached=True)]

    def _cached_rows(self, shard: Path, sql: str, params: list[Any]) -> list[tuple]:
        db = self._conn(shard)
        version = self._index.generation if shard is INDEX else db.execute("PRAGMA data_version").fetchone()[0]
        key = (shard, sql, tuple(params))
        found = self._cache.get(key)
        if found is None or found[0] != version:
            found = self._cache[key] = (version, db.execute(sql, params).fetchall())
        return found[1]

    def get(self, trajectory_id: str) -> TrajectoryRecord:
        rows = self._query(f"{_SELECT_TRAJ} WHERE id = ?", [trajectory_id])
        if not rows:
            raise KeyError(f"no trajectory {trajectory_id!r} in {self.where}")
        record = self._record(*rows[0])
        record.spans  # noqa: B018  (load now: a record from get() is used whole)
        record.training  # noqa: B018
        return record

    def group(self, step: int, sample_index: Any, **filters: Any) -> list[TrajectoryRecord]:
        """All rollouts of one sample at one step (a GRPO group), by rollout_n. Rollouts of
        different experiments are different groups: see ``groups``."""
        records = self.trajectories(
            step=step, sample_index=sample_index, order_by="experiment", **{"replays": False, **filters}
        )
        for r in records:
            r.spans  # noqa: B018
        return records

    def groups(self, step: int, sample_index: Any, **filters: Any) -> list[list[TrajectoryRecord]]:
        """The GRPO groups of one sample at one step: one per (project, experiment), never mixed."""
        by_run: dict[tuple, list[TrajectoryRecord]] = {}  # (spans are read when asked for)
        for r in self.trajectories(
            step=step, sample_index=sample_index, order_by="experiment", **{"replays": False, **filters}
        ):
            by_run.setdefault((r.project, r.experiment), []).append(r)
        return list(by_run.values())

    def diff(self, a: str | TrajectoryRecord, b: str | TrajectoryRecord) -> Any:
        from rollscope.trajectory.diff import diff_trajectories

        left = a if isinstance(a, TrajectoryRecord) else self.get(a)
        right = b if isinstance(b, TrajectoryRecord) else self.get(b)
        return diff_trajectories(left, right)

    def spans(self, trajectory_id: str, shard: Path | None = None) -> list[SpanRecord]:
        # (a live view replaced since the record was read: the trajectory is wherever it is now)
        shards = [shard] if shard is not None and (shard in self._conns or shard.exists()) else self.shards()
        out: list[SpanRecord] = []
        for s in shards:
            if s is INDEX:
                s = self._index.segment_of(trajectory_id)
            if s is None or s in self.damaged:
                continue
            try:
                self._local.deadline = time.monotonic() + QUERY_TIMEOUT_S
                rows = self._conn(s).execute(_SELECT_SPANS, [trajectory_id]).fetchall()
            except sqlite3.DatabaseError as exc:
                if not _not_yet(exc):
                    self._skip(s, exc)
                continue
            for row in rows:
                span, problem = span_record(row[:10], row[10])
                if problem is not None:
                    self._unreadable(s, f"span {row[0]!r}: {problem}")
                out.append(span)
        Prompts(out).mark()  # (each llm turn as stored: what it adds; ``TrajectoryRecord.prompts`` makes one whole)
        return out

    # ---- what training did (written by the trainer's process, in its own shard) ----
    def training(self, trajectory_id: str) -> TrainingRecord | None:
        """The training record of one trajectory, from whichever shard holds it."""
        rows = self._query(f"{_SELECT_TRAINING} WHERE trajectory_id = ?", [trajectory_id])
        return _training(rows[-1][1]) if rows else None

    def training_records(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        step: int | None = None,
        min_delta: float | None = None,
        values: bool = False,
    ) -> list[TrainingRecord]:
        """Training records matching the filters, by step; ``values``: with the whole records
        (per-token arrays), read from the payloads; else only the indexed columns."""
        clauses, params = [], []
        for column, value in (("project", project), ("experiment", experiment), ("step", step)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if min_delta is not None:
            clauses.append("logprob_delta_max >= ?")
            params.append(min_delta)
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        columns = TRAINING_COLUMNS if values else (*TRAINING_COLUMNS[:-1], "NULL")
        rows = self._query(f"SELECT {', '.join(columns)} FROM training{where}", params, cached=not values)
        found = sorted((_training(row) for _, row in rows), key=lambda r: (null_first(r.step), r.trajectory_id))
        return found

    def _record(self, shard: Path, row: tuple) -> TrajectoryRecord:
        values = dict(zip(TRAJECTORY_COLUMNS, row, strict=True))
        values["validate"] = bool(values["validate"])
        values["attributes"], problem = _attributes(values["attributes"])
        for column in _COUNT_COLUMNS:  # (SQLite keeps any value in an INTEGER column)
            if type(values[column]) is not int:
                problem = problem or f"{column} is {str(values[column])[:40]!r}, not a number"
                values[column] = None
        for column in _TIME_COLUMNS:  # nanoseconds since the epoch: an int of 64 bits, or none yet
            value = values[column]
            if value is not None and (type(value) is not int or not 0 <= value < 2**63):
                problem = problem or f"{column} is {str(value)[:40]!r}, not a time in nanoseconds"
                values[column] = None
        if problem is not None:
            values["attributes"][UNREADABLE] = problem
            self._unreadable(shard, f"trajectory {values['id']!r}: {problem}")
        tid = values["id"]
        if shard is INDEX:
            shard = self._index.segment_of(tid) or shard
        return TrajectoryRecord(
            **values,
            shard=shard.name,
            _load_spans=lambda: self.spans(tid, shard),
            _load_training=lambda: self.training(tid),
        )

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_RELIST_S = 1.0


def _not_yet(exc: sqlite3.DatabaseError) -> bool:
    """A shard its writer is creating (no schema yet) or holds locked this moment: not damaged,
    read at the next query."""
    text = str(exc)
    return "no such table" in text or "database is locked" in text or "database table is locked" in text


def _mtime_ns(folder: Path) -> int | None:
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return None


def _training(row: tuple) -> TrainingRecord:
    *columns, payload = row
    try:
        values = decode_payload(payload) if payload else {}
    except PayloadError as exc:
        values = {UNREADABLE: str(exc)}
    return TrainingRecord(*columns, values=values)


def _attributes(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A trajectory row's attributes, and what was wrong with them: a JSON object, or marked."""
    if not raw:
        return {}, None
    try:
        value = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        return {}, f"its attributes are not JSON ({type(exc).__name__})"
    if not isinstance(value, dict):
        return {}, f"its attributes are a JSON {type(value).__name__}, not an object"
    return value, None


_RUN = f"json_extract(attributes, '$.\"{WANDB_RUN}\"')"


def where_clause(**filters: Any) -> tuple[str, list[Any]]:
    """The SQL ``WHERE`` clause (and its parameters) selecting the trajectories ``filters`` name:
    the filters of ``TraceStore.trajectories`` and ``traces ls``, for a query of one's own."""
    clauses: list[str] = []
    params: list[Any] = []
    # filter name -> column
    for name, column in (
        ("project", "project"),
        ("experiment", "experiment"),
        ("step", "step"),
        ("sample_index", "sample_index"),
        ("rollout_n", "rollout_n"),
        ("agent", "agent_name"),
        ("status", "status"),
    ):
        value = filters.get(name)
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if filters.get("validate") is not None:
        clauses.append("validate = ?")
        params.append(int(bool(filters["validate"])))
    if filters.get("min_reward") is not None:
        clauses.append("reward >= ?")
        params.append(filters["min_reward"])
    if filters.get("max_reward") is not None:
        clauses.append("reward <= ?")
        params.append(filters["max_reward"])
    if filters.get("has_error") is not None:
        clauses.append("num_errors > 0" if filters["has_error"] else "num_errors = 0")
    if filters.get("tool_error") is not None:
        clauses.append("num_tool_errors > 0" if filters["tool_error"] else "num_tool_errors = 0")
    if filters.get("replays") is not None:  # True: only replays; False: none (runs as they ran)
        clauses.append("replay_of IS NOT NULL" if filters["replays"] else "replay_of IS NULL")
    if filters.get("replay_of") is not None:
        clauses.append("replay_of = ?")
        params.append(filters["replay_of"])
    if filters.get("wandb_run"):  # its W&B run: the whole path, or the run's id alone
        clauses.append(f"({_RUN} = ? OR substr({_RUN}, -length(?) - 1) = '/' || ?)")
        params.extend([filters["wandb_run"]] * 3)
    if filters.get("ended_after") is not None:  # (ns) what ended since then: a live view's next lines
        clauses.append("end_ns > ? AND status != 'running'")
        params.append(int(filters["ended_after"]))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def null_first(v: Any) -> tuple:
    """A Python sort key ordering values as SQLite does: NULL, then numbers, then text."""
    return (v is not None, isinstance(v, str), v if v is not None else 0)


def _null_first_key(values: tuple) -> tuple:
    return tuple(map(null_first, values))


def _record_key(r: TrajectoryRecord, order_by: str) -> tuple:
    duration = None if r.end_ns is None or r.start_ns is None else r.end_ns - r.start_ns
    return {
        "start": (r.start_ns, r.id),
        "end": (r.end_ns, r.id),
        "step": (r.step, r.sample_index, r.rollout_n, r.start_ns, r.id),
        "reward": (r.reward, r.id),
        "duration": (duration, r.id),
        "experiment": (r.experiment, r.step, r.sample_index, r.rollout_n, r.id),
        "turns": (r.num_llm_calls, r.id),
        "tools": (r.num_tool_calls, r.id),
        "tokens": (r.num_tokens, r.id),
        "errors": (r.num_errors, r.id),
    }[order_by]
