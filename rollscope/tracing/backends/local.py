"""The default backend: the embedded store (``rollscope.store``), no account and no network."""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any

from rollscope.semconv import REPLAY_OF, REWARD_DETAILS
from rollscope.store.filesystems import filesystem_of, is_network, node_local_dir
from rollscope.store.publish import DEFAULT_PUBLISH_INTERVAL_S
from rollscope.store.retention import parse_policy
from rollscope.store.schema import (
    SPAN_COLUMNS,
    TRAJECTORY_COLUMNS,
    encode_json,
    encode_payload,
    resolve_dir,
    span_row,
    training_row,
    trajectory_row,
)
from rollscope.store.writer import ShardWriter
from rollscope.tracing.backends.base import Delivery, Publishing, Resumable, TraceBackend
from rollscope.tracing.spans import Span, Trajectory
from rollscope.trajectory.summary import COLUMNS as SUMMARY_COLUMNS
from rollscope.trajectory.summary import TrajectorySummary

log = logging.getLogger("rollscope.tracing")
ENV_LOCAL_DIR = "ROLLSCOPE_LOCAL_DIR"
_STATUS = TRAJECTORY_COLUMNS.index("status")  # positions in the rows kept for a retry
_SPAN_TRAJECTORY = SPAN_COLUMNS.index("trajectory_id")
MAX_RETAINED_SPANS = 200_000  # kept in memory for a retry while the store cannot be written
_EMPTY = TrajectorySummary()


_announced: set[str] = set()  # network stores already said, once per process


def local_dir_for(trace_dir: os.PathLike, mountinfo: str | None = None) -> str | None:
    """A node-local directory for the live database when ``trace_dir`` is on a network file
    system (said once), else None (the single-host layout). ``mountinfo``: the mount table to
    read instead of this process's."""
    fstype = filesystem_of(trace_dir, mountinfo)
    if not is_network(fstype):
        return None
    local = node_local_dir(trace_dir)
    if str(trace_dir) not in _announced:
        _announced.add(str(trace_dir))
        log.warning(
            "trace store %s is on %s: writing its live database on this node's %s and publishing sealed "
            "segments into the store (set local_dir or ROLLSCOPE_LOCAL_DIR to choose)",
            trace_dir,
            fstype,
            local,
        )
    return str(local)


