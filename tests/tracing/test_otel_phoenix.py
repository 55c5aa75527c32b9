"""The otel backend against a real OpenTelemetry viewer: Arize Phoenix, started here on 127.0.0.1
from its own venv (``make install`` builds ``.venv-phoenix``), read back through Phoenix's own
client. Each trajectory must be one root, and each LLM span must show its conversation (roles and
text, from token2text) in both conventions Phoenix reads."""

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from rollscope import tracing
from tests.engines import free_port
from tests.tracing.value_kinds import TABLE

pytestmark = pytest.mark.slow

PHOENIX = Path(__file__).resolve().parents[2] / ".venv-phoenix" / "bin"
PROMPT = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is {q}?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    """One Phoenix server for the module (each test writes its own project)."""
    tmp_path = tmp_path_factory.mktemp("phoenix")
    if not (PHOENIX / "phoenix").exists():
        pytest.fail(f"Arize Phoenix is not installed in {PHOENIX.parent}: run `make install`")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
    }
    log = (tmp_path / "phoenix.log").open("w")
    server = subprocess.Popen([str(PHOENIX / "phoenix"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):  # startup takes ~20 s here: wait for it, however long the machine needs
            if server.poll() is not None:
                pytest.fail(f"phoenix exited: {(tmp_path / 'phoenix.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("phoenix did not answer /healthz")
        yield url
    finally:
        server.terminate()
        server.wait(30)
        log.close()


def read_spans(url, project):
    """Phoenix's own client, run in Phoenix's venv."""
    script = (
        f"import json; from phoenix.client import Client; "
        f"print(json.dumps(Client(base_url={url!r}).spans.get_spans(project_identifier={project!r}, "
        f"limit=1000), default=str))"
    )
    done = subprocess.run([str(PHOENIX / "python"), "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_phoenix_shows_every_trajectory_as_one_root_and_every_llm_turn_as_a_conversation(phoenix, tiny_tokenizer):
    tracing.init_tracing(
        backend="otel",
        project="phx",
        experiment="e1",
        token2text=True,
        tokenizer=tiny_tokenizer,
        otel_endpoint=f"{phoenix}/v1/traces",
    )
    questions = ["6 * 7", "3 + 4", "9 - 2"]
    for i, q in enumerate(questions):
        with tracing.rollout_trace_attr(step=4, sample_index=i, rollout_n=0, name="tool_agent"):
            with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"raw_prompt": q}):
                prompt_ids = tiny_tokenizer.encode(PROMPT.format(q=q))
                with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": prompt_ids}) as s:
                    s.outputs = {"token_ids": tiny_tokenizer.encode("calculate"), "stop_reason": "completed"}
                with tracing.trace_span(
                    "CalculatorTool.execute",
                    kind="tool",
                    **{"tool.name": "calculator"},
                    inputs={"instance_id": f"c{i}", "parameters": {"expression": q}},
                ) as s:
                    s.outputs = {"text": "42", "reward": 0.0}
            tracing.set_reward(float(i))
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    spans = []
    for _ in range(60):  # Phoenix ingests asynchronously
        spans = read_spans(phoenix, "phx")
        if len(spans) >= 12:
            break
        time.sleep(0.5)
    roots = [s for s in spans if s["parent_id"] is None]
    assert len(spans) == 12 and len(roots) == 3  # trajectory, run, llm, tool per trajectory
    assert sorted(r["attributes"]["sample_index"] for r in roots) == [0, 1, 2]
    assert {r["span_kind"] for r in roots} == {"AGENT"}
    for root in roots:
        trace = [s for s in spans if s["context"]["trace_id"] == root["context"]["trace_id"]]
        assert len(trace) == 4 and all(s["attributes"]["step"] == 4 for s in trace)
        q = questions[root["attributes"]["sample_index"]]
        [llm] = [s for s in trace if s["span_kind"] == "LLM"]
        a = llm["attributes"]
        # OpenInference: roles and text, as Phoenix shows them
        assert [a[f"llm.input_messages.{k}.message.role"] for k in (0, 1)] == ["system", "user"]
        assert a["llm.input_messages.1.message.content"] == f"What is {q}?"
        assert a["llm.output_messages.0.message.content"] == "calculate" and a["output.value"] == "calculate"
        # OpenTelemetry GenAI: the same conversation
        assert json.loads(a["gen_ai.input.messages"]) == [
            {"role": "user", "parts": [{"type": "text", "content": f"What is {q}?"}]}
        ]
        assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
        assert json.loads(a["gen_ai.output.messages"])[0]["finish_reason"] == "completed"
        [tool] = [s for s in trace if s["span_kind"] == "TOOL"]
        assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"expression": q}
        assert tool["attributes"]["gen_ai.tool.call.result"] == tool["attributes"]["output.value"] == "42"


def test_every_kind_of_value_reads_back_from_phoenix_as_the_table_says(phoenix):
    """The values table (tests/tracing/value_kinds.py) through the otel backend: each span's
    ``input.value`` and ``output.value`` are the value's JSON, cut at the attribute bound (8,192
    characters, OpenTelemetry's norm) where it is longer."""
    from rollscope.tracing.backends.otel import MAX_ATTRIBUTE_CHARS

    tracing.init_tracing(backend="otel", project="values", otel_endpoint=f"{phoenix}/v1/traces")
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        for name, value, _ in TABLE:
            with tracing.trace_span(name, inputs=value) as span:
                span.outputs = value
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    spans = {}
    for _ in range(60):  # Phoenix ingests asynchronously
        spans = {s["name"]: s for s in read_spans(phoenix, "values")}
        if len(spans) >= len(TABLE) + 1:
            break
        time.sleep(0.5)
    assert set(spans) >= {name for name, _, _ in TABLE}  # no span lost to a hostile value
    for name, _, expected in TABLE:
        a = spans[name]["attributes"]
        text = json.dumps(expected, ensure_ascii=False)
        for stored in (a["input.value"], a["output.value"]):
            if len(text) <= MAX_ATTRIBUTE_CHARS:
                assert json.loads(stored) == expected, name
            else:
                assert stored == text[:MAX_ATTRIBUTE_CHARS] + "…", name
