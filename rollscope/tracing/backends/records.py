"""What a backend reads: a live ``Trajectory``/``Span`` as traced, or a stored ``TrajectoryRecord``/
``SpanRecord`` as ``rollscope push`` replays it. Both have the attributes below, so one backend
writes either, and the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from rollscope.semconv import REWARD_DETAILS


class SpanLike(Protocol):
    id: str
    trajectory_id: str
    parent_id: str | None
    name: str
    kind: Any  # a SpanKind, or its value as stored: read it with ``kind_of``
    start_ns: int
    end_ns: int | None
    status: str
    error_type: str | None
    error_message: Any
    inputs: Any
    outputs: Any
    attributes: dict[str, Any] | None


class TrajectoryLike(Protocol):
    id: str
    project: str | None
    experiment: str | None
    step: Any
    sample_index: Any
    rollout_n: Any
    validate: bool
    agent_name: str | None
    reward: float | None
    start_ns: int
    end_ns: int | None
    status: str
    error_message: Any
    attributes: dict[str, Any] | None


def reward_details(t: TrajectoryLike) -> dict[str, Any]:
    """The components that came with the trajectory's reward (verl's ``reward_extra_info``, the
    source): where the store keeps them, and where a backend writing the whole trajectory finds them."""
    details = (t.attributes or {}).get(REWARD_DETAILS)
    return details if isinstance(details, dict) else {}


# A training record's scalars (``rollscope.trainer.training_record``): what a backend that cannot
# hold per-token arrays attaches to the trajectory, late, by the trajectory's id.
TRAINING_SCALARS = (
    "step",
    "uid",
    "estimator",
    "group_size",
    "group_mean",
    "group_std",
    "score",
    "reward",
    "advantage",
    "policy_version",
    "policy_version_max",
    "lag",
    "tokens",
    "masked_tokens",
    "logprob_delta_max",
    "logprob_delta_mean",
    "logprob_delta_position",
    "masked_delta_max",
    "entropy_mean",
    "kl_mean",
)


def training_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The scalars of a training record that are set."""
    return {k: record[k] for k in TRAINING_SCALARS if record.get(k) is not None}


def kind_of(span: SpanLike) -> str:
    """The span's kind as text ("llm", "tool", ...)."""
    return span.kind if type(span.kind) is str else span.kind.value


def in_start_order(spans: Iterable[SpanLike]) -> list[SpanLike]:
    """Spans by start time, ties broken by id: a parent (started first) before its children."""
    return sorted(spans, key=lambda s: (s.start_ns, s.id))


def walk(spans: Iterable[SpanLike], start: Callable[[SpanLike], None], end: Callable[[SpanLike], None]) -> None:
    """``start`` every span in start order, then ``end`` them in the reverse order: parents exist
    before their children and close after them, as tracing SDKs and trace servers expect."""
    ordered = in_start_order(spans)
    for span in ordered:
        start(span)
    for span in reversed(ordered):
        end(span)
