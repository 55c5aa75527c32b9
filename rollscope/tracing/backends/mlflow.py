"""``mlflow``: each trajectory an MLflow trace, its attributes searchable trace tags.

Tags: ``step``, ``sample_index``, ``rollout_n``, ``validate``, ``experiment_name``, ``agent``,
``reward`` and ``status`` — so ``mlflow.search_traces(filter_string="tags.step = '120'")`` finds a
step. Spans keep their nesting, recorded start and end times, inputs, outputs and errors. Traces are
written when the trajectory ends (a late reward is not added). What training did with a
trajectory comes later, from the trainer's process: ``training.<field>`` tags set on its trace
(``tags.`training.advantage```), found by the trace's ``rollscope.trajectory_id`` tag.

A SQLite tracking store is created once, in WAL mode, under a file lock, before any trace is
written: several workers starting at once against MLflow's SQLite default otherwise race through
its schema migrations and crash.
"""

from __future__ import annotations

import fcntl
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from rollscope.tracing.backends.base import Deduplicating, Delivery
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.records import (
    SpanLike,
    TrajectoryLike,
    kind_of,
    reward_details,
    training_summary,
    walk,
)
from rollscope.tracing.spans import Span, Trajectory

# A training record whose trace is not in MLflow yet (its worker's trace still on its way) is
# looked for again at the next flushes for this long, then counted in ``training_unjoined``.
TRAINING_WAIT_S = 300.0
# At close (the trainer's last step done, its workers' last traces possibly still being written),
# the records still waiting are looked for this long, every ``_CLOSE_POLL_S``, before they are counted.
TRAINING_CLOSE_WAIT_S = 20.0
_CLOSE_POLL_S = 0.5
log = logging.getLogger("rollscope.tracing")
_SPAN_TYPES = {"llm": "LLM", "tool": "TOOL", "agent": "AGENT", "reward": "EVALUATOR"}


