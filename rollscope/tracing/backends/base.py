"""The one interface every trace destination implements (cf. OpenTelemetry's SpanProcessor).

A backend runs on its own worker thread (in the traced process, or in the trace sidecar when it
says ``out_of_process``) and receives events in order, already shaped: payloads are
JSON-safe, truncated and redacted. It never runs on the rollout's event loop, so it may block; what
it cannot take in time waits in its worker's spool on disk (``tracing._spool``) unless ``lossless``
is set (then its queue in memory is unbounded: the local store keeps up with any rollout).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rollscope.tracing.spans import Span, Trajectory


class TraceBackend:
    #: Name under which the backend is registered.
    name: ClassVar[str] = "base"
    #: Option names this backend accepts from ``init_tracing(**backend_options)``.
    options: ClassVar[frozenset[str]] = frozenset()
    #: A lossless backend gets an unbounded queue: it must keep up with any rollout rate.
    lossless: ClassVar[bool] = False
    #: Whether ``on_span_start`` is wanted. When no backend wants it, the hot path skips the event.
    wants_span_start: ClassVar[bool] = False
    #: Events handed to the backend between two of its flushes: its client's own queue in front of
    #: the network must hold what they make (dropping the rest), and fewer flushes send faster.
    flush_every: ClassVar[int] = 4096
    #: Whether the backend writes a trajectory only when it ends (then its spool keeps each
    #: trajectory's events together, and a restart resumes between trajectories, never inside one).
    writes_whole_trajectories: ClassVar[bool] = False
    #: Whether the backend may run in the trace sidecar, a helper process (``tracing._sidecar``):
    #: true for a backend that needs nothing from the traced process but its options, is
    #: importable by module path, and whose work would otherwise compete with the rollout.
    out_of_process: ClassVar[bool] = False
    #: The modules it imports that only an extra installs, and that extra (``rollscope[EXTRA]``):
    #: checked when the backend is chosen, so a missing one is one error before any rollout.
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str | None] = None

    #: Counted by the backend: spans it gave up on (a disk that stayed full) and rewards that came
    #: after it had written their trajectory (kept in the local store only); in ``tracing.stats()``.
    dropped_spans: int = 0
    late_rewards: int = 0

    def __init__(self, *, project: str | None = None, experiment: str | None = None) -> None:
        self.project = project
        self.experiment = experiment

    def on_trajectory_start(self, trajectory: Trajectory) -> None:
        """A trajectory opened; its spans follow."""

    def on_span_start(self, span: Span) -> None:
        """A span started (its outputs are not known yet). Only sent when ``wants_span_start``."""

    def on_span_end(self, span: Span) -> None:
        """A span finished, with outputs or error."""

    def on_trajectory_end(self, trajectory: Trajectory) -> None:
        """A trajectory closed, with its final status and reward if known."""

    def on_reward(self, trajectory_id: str, reward: float, details: dict[str, Any]) -> None:
        """A reward arrived for a trajectory, possibly after it ended (verl scores after ``run``)."""

    def on_training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        """What training did with a trajectory, after it ended: its GRPO group, advantage, policy
        version and the trainer's log-probs (``rollscope.trainer.training_record``)."""

    def flush(self) -> None:
        """Make everything received so far durable or sent (a spooled event counts as delivered,
        and is not sent again after a restart, once a flush after it returned)."""

    def destination(self) -> str:
        """Where this backend sends, as its spool names it: a spool left by a dead process is sent
        on by the next backend with the same destination, never by one sending elsewhere."""
        return f"{self.name} {self.project or '-'}"

    def publish(self) -> None:
        """After an explicit flush (``flush_tracing``): make what was flushed visible to readers
        everywhere now, where the backend otherwise publishes on a schedule (the local store's
        sealed segments on a shared filesystem)."""

    def sent_before(self, maybe: bool) -> None:
        """Whether the events handed over next may have been sent already: they come from a spool
        a dead process left, past its last confirmed flush. A backend whose ids are derived from
        rollscope's (Weave, OpenTelemetry) lands on the same calls again and can ignore this; one
        whose destination makes its own ids (MLflow) looks before it writes."""

    def counts(self) -> dict[str, int]:
        """Backend-specific counters merged into ``tracing.stats()`` (the local store: what is stored,
        waiting for room, lost)."""
        return {}

    def close(self) -> None:
        """Release resources; called once, after the final flush."""


class Resumable:
    """A backend the traced process can continue where a killed trace sidecar left it, because it
    stores how many events it holds atomically with them (the local store). Only such a backend
    takes part in the sidecar's positions; the others need know nothing of them."""

    #: Set by a backend continued from where a killed trace sidecar left it (``resume_options``):
    #: the number of the last event it had made durable, from which the traced process replays.
    resumed_position: int = 0

    def mark_position(self, position: int) -> None:
        """In the trace sidecar: every event up to the ``position``-th it received was handed to
        this backend. One that stores the position atomically with its data (the local store)
        lets the traced process resume it exactly there if the sidecar dies (``resume_options``)."""

    def resume_options(self) -> dict[str, Any]:
        """Constructor options that reopen this backend where its last flush left it, with its
        durable position as ``resumed_position``."""
        raise NotImplementedError
