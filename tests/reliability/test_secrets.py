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
        self.seen.append(
            json.dumps({"inputs": span.inputs, "outputs": span.outputs, "attrs": span.attributes}, default=str)
        )


def test_secrets_never_reach_the_store(tmp_path, monkeypatch):
    data = tmp_path / "data.jsonl"
    row = {
        "prompt": [{"role": "user", "content": f"Use my key {OPENAI_KEY} and token {GITHUB_TOKEN}"}],
        "reward_model": {"ground_truth": "2"},
        "extra_info": {"index": 0, "tools_kwargs": {"submit_answer": {"create_kwargs": {"ground_truth": "1"}}}},
    }
    data.write_text(json.dumps(row) + "\n")
    replies = tmp_path / "replies.json"
    call = {"name": "calculator", "arguments": {"expression": "1+1", "api_key": OPENAI_KEY}}
    replies.write_text(
        json.dumps(
            [
                f"<tool_call>{json.dumps(call)}</tool_call>",
                f"The password is {ENV_SECRET} and my token is {GITHUB_TOKEN}.",
            ]
        )
    )
    env = {"ROLLSCOPE_TEST_SECRET": ENV_SECRET}
    monkeypatch.setenv("ROLLSCOPE_TEST_SECRET", ENV_SECRET)
    traces = tmp_path / "traces"
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        f"dataset={data}",
        "--trace-dir",
        str(traces),
        "--quiet",
        env_extra=env,
    )
    assert result.returncode == 0, result.stderr
    stored = b"".join(p.read_bytes() for p in traces.iterdir())
    assert stored  # something was stored: the search below is not vacuous
    for secret in (OPENAI_KEY, GITHUB_TOKEN, ENV_SECRET):
        assert secret.encode() not in stored
    shown = rollscope(
        "traces",
        "show",
        json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json").stdout)[0]["id"],
        "--dir",
        str(traces),
        "--json",
    ).stdout
    assert "REDACTED" in shown and "The password is" in shown


def test_secrets_never_reach_another_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICE_TOKEN", ENV_SECRET)
    register_backend("keeping", KeepingBackend)
    KeepingBackend.seen.clear()
    tracing.init_tracing(backend="local,keeping", trace_dir=str(tmp_path))
    with (
        tracing.rollout_trace_attr(step=0, sample_index=0),
        tracing.trace_span("tool", kind="tool", inputs={"api_key": "x" * 20, "q": f"Bearer {GITHUB_TOKEN}"}) as s,
    ):
        s.outputs = {"text": f"env says {ENV_SECRET}", "key": OPENAI_KEY}
    assert tracing.flush_tracing(30)
    seen = "\n".join(KeepingBackend.seen)
    assert "env says" in seen  # what the backend got is the redacted payload, not nothing
    for secret in (OPENAI_KEY, GITHUB_TOKEN, ENV_SECRET, "x" * 20):
        assert secret not in seen


DSN = "postgres://trainer:Pg-s3cret-pw-77@db.internal:5432/rl"
STRIPE_LIVE, STRIPE_TEST, STRIPE_RESTRICTED = (
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "sk_test_" + "9xYz" * 6,
    "rk_live_" + "Ab12" * 6,
)
GITLAB = "glpat-" + "xY9_zW8-vU7t" * 2
BASIC = "dXNlcjpodW50ZXIyLXBhc3N3b3Jk"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SLACK, GOOGLE = "xoxb-" + "1234567890-abcdefghij", "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
ANTHROPIC, HF = "sk-ant-api03-" + "Qw9" * 10, "hf_" + "AbCdEfGhIjKlMnOpQrStUv"
LATE = "late-exported-secret-" + "8" * 12
SHAPES = [
    DSN.split(":")[2].split("@")[0],
    STRIPE_LIVE,
    STRIPE_TEST,
    STRIPE_RESTRICTED,
    GITLAB,
    BASIC,
    AWS_SECRET,
    SLACK,
    GOOGLE,
    ANTHROPIC,
    HF,
    LATE,
]


def every_stored_text(trace_dir):
    """The shards' raw bytes plus every trajectory and span as the store decodes them (payloads
    are compressed on disk: a raw search alone would miss them)."""
    from rollscope.store import TraceStore

    raw = b"".join(p.read_bytes() for p in trace_dir.rglob("*") if p.is_file()).decode("latin-1")
    with TraceStore(trace_dir) as store:
        decoded = [repr(vars(t)) + repr([vars(s) for s in store.get(t.id).spans]) for t in store.trajectories()]
    assert decoded  # the search below is not vacuous
    return raw + "".join(decoded)


@pytest.mark.parametrize("sidecar", [True, False], ids=["shaped in the sidecar", "shaped in this process"])
def test_every_secret_shape_through_every_path_is_redacted(tmp_path, monkeypatch, sidecar):
    traces = tmp_path / "traces"
    from rollscope.tracing._redaction import Redactor

    monkeypatch.setattr(Redactor, "REFRESH_S", 0.0)  # look at the environment at every batch (no waiting)
    tracing.init_tracing(trace_dir=str(traces), experiment=f"run-{STRIPE_LIVE}", sidecar=sidecar)
    monkeypatch.setenv("LATE_API_KEY", LATE)  # set after tracing started
    with tracing.rollout_trace_attr(step=1, sample_index=0, name=f"agent {GITLAB}", note=f"db {DSN}"):
        with tracing.trace_span(
            f"lookup {SLACK}",
            kind="tool",
            inputs={
                "prompt": f"use {ANTHROPIC} and {HF}",
                "late": f"env {LATE}",
                "nested": {"calls": [{"aws_secret_access_key": AWS_SECRET}]},
                GOOGLE: "a secret used as a key",
            },
        ) as span:
            span.outputs = {"header": f"Authorization: Basic {BASIC}", "keys": [STRIPE_TEST, STRIPE_RESTRICTED]}
            span.fail(RuntimeError(f"connect failed for {DSN}"))
        tracing.set_reward(1.0, detail=f"scored with {GOOGLE}")
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    stored = every_stored_text(traces)
    assert "REDACTED" in stored and "a secret used as a key" in stored
    leaked = [s for s in SHAPES if s in stored]
    assert leaked == []