def prepare_tracking_store(uri: str) -> None:
    """Create (and migrate) a SQLite tracking store once, in WAL mode; other URIs are left alone."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process migrates; the others wait, then find it done
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.close()
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        SqlAlchemyStore(uri, str(path.parent / "mlartifacts"))


class MlflowBackend(Deduplicating, TrajectoryBackend):
    name = "mlflow"
    requires = ("mlflow",)
    extra = "mlflow"
    delivery = Delivery(whole_trajectories=True, out_of_process=True)  # encoding and export, off the traced process
    options = frozenset({"mlflow_tracking_uri", "mlflow_experiment"})

    def __init__(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        mlflow_tracking_uri: str | None = None,
        mlflow_experiment: str | None = None,
    ) -> None:
        super().__init__(project=project, experiment=experiment)
        import mlflow

        if mlflow_tracking_uri:
            prepare_tracking_store(mlflow_tracking_uri)
            mlflow.set_tracking_uri(mlflow_tracking_uri)
        name = mlflow_experiment or project or "rollscope"
        found = mlflow.get_experiment_by_name(name)
        self.experiment_id = found.experiment_id if found else mlflow.create_experiment(name)
        self._tracking_uri = mlflow.get_tracking_uri()
        self._training: dict[str, tuple[dict[str, Any], float]] = {}  # trajectory id -> (record, give up at)
        self.training_unjoined = 0
        self._maybe_sent = False  # ``sent_before``
        self.resent_skipped = 0  # trajectories a dead process had sent already, not written twice

    def on_training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        self._training[trajectory_id] = (record, time.monotonic() + TRAINING_WAIT_S)

    def _tag_training(self) -> None:
        from mlflow import MlflowClient

        client = MlflowClient()
        for tid, (record, give_up_at) in list(self._training.items()):
            trace_id = self._trace_of(tid, client)
            if trace_id is not None:
                for key, value in training_summary(record).items():
                    client.set_trace_tag(trace_id, f"training.{key}", str(value))
                del self._training[tid]
            elif time.monotonic() > give_up_at:
                del self._training[tid]
                self.training_unjoined += 1

    def counts(self) -> dict[str, int]:
        return {
            **super().counts(),
            "training_unjoined": self.training_unjoined,
            "training_waiting": len(self._training),
            "resent_skipped": self.resent_skipped,
        }

    def sent_before(self, maybe: bool) -> None:
        self._maybe_sent = maybe

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        # MLflow makes its own trace ids: a trajectory a dead process may have sent is looked for first
        if self._maybe_sent and self._trace_of(trajectory.id) is not None:
            self.resent_skipped += 1
            return
        write_trace(self.experiment_id, trajectory, spans, self.experiment)

    def _trace_of(self, trajectory_id: str, client: Any = None) -> str | None:
        """The id of the MLflow trace of a trajectory (found by its ``rollscope.trajectory_id`` tag)."""
        from mlflow import MlflowClient

        traces = (client or MlflowClient()).search_traces(
            locations=[self.experiment_id],
            max_results=1,
            include_spans=False,
            filter_string=f"tags.`rollscope.trajectory_id` = '{trajectory_id}'",
        )
        return traces[0].info.trace_id if traces else None

    def flush(self) -> None:
        import mlflow

        mlflow.flush_trace_async_logging()  # MLflow exports traces on its own thread
        if self._training:
            self._tag_training()

    def close(self) -> None:
        """The training records still waiting for their traces get a last, bounded wait; those
        whose traces never came are counted and said."""
        deadline = time.monotonic() + TRAINING_CLOSE_WAIT_S
        while self._training and time.monotonic() < deadline:
            time.sleep(_CLOSE_POLL_S)
            self._tag_training()
        if self._training:
            self.training_unjoined += len(self._training)
            log.warning(
                "mlflow: %d training record(s) found no trace of their trajectory in experiment %s "
                "within %.0f s of closing; not tagged (counted: training_unjoined)",
                len(self._training),
                self.experiment_id,
                TRAINING_CLOSE_WAIT_S,
            )
            self._training.clear()

    def destination(self) -> str:
        return f"mlflow {self._tracking_uri} {self.experiment_id}"


def write_trace(experiment_id: str, t: TrajectoryLike, spans: list[SpanLike], experiment: str | None = None) -> None:
    """One MLflow trace for a trajectory (a live Trajectory or a stored record) and its spans."""
    import mlflow

    tags = {
        "step": t.step,
        "sample_index": t.sample_index,
        "rollout_n": t.rollout_n,
        "validate": bool(t.validate),
        "experiment_name": t.experiment or experiment,
        "agent": t.agent_name,
        "reward": t.reward,
        "status": t.status,
        "rollscope.trajectory_id": t.id,
    }
    tags.update({f"reward.{k}": v for k, v in reward_details(t).items()})  # searchable: tags.`reward.correct`
    tags = {k: str(v) for k, v in tags.items() if v is not None}
    root = mlflow.start_span_no_context(
        t.agent_name or "rollout_trace",
        span_type="AGENT",
        tags=tags,
        experiment_id=experiment_id,
        start_time_ns=t.start_ns,
        inputs={"trajectory_id": t.id},
    )
    live = {t.id: root}

    def start(s: SpanLike) -> None:
        live[s.id] = mlflow.start_span_no_context(
            s.name,
            span_type=_SPAN_TYPES.get(kind_of(s), "UNKNOWN"),
            parent_span=live.get(s.parent_id, root),
            inputs=s.inputs,
            attributes={k: v for k, v in (s.attributes or {}).items() if v is not None},
            start_time_ns=s.start_ns,
        )

    def end(s: SpanLike) -> None:
        live[s.id].end(
            outputs=s.outputs, status="ERROR" if s.status == "error" else "OK", end_time_ns=s.end_ns or s.start_ns
        )

    walk(spans, start, end)
    root.end(
        outputs={"status": t.status, "reward": t.reward, "reward_details": reward_details(t)},
        status="ERROR" if t.status == "error" else "OK",
        end_time_ns=t.end_ns or t.start_ns,
    )
