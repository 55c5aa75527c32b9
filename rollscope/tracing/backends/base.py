"""The one interface every trace destination implements (cf. OpenTelemetry's SpanProcessor).

A backend is its ``on_*`` hooks, ``flush`` and ``close``; how events reach it (queue or spool,
whole trajectories or one event at a time, in the traced process or the trace sidecar) is one
declared value, its ``Delivery``, which the exporter, the spool and the sidecar read and the
backend's own code never needs. A backend runs on its own worker thread and receives events in
order, already shaped: payloads are JSON-safe, truncated and redacted. It never runs on the
rollout's event loop, so it may block. The few backends that take part in the delivery machinery
say so by a mixin: ``Resumable`` (continued where a killed sidecar left it), ``Deduplicating``
(looks before writing what a dead process may have sent) and ``Publishing`` (made visible on an
explicit flush).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rollscope.tracing.spans import Span, Trajectory


@dataclass(frozen=True)
class Delivery:
    """How the exporter delivers events to a backend."""

    #: An unbounded queue in memory and no spool: the backend keeps up with any rollout (the local
    #: store). Otherwise what the backend cannot take in time waits in a spool on disk.
    lossless: bool = False
    #: Whether ``on_span_start`` is wanted. When no backend wants it, the hot path skips the event.
    span_starts: bool = False
    #: Events handed to the backend between two of its flushes: its client's own queue in front of
    #: the network must hold what they make (dropping the rest), and fewer flushes send faster.
    batch: int = 4096
    #: The backend writes a trajectory only when it ends: its spool keeps each trajectory's events
    #: together, and a restart resumes between trajectories, never inside one.
    whole_trajectories: bool = False
    #: It may run in the trace sidecar, a helper process (``tracing._sidecar``): true for a backend
    #: that needs nothing from the traced process but its options, is importable by module path,
    #: and whose work would otherwise compete with the rollout.
    out_of_process: bool = False


class TraceBackend:
    #: Name under which the backend is registered.
    name: ClassVar[str] = "base"
    #: Option names this backend accepts from ``init_tracing(**backend_options)``.
    options: ClassVar[frozenset[str]] = frozenset()
    #: The modules it imports that only an extra installs, and that extra (``rollscope[EXTRA]``):
    #: checked when the backend is chosen, so a missing one is one error before any rollout.
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str | None] = None
    delivery: ClassVar[Delivery] = Delivery()

    def __init__(self, *, project: str | None = None, experiment: str | None = None) -> None:
        self.project = project
        self.experiment = experiment

    def on_trajectory_start(self, trajectory: Trajectory) -> None:
        """A trajectory opened; its spans follow."""

    def on_span_start(self, span: Span) -> None:
        """A span started (its outputs are not known yet). Only sent with ``Delivery.span_starts``."""

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

    def close(self) -> None:
        """Release resources; called once, after the final flush."""

    def destination(self) -> str:
        """Where this backend sends, as its spool names it: a spool left by a dead process is sent
        on by the next backend with the same destination, never by one sending elsewhere. Override
        it when the project alone does not name the place (a server's address, say)."""
        return f"{self.name} {self.project or '-'}"

    def counts(self) -> dict[str, int]:
        """Backend-specific counters merged into ``tracing.stats()``. Two keys add to the
        exporter's own: ``dropped`` (spans the backend gave up on: a disk that stayed full) and
        ``late_rewards`` (rewards that came after it had written their trajectory)."""
        return {}


class Resumable:
    """A backend the traced process can continue where a killed trace sidecar left it, because it
    stores how many events it holds atomically with them (the local store). Only such a backend
    takes part in the sidecar's positions; the others need know nothing of them."""

    #: Set by a backend continued from where a killed trace sidecar left it (``resume_options``):
    #: the number of the last event it had made durable, from which the traced process replays.
    resumed_position: int = 0

    def mark_position(self, position: int) -> None:
        """In the trace sidecar: every event up to the ``position``-th it received was handed to
        this backend, to be stored atomically with its data at the next flush."""

    def resume_options(self) -> dict[str, Any]:
        """Constructor options that reopen this backend where its last flush left it, with its
        durable position as ``resumed_position``."""
        raise NotImplementedError


class Deduplicating:
    """A backend whose destination makes its own ids (MLflow), so an event that a dead process may
    have sent already would be written twice unless looked for first. A backend whose ids derive
    from rollscope's (Weave, OpenTelemetry) lands on the same records again and needs no mixin."""

    def sent_before(self, maybe: bool) -> None:
        """Whether the events handed over next may have been sent already: they come from a spool
        a dead process left, past its last confirmed flush."""


class Publishing:
    """A backend that publishes what it flushed on a schedule (the local store's sealed segments
    on a shared filesystem), and at once after an explicit flush (``flush_tracing``)."""

    def publish(self) -> None:
        """Make what was flushed visible to readers everywhere now."""
