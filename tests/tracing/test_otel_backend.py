"""The otel backend's OTLP http/protobuf export, received by a local OTLP receiver started here."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rollscope import tracing


@pytest.fixture
def receiver():
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            received.append((self.path, self.headers["Content-Type"], request, dict(self.headers)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    server.shutdown()
    server.server_close()


def _attrs(span):
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = v.string_value or v.int_value or v.double_value or v.bool_value
    return out


def test_genai_spans_reach_an_otlp_receiver(receiver, trace_dir):
    endpoint, received = receiver
    tracing.init_tracing(
        backend="local,otel",
        experiment="exp",
        trace_dir=str(trace_dir),
        otel_endpoint=endpoint,
        otel_service_name="rollouts",
    )
    with tracing.rollout_trace_attr(step=2, sample_index=5, rollout_n=1, name="tool_agent"):
        with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"q": "what"}):
            with tracing.trace_span(
                "llm.generate",
                kind="llm",
                inputs={"prompt_ids": [1]},
                **{"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 7},
            ) as s:
                s.outputs = {"response_text": "call"}
            with tracing.trace_span(
                "CalculatorTool.execute", kind="tool", inputs={"expression": "1/0"}, **{"tool.name": "calculator"}
            ) as s:
                s.fail(ZeroDivisionError("division by zero"))
        tracing.set_reward(0.5, judge="lenient")
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    assert received and all(
        path == "/v1/traces" and ctype == "application/x-protobuf" for path, ctype, _, _ in received
    )
    spans = [s for _, _, req, _ in received for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    service = {
        kv.value.string_value
        for _, _, req, _ in received
        for rs in req.resource_spans
        for kv in rs.resource.attributes
        if kv.key == "service.name"
    }
    assert service == {"rollouts"}
    by_name = {s.name: s for s in spans}
    assert set(by_name) == {"invoke_agent tool_agent", "ToolAgentLoop.run", "chat model", "execute_tool calculator"}
    root, run = by_name["invoke_agent tool_agent"], by_name["ToolAgentLoop.run"]
    assert _attrs(root)["rollscope.step"] == 2 and _attrs(root)["rollscope.reward"] == 0.5
    assert _attrs(root)["rollscope.reward.judge"] == "lenient"  # the reward's components beside it
    assert _attrs(root)["gen_ai.operation.name"] == "invoke_agent" and _attrs(root)["gen_ai.agent.name"] == "tool_agent"
    chat, tool = by_name["chat model"], by_name["execute_tool calculator"]
    assert chat.parent_span_id == run.span_id == tool.parent_span_id and run.parent_span_id == root.span_id
    assert len({s.trace_id for s in spans}) == 1
    assert _attrs(chat)["gen_ai.usage.output_tokens"] == 7 and _attrs(chat)["gen_ai.operation.name"] == "chat"
    assert _attrs(tool)["gen_ai.tool.name"] == "calculator" and tool.status.code == 2  # ERROR
    assert "division by zero" in tool.status.message
    assert chat.start_time_unix_nano >= root.start_time_unix_nano and chat.end_time_unix_nano <= root.end_time_unix_nano


def test_weave_otel_sends_to_weaves_otlp_endpoint_with_key_and_project(receiver, monkeypatch):
    """Weave's OpenTelemetry door: the path, the API key header and the project's Resource attributes
    Weave routes by (its docs, "Send OpenTelemetry Traces to Weave")."""
    endpoint, received = receiver
    monkeypatch.setenv("WF_TRACE_SERVER_URL", endpoint.removesuffix("/v1/traces") + "/traces")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    tracing.init_tracing(backend="weave-otel", experiment="exp", weave_project="ent/proj")
    with (
        tracing.rollout_trace_attr(step=1, sample_index=0, rollout_n=0, name="tool_agent"),
        tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": "hi"}) as s,
    ):
        s.outputs = {"response_text": "hello"}
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    assert {path for path, _, _, _ in received} == {"/traces/otel/v1/traces"}
    assert all(headers.get("wandb-api-key") == "k" * 40 for _, _, _, headers in received)
    resource = {
        kv.key: kv.value.string_value
        for _, _, req, _ in received
        for rs in req.resource_spans
        for kv in rs.resource.attributes
    }
    assert (resource["wandb.entity"], resource["wandb.project"]) == ("ent", "proj")
    spans = [s for _, _, req, _ in received for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(s.name for s in spans) == ["chat model", "invoke_agent tool_agent"]


def test_weave_otel_without_an_entity_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    with pytest.raises(ValueError, match="entity"):
        tracing.init_tracing(backend="weave-otel", weave_project="proj", sidecar=False)


def test_a_training_record_joins_the_trajectorys_trace_from_another_tracer(receiver, trace_dir):
    """The trace and root span ids derive from the trajectory's id: the trainer's process, with its
    own tracer, puts a ``rollscope.training`` span with ``rl.*`` attributes under the root span."""
    endpoint, received = receiver
    tracing.init_tracing(backend="local,otel", trace_dir=str(trace_dir), otel_endpoint=endpoint)
    with (
        tracing.rollout_trace_attr(step=2, sample_index=5, rollout_n=1, name="tool_agent") as t,
        tracing.trace_span("ToolAgentLoop.run", kind="agent"),
    ):
        pass
    tracing.shutdown_tracing()
    tracing.init_tracing(backend="otel", otel_endpoint=endpoint)  # the trainer's process
    tracing.get_tracer().training(
        t.id, {"step": 2, "uid": "u-1", "advantage": -0.5, "policy_version": 1, "lag": 0, "old_log_probs": [-1.0]}
    )
    tracing.shutdown_tracing()
    spans = {
        s.name: s for _, _, req, _ in received for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans
    }
    root, training = spans["invoke_agent tool_agent"], spans["rollscope.training"]
    assert training.trace_id == root.trace_id and training.parent_span_id == root.span_id
    attrs = _attrs(training)
    assert (attrs["rl.advantage"], attrs["rl.group.id"], attrs["rl.policy.version"]) == (-0.5, "u-1", 1)
    assert attrs["rl.trainer.step"] == 2 and attrs["rollscope.trajectory_id"] == t.id
    assert not any(key.startswith("rl.") and "log_probs" in key for key in attrs)  # per-token arrays stay out
