"""``weave``: trajectories as Weave calls, in the shape verl's own Weave tracing produces.

One root call per trajectory and one child call per span, nested as the spans were, each carrying
verl's attributes (step, sample_index, rollout_n, validate, experiment_name); the reward is in the
root call's output, token usage in the LLM calls' summaries (rolled up on the root). Calls are
written when the trajectory ends, with the spans' own start and end times and ids derived from
rollscope's, so the same trajectory replayed later (``rollscope push``) lands with its real timing
and creates no duplicate. What training did with the trajectory (its advantage, group, policy
version, log-prob agreement) arrives after the call ended: it goes as feedback on the root call.

Runs in the trace sidecar with a weave client of its own: ``weave.init(project)``, the call verl
makes, so the same entity and project (``WANDB_*`` environment, ``trainer.project_name``). Calls go
to the client's trace server as complete start/end records, which its batch processor pairs and
ships; the weave client's per-value serializer never walks a payload (the shaped payload is plain
JSON already), and token-id and log-prob lists travel packed as one string each, beside their
decoded text (``compact``).
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from typing import Any

from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.records import SpanLike, kind_of, reward_details, training_summary, walk
from rollscope.tracing.spans import Span, Trajectory

TRAINING_FEEDBACK = "rollscope.training"  # the feedback type of a trajectory's training record
_NAMESPACE = uuid.UUID("6f1d3c2e-5b7a-4e2f-9c1d-7a2b3c4d5e6f")
# Lists shorter than this stay lists: only token ids and log-probs are long enough to matter.
_PACK_FROM = 16


def call_id(trajectory_id: str, span_id: str | None = None) -> str:
    """The Weave call id of a trajectory (or one of its spans): the same on every replay."""
    return str(uuid.uuid5(_NAMESPACE, f"{trajectory_id}/{span_id or ''}"))


def _time(ns: int | None) -> datetime.datetime | None:
    return None if ns is None else datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)


def compact(value: Any) -> Any:
    """A shaped payload with each long list of numbers packed into one space-separated string
    (token ids, log-probs): one string for Weave to store and show instead of hundreds of values."""
    t = type(value)
    if t is dict:
        return {k: compact(v) if type(v) in _CONTAINERS else v for k, v in value.items()}
    if t is list:
        if len(value) >= _PACK_FROM and set(map(type, value)) <= _NUMBERS:  # (checked in C)
            return " ".join(map(str, value))
        return [compact(v) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS = (dict, list)
_NUMBERS = {int, float}


class WeaveBackend(TrajectoryBackend):
    name = "weave"
    requires = ("weave", "wandb")
    extra = "weave"
    options = frozenset({"weave_project", "weave_client"})
    out_of_process = True  # unless given a client object (tests): runtime keeps it here then

    def __init__(self, *, project: str | None = None, experiment: str | None = None,
                 weave_project: str | None = None, weave_client: Any = None) -> None:  # fmt: skip
        super().__init__(project=project, experiment=experiment)
        self._client = weave_client
        self._weave_project = weave_project or project or "rollscope"
        self._ops: dict[str, str] = {}

    @property
    def client(self) -> Any:
        if self._client is None:
            import weave

            self._client = weave.init(self._weave_project)
        return self._client

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        write_trajectory(self.client, trajectory_view(trajectory, self.experiment), spans, self._ops)

    def on_training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        write_training(self.client, trajectory_id, record)

    def flush(self) -> None:
        if self._client is not None:
            self._client.flush()

    def destination(self) -> str:
        return f"weave {os.environ.get('WF_TRACE_SERVER_URL', '-')} {self._weave_project}"


def write_training(client: Any, trajectory_id: str, record: dict[str, Any]) -> None:
    """A training record, late, on the trajectory's root call: a Weave call is immutable once
    ended, so it goes as feedback on the call (Weave's own way to add to a call afterwards, shown
    beside it and filterable in the calls table), of type ``rollscope.training``, the scalars only."""
    project_id = client.project_id
    client.server.feedback_create({
        "project_id": project_id, "weave_ref": f"weave:///{project_id}/call/{call_id(trajectory_id)}",
        "feedback_type": TRAINING_FEEDBACK, "payload": training_summary(record)})  # fmt: skip


def trajectory_view(t: Any, experiment: str | None) -> dict[str, Any]:
    """What a Weave root call needs of a trajectory (a live Trajectory or a stored record)."""
    return {
        "id": t.id, "name": t.agent_name or "agent_loop", "start_ns": t.start_ns, "end_ns": t.end_ns,
        "status": t.status, "reward": t.reward, "reward_details": reward_details(t),
        "error": getattr(t, "error_message", None),
        "attributes": {"step": t.step, "sample_index": t.sample_index, "rollout_n": t.rollout_n,
                       "validate": bool(t.validate), "experiment_name": t.experiment or experiment},
    }  # fmt: skip


def _op_name(client: Any, name: str, ops: dict[str, str]) -> str:
    """The op's ref, published once per name (Weave's op filter lists it), as the client's
    ``create_call`` would for an op given by name."""
    uri = ops.get(name)
    if uri is None:
        import weave

        try:
            uri = weave.publish(weave.op(_anonymous, name=name), name=name).uri()
        except Exception:  # a server without object storage still takes the call by name
            uri = name
        ops[name] = uri
    return uri


def _anonymous(*args: Any, **kwargs: Any) -> None:
    """Stands for an op recorded by rollscope (its calls are written, never made)."""


def _usage(span: Any) -> dict[str, Any] | None:
    attrs = span.attributes or {}
    prompt, completion = attrs.get("gen_ai.usage.input_tokens"), attrs.get("gen_ai.usage.output_tokens")
    if prompt is None and completion is None:
        return None
    prompt, completion = prompt or 0, completion or 0
    return {
        attrs.get("gen_ai.request.model") or "model": {
            "requests": 1,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    }


def _add_usage(total: dict[str, Any], usage: dict[str, Any]) -> None:
    for model, counts in usage.items():
        into = total.setdefault(model, dict.fromkeys(counts, 0))
        for key, n in counts.items():
            into[key] = into.get(key, 0) + n


def _exception(kind: str | None, message: str | None) -> str:
    return json.dumps({"type": kind or "Error", "message": message or ""})


def write_trajectory(client: Any, t: dict[str, Any], spans: list[SpanLike], ops: dict[str, str] | None = None,
                     ) -> None:  # fmt: skip
    """The root call and one call per span (parents before children), each sent to the client's
    trace server as a start and an end record with the recorded times. ``spans`` may be live
    Spans or stored SpanRecords."""
    ops = {} if ops is None else ops
    server, project_id = client.server, client.project_id
    attributes = {k: v for k, v in t["attributes"].items() if v is not None}
    root_id = call_id(t["id"])
    ids = {t["id"]: root_id}
    total_usage: dict[str, Any] = {}
    root_start = _time(t["start_ns"])
    server.call_start({"start": {
        "project_id": project_id, "id": root_id, "trace_id": root_id, "parent_id": None,
        "op_name": _op_name(client, t["name"], ops), "display_name": t["name"], "started_at": root_start,
        "attributes": attributes, "inputs": {"trajectory_id": t["id"], **attributes}}})  # fmt: skip
    ends: dict[str, dict[str, Any]] = {}

    def start(s: SpanLike) -> None:
        kind = kind_of(s)
        ids[s.id] = cid = call_id(t["id"], s.id)
        started = _time(s.start_ns)
        inputs = compact(s.inputs) if isinstance(s.inputs, dict) else {"inputs": compact(s.inputs)}
        span_attributes = {**attributes, "kind": kind, **_plain_attributes(s.attributes)}
        server.call_start({"start": {
            "project_id": project_id, "id": cid, "trace_id": root_id, "parent_id": ids.get(s.parent_id, root_id),
            "op_name": _op_name(client, s.name, ops), "display_name": s.name, "started_at": started,
            "attributes": span_attributes, "inputs": inputs}})  # fmt: skip
        summary: dict[str, Any] = {}
        usage = _usage(s) if kind == "llm" else None
        if usage:
            summary["usage"] = usage
            _add_usage(total_usage, usage)
        error = s.status == "error"
        ends[s.id] = {"end": {
            "project_id": project_id, "id": cid, "trace_id": root_id, "started_at": started,
            "ended_at": _time(s.end_ns or s.start_ns), "output": compact(s.outputs), "summary": summary,
            "exception": _exception(s.error_type, s.error_message) if error else None}}  # fmt: skip

    walk(spans, start, lambda s: server.call_end(ends[s.id]))
    error = t["status"] == "error"
    output = {"status": t["status"], "reward": t["reward"]}
    if t.get("reward_details"):
        output["reward_details"] = t["reward_details"]
    server.call_end({"end": {
        "project_id": project_id, "id": root_id, "trace_id": root_id, "started_at": root_start,
        "ended_at": _time(t["end_ns"] or t["start_ns"]), "output": output,
        "summary": {"usage": total_usage} if total_usage else {},
        "exception": _exception("TrajectoryError", t["error"]) if error else None}})  # fmt: skip


def _plain_attributes(attributes: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if v is not None and k != "kind"}