class LocalBackend(Resumable, Publishing, TraceBackend):
    name = "local"
    options = frozenset({"trace_dir", "local_dir", "publish_interval_s", "retain"})
    # keeps up with any rollout; off the traced process: encoding, compression and SQLite are the bulk of tracing's CPU
    delivery = Delivery(lossless=True, out_of_process=True)

    def __init__(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        trace_dir: str | os.PathLike | None = None,
        local_dir: str | os.PathLike | None = None,
        publish_interval_s: float = DEFAULT_PUBLISH_INTERVAL_S,
        retain: str | None = None,
        resume_shard: str | os.PathLike | None = None,
    ) -> None:
        """``local_dir`` (or ``$ROLLSCOPE_LOCAL_DIR``): a shared ``trace_dir`` on a network file
        system gets sealed segments, the live database stays on this node (``store.segments``);
        chosen by itself (``store.filesystems.node_local_dir``) when ``trace_dir`` is on one.
        ``resume_shard``: continue the shard a killed trace sidecar was writing, from the
        position it committed last (``resumed_position``), with its open trajectories' counts.
        ``retain``: a retention policy (``traces compact --retain``'s syntax) applied as segments
        are sealed: the groups it does not keep never reach the shared directory."""
        super().__init__(project=project, experiment=experiment)
        local_dir = local_dir or os.environ.get(ENV_LOCAL_DIR) or local_dir_for(resolve_dir(trace_dir))
        self.writer = ShardWriter(
            resolve_dir(trace_dir),
            existing=resume_shard,
            local_dir=local_dir,
            publish_interval_s=float(publish_interval_s),
            retain=parse_policy(retain) if retain else None,
        )
        # Rows to write; a trajectory that started since the last flush is held as itself, its
        # row built at the flush if it is still running then (most end before: one row, not two).
        self._trajectories: dict[str, tuple | Trajectory] = {}
        self._spans: list[tuple] = []
        self._rewards: list[tuple[str, float | None, dict[str, Any]]] = []  # of trajectories that ended
        # An open trajectory's reward: its end's row carries it (one row, no UPDATE; a flush before
        # then writes it too, and the end's row must not lose it).
        self._rewarded: dict[str, tuple[float | None, dict[str, Any]]] = {}
        self._rewarded_unwritten: set[str] = set()
        self._late_counts: list[tuple] = []
        self._training: list[tuple] = []
        # Per open trajectory, what its spans add up to so far (the columns ``traces ls`` and insights read).
        self._open: dict[str, TrajectorySummary] = self.writer.running_summaries() if resume_shard is not None else {}
        self.resumed_position = self.writer.position() if resume_shard is not None else 0
        self._position: int | None = None  # marked, not yet committed
        self.dropped_spans = 0  # given up while the disk stayed full (see flush), or unwritten at close
        self.lost_trajectories = 0
        self.refused_rows = 0  # rows SQLite refused for what they held (``_write_row_by_row``)
        self.stored_trajectories = 0  # finished trajectories made durable
        self.stored_spans = 0

    def _row(
        self, t: Trajectory, rewarded: tuple[float | None, dict[str, Any]] | None = None, running: bool = False
    ) -> tuple:
        """``running``: as its start event said, whatever the object says by now (in this process
        the traced code may have ended it before its end event reaches this backend)."""
        summary = self._open.get(t.id, _EMPTY)
        extra = summary.attributes()
        if rewarded is not None:
            extra = {**extra, REWARD_DETAILS: rewarded[1]}
        attributes = {**t.attributes, **extra} if extra else t.attributes
        reward = t.reward if rewarded is None or rewarded[0] is None else rewarded[0]
        return trajectory_row(
            {
                "id": t.id,
                "project": t.project,
                "experiment": t.experiment,
                "step": t.step,
                "sample_index": t.sample_index,
                "rollout_n": t.rollout_n,
                "validate": int(t.validate),
                "agent_name": t.agent_name,
                "status": "running" if running else t.status,
                "reward": reward,
                "start_ns": t.start_ns,
                "end_ns": None if running else t.end_ns,
                "error_type": None if running else t.error_type,
                "error_message": None if running else t.error_message,
                "attributes": encode_json(attributes).decode() if attributes else None,
                "replay_of": t.attributes.get(REPLAY_OF),
                **dict(zip(SUMMARY_COLUMNS, summary.columns(), strict=True)),
            }
        )

    def on_trajectory_start(self, trajectory: Trajectory) -> None:
        self._open[trajectory.id] = TrajectorySummary()
        self._trajectories[trajectory.id] = trajectory

    def on_span_end(self, span: Span) -> None:
        summary = self._open.get(span.trajectory_id)
        if summary is not None:
            summary.add(span)
        else:  # a span that outlived its trajectory: its counts are added to the stored row
            late = TrajectorySummary()
            late.add(span)
            self._late_counts.append((*late.columns()[:6], span.trajectory_id))
        payload = {"inputs": span.inputs, "outputs": span.outputs, "attributes": span.attributes}
        self._spans.append(span_row(span, encode_payload(payload)))

    def on_trajectory_end(self, trajectory: Trajectory) -> None:
        self._trajectories[trajectory.id] = self._row(trajectory, self._rewarded.pop(trajectory.id, None))
        self._rewarded_unwritten.discard(trajectory.id)
        self._open.pop(trajectory.id, None)

    def on_reward(self, trajectory_id: str, reward: float | None, details: dict[str, Any]) -> None:
        if trajectory_id not in self._open:
            self._rewards.append((trajectory_id, reward, details))
            return
        earlier = self._rewarded.get(trajectory_id)
        if reward is None and earlier is not None:  # as the store's COALESCE keeps a reward given before
            reward = earlier[0]
        self._rewarded[trajectory_id] = (reward, details)
        self._rewarded_unwritten.add(trajectory_id)

    def on_training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        self._training.append(training_row(trajectory_id, record, self.project, self.experiment))

    def publish(self) -> None:
        """At an explicit flush: what is stored becomes visible on other hosts now (shared layout)."""
        self.writer.publish()

    def mark_position(self, position: int) -> None:
        self._position = position

    def resume_options(self) -> dict[str, Any]:
        return {"resume_shard": str(self.writer.path)}

    def flush(self) -> None:
        position = self._position
        if not (
            self._trajectories
            or self._spans
            or self._rewards
            or self._rewarded_unwritten
            or self._late_counts
            or self._training
            or position is not None
        ):
            return
        trajectories = self._trajectories
        for tid, row in trajectories.items():
            if type(row) is not tuple:
                trajectories[tid] = self._row(row, running=True)
        rewards = (
            [*self._rewards, *((tid, *self._rewarded[tid]) for tid in self._rewarded_unwritten)]
            if self._rewarded_unwritten
            else self._rewards
        )
        try:
            self.writer.write(
                self._trajectories.values(), self._spans, rewards, self._late_counts, position, self._training
            )
            self._position = None
            self._count_stored(self._trajectories.values(), len(self._spans))
        except sqlite3.OperationalError:
            # A full disk, say: write what still fits, one trajectory per transaction, keep the rest
            # for the next flush (bounded), and let the error be reported.
            self._write_what_fits()
            raise
        except Exception:  # a row SQLite refuses for what it holds: that row is lost, never its batch
            self._write_row_by_row(position)
            raise
        self._trajectories, self._spans, self._rewards, self._late_counts, self._training = {}, [], [], [], []
        self._rewarded_unwritten.clear()

    def _write_row_by_row(self, position: int | None) -> None:
        """Each row of the batch in a transaction of its own; the rows refused are counted
        (``refused_rows``) and let go — retrying them cannot help —, the rest is stored."""
        refused = 0
        for row in self._trajectories.values():
            if self._written(trajectories=[row]):
                self._count_stored([row], 0)
            else:
                refused += 1
                self.lost_trajectories += row[_STATUS] != "running"
        for span in self._spans:
            if self._written(spans=[span]):
                self._count_stored((), 1)
            else:
                refused += 1
                self.dropped_spans += 1
        refused += sum(not self._written(rewards=[r]) for r in self._rewards)
        refused += sum(not self._written(counts=[c]) for c in self._late_counts)
        refused += sum(not self._written(training=[t]) for t in self._training)
        if position is not None and self._written(position=position):
            self._position = None
        self.refused_rows += refused
        self._trajectories, self._spans, self._rewards, self._late_counts, self._training = {}, [], [], [], []

    def _written(self, **rows: Any) -> bool:
        try:
            self.writer.write(**rows)
            return True
        except sqlite3.OperationalError:
            raise  # no room after all: the caller's caller reports it
        except Exception:
            return False

    def _write_what_fits(self) -> None:
        spans_of: dict[str, list[tuple]] = {}
        for row in self._spans:
            spans_of.setdefault(row[_SPAN_TRAJECTORY], []).append(row)
        kept: dict[str, tuple] = {}
        for tid, row in self._trajectories.items():
            try:
                self.writer.write([row], spans_of.get(tid, []), [r for r in self._rewards if r[0] == tid])
                self._count_stored([row], len(spans_of.pop(tid, ())))
            except sqlite3.OperationalError:
                kept[tid] = row
        total = sum(len(rows) for rows in spans_of.values())
        for tid in list(spans_of):  # over the bound: the oldest trajectories go first
            if total <= MAX_RETAINED_SPANS:
                break
            rows = spans_of.pop(tid)
            total -= len(rows)
            self.dropped_spans += len(rows)
            self.lost_trajectories += kept.pop(tid, None) is not None
        spans = [row for rows in spans_of.values() for row in rows]
        written = set(self._trajectories) - set(kept)
        self._trajectories, self._spans = kept, spans
        self._rewards = [r for r in self._rewards if r[0] not in written]

    def _count_stored(self, rows: Any, spans: int) -> None:
        self.stored_trajectories += sum(1 for row in rows if row[_STATUS] != "running")
        self.stored_spans += spans

    def counts(self) -> dict[str, int]:
        """Exact: what is durable, what waits in memory for room, what was given up."""
        return {
            "stored_trajectories": self.stored_trajectories,
            "stored_spans": self.stored_spans,
            "retained_trajectories": len(self._trajectories),
            "retained_spans": len(self._spans),
            "lost_trajectories": self.lost_trajectories,
            "refused_rows": self.refused_rows,
            "dropped": self.dropped_spans,
            **(
                {"rewards_after_seal": publisher.rewards_after_seal, "retention_dropped": publisher.retention_dropped}
                if (publisher := self.writer.publisher) is not None
                else {}
            ),
        }

    def close(self) -> None:
        try:
            self.flush()  # a last try for what waited for room
        except sqlite3.OperationalError:
            pass
        if self._trajectories or self._spans:  # still no room: lost, and counted exactly
            self.lost_trajectories += len(self._trajectories)
            self.dropped_spans += len(self._spans)
            log.warning(
                "trace store: %d trajectories (%d spans) could not be written and are lost",
                len(self._trajectories),
                len(self._spans),
            )
            self._trajectories, self._spans = {}, []
        self.writer.close()
