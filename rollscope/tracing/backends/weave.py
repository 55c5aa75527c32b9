"""``weave``: trajectories as Weave calls, in the shape verl's own Weave tracing produces.

One root call per trajectory and one child call per span, nested as the spans were, each carrying
verl's attributes (step, sample_index, rollout_n, validate, experiment_name); the reward is in the
root call's output. Calls are written when the trajectory ends, with the spans' own start and end
times and ids derived from rollscope's, so the same trajectory replayed later (``rollscope push``)
lands with its real timing and creates no duplicate.

The client is verl's when verl already made one (``weave.init`` from verl's trace config): no
second ``weave.init``. Otherwise ``weave.init(project)`` runs once, on this backend's thread.
LLM spans that verl's own decorator already recorded in Weave (``verl.traced == "weave"``) are
skipped, so no call appears twice.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.spans import Span, Trajectory

_NAMESPACE = uuid.UUID("6f1d3c2e-5b7a-4e2f-9c1d-7a2b3c4d5e6f")


def call_id(trajectory_id: str, span_id: str | None = None) -> str:
    """The Weave call id of a trajectory (or one of its spans): the same on every replay."""
    return str(uuid.uuid5(_NAMESPACE, f"{trajectory_id}/{span_id or ''}"))


def _time(ns: int | None) -> datetime.datetime | None:
    return None if ns is None else datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)


class WeaveBackend(TrajectoryBackend):
    name = "weave"
    options = frozenset({"weave_project", "weave_client"})

    def __init__(self, *, project: str | None = None, experiment: str | None = None,
                 weave_project: str | None = None, weave_client: Any = None) -> None:  # fmt: skip
        super().__init__(project=project, experiment=experiment)
        self._client = weave_client
        self._weave_project = weave_project or project or "rollscope"

    @property
    def client(self) -> Any:
        if self._client is None:
            from weave.trace.context.weave_client_context import get_weave_client

            self._client = get_weave_client()  # verl's, when verl initialised weave
            if self._client is None:
                import weave

                self._client = weave.init(self._weave_project)
        return self._client

    def keep(self, span: Span) -> bool:
        return (span.attributes or {}).get("verl.traced") != "weave"

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        write_trajectory(self.client, trajectory_view(trajectory, self.experiment), spans)

    def flush(self) -> None:
        if self._client is not None:
            self._client.flush()


def trajectory_view(t: Any, experiment: str | None) -> dict[str, Any]:
    """What a Weave root call needs of a trajectory (a live Trajectory or a stored record)."""
    return {
        "id": t.id, "name": t.agent_name or "agent_loop", "start_ns": t.start_ns, "end_ns": t.end_ns,
        "status": t.status, "reward": t.reward, "error": getattr(t, "error_message", None),
        "attributes": {"step": t.step, "sample_index": t.sample_index, "rollout_n": t.rollout_n,
                       "validate": bool(t.validate), "experiment_name": t.experiment or experiment},
    }  # fmt: skip


def write_trajectory(client: Any, t: dict[str, Any], spans: list[Any]) -> None:
    """Create and finish the root call and one call per span (parents before children), with the
    recorded times. ``spans`` may be live Spans or stored SpanRecords."""
    attributes = {k: v for k, v in t["attributes"].items() if v is not None}
    root = client.create_call(t["name"], {"trajectory_id": t["id"], **attributes}, attributes=attributes,
                              use_stack=False, _call_id_override=call_id(t["id"]),
                              started_at=_time(t["start_ns"]))  # fmt: skip
    calls = {t["id"]: root}
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.id))
    for s in ordered:
        parent = calls.get(s.parent_id, root)
        inputs = s.inputs if isinstance(s.inputs, dict) else {"inputs": s.inputs}
        calls[s.id] = client.create_call(s.name, inputs, parent=parent, attributes={**attributes, "kind": _kind(s)},
                                         use_stack=False, _call_id_override=call_id(t["id"], s.id),
                                         started_at=_time(s.start_ns))  # fmt: skip
    for s in reversed(ordered):
        error = RuntimeError(f"{s.error_type}: {s.error_message}") if s.status == "error" else None
        client.finish_call(calls[s.id], output=s.outputs, exception=error, ended_at=_time(s.end_ns or s.start_ns))
    output = {"status": t["status"], "reward": t["reward"]}
    error = RuntimeError(t["error"]) if t["status"] == "error" and t["error"] else None
    client.finish_call(root, output=output, exception=error, ended_at=_time(t["end_ns"] or t["start_ns"]))


def _kind(span: Any) -> str:
    kind = span.kind
    return kind if isinstance(kind, str) else kind.value
