"""``otel``: OTLP (http/protobuf) export with OpenTelemetry's GenAI semantic conventions.

A trajectory is an ``invoke_agent <agent>`` span; LLM turns are ``chat <model>`` spans, tool calls
``execute_tool <tool>`` spans. Each carries what OpenTelemetry viewers display, in both conventions
they read: GenAI (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, tool call arguments and results, token usage, finish reasons) and
OpenInference (``input.value``, ``output.value``, ``llm.input_messages``, ``llm.output_messages``,
token counts, span kinds), from the shaped (redacted, truncated, token2text-decoded) payloads; plus
``rollscope.*`` attributes (step, sample_index, rollout_n, validate, experiment, reward; the raw
inputs and outputs as JSON text). Spans keep their recorded times and nesting. A trajectory's
trace and root span ids are derived from its id, so what training did with it, known later in
the trainer's process, joins the same trace: a ``rollscope.training`` span under the root with
``rl.*`` attributes (``rl.advantage``, ``rl.group.id``, ``rl.policy.version``, ...).
Point it at an OpenTelemetry Collector (``otel_endpoint=http://collector:4318/v1/traces``, or the
standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) to fan traces out at cluster scale.
"""

from __future__ import annotations

import json
import os
import uuid
from contextvars import ContextVar
from typing import Any

from rollscope.semconv import INPUT_TOKENS, OUTPUT_TOKENS, REQUEST_MODEL, TOOL_NAME
from rollscope.tracing.backends.base import Delivery
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.conversation import prompt_messages
from rollscope.tracing.backends.records import (
    SpanLike,
    TrajectoryLike,
    kind_of,
    reward_details,
    training_summary,
    walk,
)
from rollscope.tracing.spans import Span, Trajectory

MAX_ATTRIBUTE_CHARS = 8_192
_NAMESPACE = uuid.UUID("0c8f5a51-7f0e-4d8e-9a36-8f3b1f1e2d4c")
# A training record's fields as attributes, in the spirit of the proposed ``rl.*`` conventions.
RL_ATTRIBUTES = {
    "step": "rl.trainer.step",
    "uid": "rl.group.id",
    "group_size": "rl.group.size",
    "group_mean": "rl.group.reward.mean",
    "group_std": "rl.group.reward.std",
    "estimator": "rl.advantage.estimator",
    "advantage": "rl.advantage",
    "score": "rl.reward",
    "reward": "rl.reward.shaped",
    "policy_version": "rl.policy.version",
    "policy_version_max": "rl.policy.version.max",
    "lag": "rl.policy.lag",
    "tokens": "rl.tokens.loss",
    "masked_tokens": "rl.tokens.masked",
    "logprob_delta_max": "rl.logprob.delta.max",
    "logprob_delta_mean": "rl.logprob.delta.mean",
    "logprob_delta_position": "rl.logprob.delta.max_position",
    "masked_delta_max": "rl.logprob.delta.masked_max",
}


def trajectory_ids(trajectory_id: str) -> tuple[int, int]:
    """The OpenTelemetry trace id and root span id of a trajectory: the same in every process."""
    digest = uuid.uuid5(_NAMESPACE, trajectory_id).int
    return digest, (digest & 0xFFFF_FFFF_FFFF_FFFF) or 1


_root_ids: ContextVar[tuple[int, int] | None] = ContextVar("rollscope_otel_root_ids", default=None)


def _id_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class TrajectoryIds(RandomIdGenerator):
        """Random ids, except a trajectory's root span's (``trajectory_ids``)."""

        def generate_trace_id(self) -> int:
            ids = _root_ids.get()
            return ids[0] if ids is not None else super().generate_trace_id()

        def generate_span_id(self) -> int:
            ids = _root_ids.get()
            return ids[1] if ids is not None else super().generate_span_id()

    return TrajectoryIds()


