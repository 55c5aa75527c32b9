"""The shared shape of backends that take a whole trajectory at once (Weave, MLflow, OpenTelemetry):
spans are held until their trajectory ends, then written together with their recorded times, so
parents exist before children and a replay from the store (``rollscope push``) writes the same.
A reward that arrives before the end is written with the trajectory, its components kept under
the trajectory's ``reward_details`` attribute, where the store keeps them."""

from __future__ import annotations

from typing import Any

from rollscope.semconv import REWARD_DETAILS
from rollscope.tracing.backends.base import Delivery, TraceBackend
from rollscope.tracing.spans import Span, Trajectory
from rollscope.trajectory.turns import resolve_prompts


class TrajectoryBackend(TraceBackend):
    delivery = Delivery(whole_trajectories=True)

    def __init__(self, *, project: str | None = None, experiment: str | None = None) -> None:
        super().__init__(project=project, experiment=experiment)
        self._open: dict[str, tuple[Trajectory, list[Span]]] = {}
        self.late_rewards = 0  # rewards for trajectories already written: in the local store only

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        """A trajectory that ended, with its spans in the order they ended."""
        raise NotImplementedError

    def counts(self) -> dict[str, int]:
        return {"late_rewards": self.late_rewards}

    def on_trajectory_start(self, trajectory: Trajectory) -> None:
        self._open[trajectory.id] = (trajectory, [])

    def on_span_end(self, span: Span) -> None:
        entry = self._open.get(span.trajectory_id)
        if entry is not None:
            entry[1].append(span)

    def on_reward(self, trajectory_id: str, reward: float, details: dict[str, Any]) -> None:
        entry = self._open.get(trajectory_id)
        if entry is None:
            self.late_rewards += 1
            return
        entry[0].reward = reward
        if details:
            entry[0].attributes = {**(entry[0].attributes or {}), REWARD_DETAILS: details}

    def on_trajectory_end(self, trajectory: Trajectory) -> None:
        started, spans = self._open.pop(trajectory.id, (trajectory, []))
        resolve_prompts(spans)  # every llm call whole, as these backends show each call on its own
        details = (started.attributes or {}).get(REWARD_DETAILS)
        if details and started is not trajectory:  # the end event is its own copy (the sidecar's wire)
            trajectory.attributes = {**(trajectory.attributes or {}), REWARD_DETAILS: details}
        self.write(trajectory, spans)
