"""``otel``: OTLP (http/protobuf) export with OpenTelemetry's GenAI semantic conventions.

A trajectory is an ``invoke_agent <agent>`` span; LLM turns are ``chat <model>`` spans, tool calls
``execute_tool <tool>`` spans, with ``gen_ai.*`` attributes (operation, agent and tool names, token
usage, finish reasons) and ``rollscope.*`` ones (step, sample_index, rollout_n, validate,
experiment, reward; inputs and outputs as JSON text). Spans keep their recorded times and nesting.
Point it at an OpenTelemetry Collector (``otel_endpoint=http://collector:4318/v1/traces``, or the
standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) to fan traces out at cluster scale.
"""

from __future__ import annotations

import json
from typing import Any

from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.spans import Span, Trajectory

MAX_ATTRIBUTE_CHARS = 8_192


class OtelBackend(TrajectoryBackend):
    name = "otel"
    options = frozenset({"otel_endpoint", "otel_headers", "otel_service_name"})

    def __init__(self, *, project: str | None = None, experiment: str | None = None, otel_endpoint: str | None = None,
                 otel_headers: dict[str, str] | None = None, otel_service_name: str | None = None) -> None:  # fmt: skip
        super().__init__(project=project, experiment=experiment)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # A provider of our own: the application's global one (if any) is left alone.
        self.provider = TracerProvider(resource=Resource.create({"service.name": otel_service_name or "rollscope"}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otel_endpoint,
                                                                             headers=otel_headers)))  # fmt: skip
        self.tracer = self.provider.get_tracer("rollscope")

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        write_spans(self.tracer, trajectory, spans, self.experiment)

    def flush(self) -> None:
        self.provider.force_flush()

    def close(self) -> None:
        self.provider.shutdown()


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS] + "…"


def _kind(span: Any) -> str:
    return span.kind if isinstance(span.kind, str) else span.kind.value


def _name_and_attributes(span: Any) -> tuple[str, dict[str, Any]]:
    kind, attrs = _kind(span), dict(span.attributes or {})
    out: dict[str, Any] = {"rollscope.kind": kind, "rollscope.span_id": span.id}
    if kind == "llm":
        model = attrs.get("gen_ai.request.model", "model")
        out.update({"gen_ai.operation.name": "chat", "gen_ai.request.model": model})
        name = f"chat {model}"
    elif kind == "tool":
        tool = attrs.get("tool.name") or span.name
        out.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
        name = f"execute_tool {tool}"
    else:
        name = span.name
    for key, value in attrs.items():
        if key.startswith("gen_ai.") and value is not None:
            out[key] = value if isinstance(value, (str, bool, int, float)) else [str(v) for v in value]
    out["rollscope.inputs"] = _json(span.inputs)
    out["rollscope.outputs"] = _json(span.outputs)
    return name, out


def write_spans(tracer: Any, t: Any, spans: list[Any], experiment: str | None = None) -> None:
    """The trajectory (a live Trajectory or a stored record) and its spans as OpenTelemetry spans."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    agent = t.agent_name or "agent_loop"
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                  "rollscope.trajectory_id": t.id, "rollscope.step": t.step, "rollscope.sample_index": t.sample_index,
                  "rollscope.rollout_n": t.rollout_n, "rollscope.validate": bool(t.validate),
                  "rollscope.experiment": t.experiment or experiment, "rollscope.reward": t.reward}  # fmt: skip
    attributes = {k: (v if isinstance(v, (str, bool, int, float)) else str(v)) for k, v in attributes.items()
                  if v is not None}  # fmt: skip
    root = tracer.start_span(f"invoke_agent {agent}", attributes=attributes, start_time=t.start_ns)
    live = {t.id: root}
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.id))
    for s in ordered:
        name, attrs = _name_and_attributes(s)
        parent = trace.set_span_in_context(live.get(s.parent_id, root))
        live[s.id] = tracer.start_span(name, context=parent, attributes=attrs, start_time=s.start_ns)
    for s in reversed(ordered):
        if s.status == "error":
            live[s.id].set_status(Status(StatusCode.ERROR, f"{s.error_type}: {s.error_message}"))
        live[s.id].end(end_time=s.end_ns or s.start_ns)
    if t.status == "error":
        root.set_status(Status(StatusCode.ERROR, getattr(t, "error_message", None) or "error"))
    root.end(end_time=t.end_ns or t.start_ns)