class OtelBackend(TrajectoryBackend):
    name = "otel"
    requires = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
    extra = "otel"
    options = frozenset({"otel_endpoint", "otel_headers", "otel_service_name", "otel_resource"})
    # encoding and export off the traced process; batches the SDK's processor holds (2,048 spans, it drops beyond)
    delivery = Delivery(whole_trajectories=True, out_of_process=True, batch=1536)

    def __init__(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        otel_endpoint: str | None = None,
        otel_headers: dict[str, str] | None = None,
        otel_service_name: str | None = None,
        otel_resource: dict[str, str] | None = None,
    ) -> None:
        super().__init__(project=project, experiment=experiment)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # A provider of our own: the application's global one (if any) is left alone.
        # openinference.project.name: the project Phoenix and other OpenInference viewers file it under
        resource = {
            "service.name": otel_service_name or "rollscope",
            "openinference.project.name": project or "rollscope",
            **(otel_resource or {}),
        }
        self.provider = TracerProvider(resource=Resource.create(resource), id_generator=_id_generator())
        self.provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=otel_endpoint, headers=otel_headers))
        )
        self.tracer = self.provider.get_tracer("rollscope")
        self._endpoint = (
            otel_endpoint
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "-")
        )

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        write_spans(self.tracer, trajectory, spans, self.experiment)

    def on_training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        write_training(self.tracer, trajectory_id, record)

    def flush(self) -> None:
        self.provider.force_flush()

    def destination(self) -> str:
        return f"otel {self._endpoint}"

    def close(self) -> None:
        self.provider.shutdown()


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return _bounded(text)


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS] + "…"


_OPENINFERENCE_KIND = {"llm": "LLM", "tool": "TOOL", "agent": "AGENT", "reward": "EVALUATOR"}


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _conversation(span: Any) -> dict[str, Any]:
    """An llm span's prompt and reply in the two conventions viewers read: OpenTelemetry GenAI
    (``gen_ai.input.messages`` / ``gen_ai.output.messages``, parts) and OpenInference
    (``llm.input_messages.N.message.*``, ``input.value``, ``output.value``). Text comes from
    token2text; without it the ids stand in, as JSON."""
    out: dict[str, Any] = {}
    prompt = _field(span.inputs, "prompt_text")
    reply = _field(span.outputs, "response_text")
    finish = _field(span.outputs, "stop_reason")
    if isinstance(prompt, str):
        messages = prompt_messages(prompt)
        system = [m["content"] for m in messages if m["role"] == "system"]
        chat = [m for m in messages if m["role"] != "system"]
        if system:
            out["gen_ai.system_instructions"] = _json([{"type": "text", "content": c} for c in system])
        out["gen_ai.input.messages"] = _json(
            [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in chat]
        )
        for i, m in enumerate(messages):
            out[f"llm.input_messages.{i}.message.role"] = m["role"]
            out[f"llm.input_messages.{i}.message.content"] = _bounded(m["content"])
        out["input.value"], out["input.mime_type"] = _bounded(prompt), "text/plain"
    else:
        out["input.value"], out["input.mime_type"] = _json(span.inputs), "application/json"
    if isinstance(reply, str):
        message = {"role": "assistant", "parts": [{"type": "text", "content": reply}]}
        if finish is not None:
            message["finish_reason"] = str(finish)
        out["gen_ai.output.messages"] = _json([message])
        out["llm.output_messages.0.message.role"] = "assistant"
        out["llm.output_messages.0.message.content"] = _bounded(reply)
        out["output.value"], out["output.mime_type"] = _bounded(reply), "text/plain"
    else:
        out["output.value"], out["output.mime_type"] = _json(span.outputs), "application/json"
    return out


def _tool_call(span: Any, tool: str) -> dict[str, Any]:
    arguments = _field(span.inputs, "parameters")
    arguments = span.inputs if arguments is None else arguments
    result = _field(span.outputs, "text")
    out = {
        "gen_ai.tool.call.arguments": _json(arguments),
        "tool.name": tool,
        "tool.parameters": _json(arguments),
        "input.value": _json(arguments),
        "input.mime_type": "application/json",
    }
    call_id = _field(span.inputs, "instance_id")
    if call_id is not None:
        out["gen_ai.tool.call.id"] = str(call_id)
    if isinstance(result, str):
        out["gen_ai.tool.call.result"] = out["output.value"] = _bounded(result)
        out["output.mime_type"] = "text/plain"
    else:
        out["gen_ai.tool.call.result"] = out["output.value"] = _json(span.outputs)
        out["output.mime_type"] = "application/json"
    return out


