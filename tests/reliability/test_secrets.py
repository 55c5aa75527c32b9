"""Secrets in prompts, tool arguments, tool results and the environment never reach the store or
any backend: a full `rollscope run` (ScriptedLLM as the model), then every stored byte is searched,
and a backend that keeps what it is sent is searched too."""

import json

import pytest

from rollscope import tracing
from rollscope.tracing.backends import TraceBackend, register_backend
from tests.cli.test_run_cli import rollscope

pytestmark = pytest.mark.slow
OPENAI_KEY = "sk-proj-" + "Zq3" * 16
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4
ENV_SECRET = "correct-horse-battery-staple-9431"


class KeepingBackend(TraceBackend):
    """Keeps everything it is sent (a test double of a remote backend)."""

    name = "keeping"
    seen: list = []

    def on_trajectory_start(self, trajectory):
        self.seen.append(repr(vars(trajectory) if hasattr(trajectory, "__dict__") else trajectory.attributes))

    def on_span_end(self, span):
        self.seen.append(json.dumps({"inputs": span.inputs, "outputs": span.outputs, "attrs": span.attributes},
                                    default=str))  # fmt: skip


def test_secrets_never_reach_the_store(tmp_path, monkeypatch):
    data = tmp_path / "data.jsonl"
    row = {"prompt": [{"role": "user", "content": f"Use my key {OPENAI_KEY} and token {GITHUB_TOKEN}"}],
           "extra_info": {"index": 0, "tools_kwargs": {"submit_answer": {"create_kwargs": {"ground_truth": "1"}}}}}
    data.write_text(json.dumps(row) + "\n")
    replies = tmp_path / "replies.json"
    call = {"name": "calculator", "arguments": {"expression": "1+1", "api_key": OPENAI_KEY}}
    replies.write_text(json.dumps([f"<tool_call>{json.dumps(call)}</tool_call>",
                                   f"The password is {ENV_SECRET} and my token is {GITHUB_TOKEN}."]))
    env = {"ROLLSCOPE_TEST_SECRET": ENV_SECRET}
    monkeypatch.setenv("ROLLSCOPE_TEST_SECRET", ENV_SECRET)
    traces = tmp_path / "traces"
    result = rollscope("run", "gsm8k-calculator", "--llm", f"scripted:{replies}", f"dataset={data}",
                       "--trace-dir", str(traces), "--quiet", env_extra=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    stored = b"".join(p.read_bytes() for p in traces.iterdir())
    assert stored  # something was stored: the search below is not vacuous
    for secret in (OPENAI_KEY, GITHUB_TOKEN, ENV_SECRET):
        assert secret.encode() not in stored
    shown = rollscope("traces", "show", json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json").stdout)[0]["id"],
                      "--dir", str(traces), "--json").stdout  # fmt: skip
    assert "REDACTED" in shown and "The password is" in shown


def test_secrets_never_reach_another_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICE_TOKEN", ENV_SECRET)
    register_backend("keeping", KeepingBackend)
    KeepingBackend.seen.clear()
    tracing.init_tracing(backend="local,keeping", trace_dir=str(tmp_path))
    with tracing.rollout_trace_attr(step=0, sample_index=0), \
            tracing.trace_span("tool", kind="tool", inputs={"api_key": "x" * 20, "q": f"Bearer {GITHUB_TOKEN}"}) as s:
        s.outputs = {"text": f"env says {ENV_SECRET}", "key": OPENAI_KEY}
    assert tracing.flush_tracing(30)
    seen = "\n".join(KeepingBackend.seen)
    assert "env says" in seen  # what the backend got is the redacted payload, not nothing
    for secret in (OPENAI_KEY, GITHUB_TOKEN, ENV_SECRET, "x" * 20):
        assert secret not in seen
