"""The default backend: the embedded store (``rollscope.store``), no account and no network."""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Any

from rollscope.store.records import ERROR_CHARS, TASK_CHARS, last_user_message
from rollscope.store.schema import encode_json, encode_payload, resolve_dir
from rollscope.store.writer import ShardWriter
from rollscope.tracing.backends.base import TraceBackend
from rollscope.tracing.spans import STATUS_ERROR, Span, SpanKind, Trajectory

log = logging.getLogger("rollscope.tracing")
MAX_RETAINED_SPANS = 200_000  # kept in memory for a retry while the store cannot be written
_NO_COUNTS = (0, 0, 0, 0, 0, 0)  # spans, llm calls, tool calls, errors, output tokens, tool errors


def _output_tokens(span: Span) -> int:
    attributes = span.attributes
    value = attributes.get("gen_ai.usage.output_tokens", 0) if isinstance(attributes, dict) else 0
    return value if type(value) is int else 0


class LocalBackend(TraceBackend):
    name = "local"
    options = frozenset({"trace_dir"})
    lossless = True
    out_of_process = True  # encoding, compression and SQLite: the bulk of tracing's CPU

    def __init__(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        trace_dir: str | os.PathLike | None = None,
        resume_shard: str | os.PathLike | None = None,
    ) -> None:
        """``resume_shard``: continue the shard a killed trace sidecar was writing, from the
        position it committed last (``resumed_position``), with its open trajectories' counts."""
        super().__init__(project=project, experiment=experiment)
        self.writer = ShardWriter(resolve_dir(trace_dir), existing=resume_shard)
        self._trajectories: dict[str, tuple] = {}
        self._spans: list[tuple] = []
        self._rewards: list[tuple[str, float | None, dict[str, Any]]] = []
        self._late_counts: list[tuple] = []
        # Per open trajectory: see _NO_COUNTS.
        self._counts: dict[str, list[int]] = self.writer.running_counts() if resume_shard is not None else {}
        self.resumed_position = self.writer.position() if resume_shard is not None else 0
        self._position: int | None = None  # marked, not yet committed
        # Per open trajectory, what ``traces ls`` lists without reading spans: its task, its first error.
        self._summary: dict[str, dict[str, str]] = {}
        self.dropped_spans = 0  # given up while the disk stayed full (see flush), or unwritten at close
        self.lost_trajectories = 0
        self.stored_trajectories = 0  # finished trajectories made durable
        self.stored_spans = 0

    def _row(self, t: Trajectory) -> tuple:
        c = self._counts.get(t.id, _NO_COUNTS)
        summary = self._summary.get(t.id)
        attributes = {**t.attributes, **summary} if summary else t.attributes
        return (
            t.id, t.project, t.experiment, t.step, t.sample_index, t.rollout_n, int(t.validate),
            t.agent_name, t.status, t.reward, t.start_ns, t.end_ns, c[0], c[1], c[2],
            c[3], c[4], c[5], t.error_type, t.error_message,
            encode_json(attributes).decode() if attributes else None,
        )  # fmt: skip

    def on_trajectory_start(self, trajectory: Trajectory) -> None:
        self._counts[trajectory.id] = list(_NO_COUNTS)
        self._trajectories[trajectory.id] = self._row(trajectory)

    def on_span_end(self, span: Span) -> None:
        kind, error = span.kind, span.status == STATUS_ERROR
        llm, tool = kind is SpanKind.LLM, kind is SpanKind.TOOL
        tokens = _output_tokens(span) if llm else 0
        c = self._counts.get(span.trajectory_id)
        if error or kind is SpanKind.AGENT:
            self._summarize(span, error)
        if c is not None:
            c[0] += 1
            c[1] += llm
            c[2] += tool
            c[3] += error
            c[4] += tokens
            c[5] += tool and error
        else:  # a span that outlived its trajectory
            self._late_counts.append((1, int(llm), int(tool), int(error), tokens, int(tool and error),
                                      span.trajectory_id))  # fmt: skip
        payload = {"inputs": span.inputs, "outputs": span.outputs, "attributes": span.attributes}
        self._spans.append((
            span.id, span.trajectory_id, span.parent_id, span.name, span.kind.value, span.start_ns,
            span.end_ns, span.status, span.error_type, span.error_message, encode_payload(payload),
        ))  # fmt: skip

    def _summarize(self, span: Span, error: bool) -> None:
        summary = self._summary.setdefault(span.trajectory_id, {})
        if error and "first_error" not in summary:
            summary["first_error"] = f"{span.name}: {span.error_message or span.error_type}"[:ERROR_CHARS]
        if span.kind is SpanKind.AGENT and "task" not in summary and isinstance(span.inputs, dict):
            task = last_user_message(span.inputs.get("raw_prompt"))
            if task:
                summary["task"] = task[:TASK_CHARS]

    def on_trajectory_end(self, trajectory: Trajectory) -> None:
        self._trajectories[trajectory.id] = self._row(trajectory)
        self._counts.pop(trajectory.id, None)
        self._summary.pop(trajectory.id, None)

    def on_reward(self, trajectory_id: str, reward: float, details: dict[str, Any]) -> None:
        self._rewards.append((trajectory_id, reward, details))

    def mark_position(self, position: int) -> None:
        self._position = position

    def resume_options(self) -> dict[str, Any]:
        return {"resume_shard": str(self.writer.path)}

    def flush(self) -> None:
        position = self._position
        if not (self._trajectories or self._spans or self._rewards or self._late_counts or position is not None):
            return
        try:
            self.writer.write(self._trajectories.values(), self._spans, self._rewards, self._late_counts, position)
            self._position = None
            self._count_stored(self._trajectories.values(), len(self._spans))
        except sqlite3.OperationalError:
            # A full disk, say: write what still fits, one trajectory per transaction, keep the rest
            # for the next flush (bounded), and let the error be reported.
            self._write_what_fits()
            raise
        self._trajectories, self._spans, self._rewards, self._late_counts = {}, [], [], []

    def _write_what_fits(self) -> None:
        spans_of: dict[str, list[tuple]] = {}
        for row in self._spans:
            spans_of.setdefault(row[1], []).append(row)
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
        self.stored_trajectories += sum(1 for row in rows if row[8] != "running")
        self.stored_spans += spans

    def counts(self) -> dict[str, int]:
        """Exact: what is durable, what waits in memory for room, what was given up."""
        return {"stored_trajectories": self.stored_trajectories, "stored_spans": self.stored_spans,
                "retained_trajectories": len(self._trajectories), "retained_spans": len(self._spans),
                "lost_trajectories": self.lost_trajectories}  # fmt: skip

    def close(self) -> None:
        try:
            self.flush()  # a last try for what waited for room
        except sqlite3.OperationalError:
            pass
        if self._trajectories or self._spans:  # still no room: lost, and counted exactly
            self.lost_trajectories += len(self._trajectories)
            self.dropped_spans += len(self._spans)
            log.warning("trace store: %d trajectories (%d spans) could not be written and are lost",
                        len(self._trajectories), len(self._spans))
            self._trajectories, self._spans = {}, []
        self.writer.close()