def _name_and_attributes(span: Any) -> tuple[str, dict[str, Any]]:
    kind, attrs = kind_of(span), dict(span.attributes or {})
    out: dict[str, Any] = {
        "rollscope.kind": kind,
        "rollscope.span_id": span.id,
        "openinference.span.kind": _OPENINFERENCE_KIND.get(kind, "CHAIN"),
    }
    if kind == "llm":
        model = attrs.get(REQUEST_MODEL, "model")
        out.update({"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "llm.model_name": model})
        out.update(_conversation(span))
        prompt, completion = attrs.get(INPUT_TOKENS), attrs.get(OUTPUT_TOKENS)
        if isinstance(prompt, int):
            out["llm.token_count.prompt"] = prompt
        if isinstance(completion, int):
            out["llm.token_count.completion"] = completion
        if isinstance(prompt, int) and isinstance(completion, int):
            out["llm.token_count.total"] = prompt + completion
        name = f"chat {model}"
    elif kind == "tool":
        tool = attrs.get(TOOL_NAME) or span.name
        out.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
        out.update(_tool_call(span, tool))
        name = f"execute_tool {tool}"
    else:
        name = span.name
        out["input.value"], out["output.value"] = _json(span.inputs), _json(span.outputs)
    for key, value in attrs.items():
        if key.startswith("gen_ai.") and value is not None:
            out[key] = value if isinstance(value, (str, bool, int, float)) else [str(v) for v in value]
    out["rollscope.inputs"] = _json(span.inputs)
    out["rollscope.outputs"] = _json(span.outputs)
    return name, out


def write_spans(tracer: Any, t: TrajectoryLike, spans: list[SpanLike], experiment: str | None = None) -> None:
    """The trajectory (a live Trajectory or a stored record) and its spans as OpenTelemetry spans."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    agent = t.agent_name or "rollout_trace"
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "rollscope.trajectory_id": t.id,
        "rollscope.step": t.step,
        "rollscope.sample_index": t.sample_index,
        "rollscope.rollout_n": t.rollout_n,
        "rollscope.validate": bool(t.validate),
        "rollscope.experiment": t.experiment or experiment,
        "rollscope.reward": t.reward,
        **{f"rollscope.reward.{k}": v for k, v in reward_details(t).items()},
    }
    # verl's attribute names on every span, so any span filters by step, sample or experiment
    verl = {
        "step": t.step,
        "sample_index": t.sample_index,
        "rollout_n": t.rollout_n,
        "validate": bool(t.validate),
        "experiment_name": t.experiment or experiment,
    }
    verl = {k: (v if isinstance(v, (str, bool, int, float)) else str(v)) for k, v in verl.items() if v is not None}
    attributes = {
        k: (v if isinstance(v, (str, bool, int, float)) else str(v)) for k, v in attributes.items() if v is not None
    }
    attributes.update(verl)
    attributes["openinference.span.kind"] = "AGENT"
    attributes["output.value"] = _json({"status": t.status, "reward": t.reward, "reward_details": reward_details(t)})
    token = _root_ids.set(trajectory_ids(t.id))
    try:
        root = tracer.start_span(f"invoke_agent {agent}", attributes=attributes, start_time=t.start_ns)
    finally:
        _root_ids.reset(token)
    live = {t.id: root}

    def start(s: SpanLike) -> None:
        name, attrs = _name_and_attributes(s)
        attrs.update(verl)
        parent = trace.set_span_in_context(live.get(s.parent_id, root))
        live[s.id] = tracer.start_span(name, context=parent, attributes=attrs, start_time=s.start_ns)

    def end(s: SpanLike) -> None:
        if s.status == "error":
            live[s.id].set_status(Status(StatusCode.ERROR, f"{s.error_type}: {s.error_message}"))
        live[s.id].end(end_time=s.end_ns or s.start_ns)

    walk(spans, start, end)
    if t.status == "error":
        root.set_status(Status(StatusCode.ERROR, getattr(t, "error_message", None) or "error"))
    root.end(end_time=t.end_ns or t.start_ns)


def write_training(tracer: Any, trajectory_id: str, record: dict[str, Any]) -> None:
    """A training record as a ``rollscope.training`` span in the trajectory's trace, under its root."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    trace_id, root_id = trajectory_ids(trajectory_id)
    parent = NonRecordingSpan(
        SpanContext(trace_id, root_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    )
    attributes = {
        RL_ATTRIBUTES[k]: v if isinstance(v, (str, bool, int, float)) else str(v)
        for k, v in training_summary(record).items()
    }
    attributes.update({"rollscope.trajectory_id": trajectory_id, "openinference.span.kind": "EVALUATOR"})
    tracer.start_span("rollscope.training", context=trace.set_span_in_context(parent), attributes=attributes).end()
