"""The real engines the tests run against, each started in one place: W&B's own Weave trace
server (``weave_trace_server``, from ``.venv-weave``), vLLM's OpenAI-compatible server on its CPU
build (``vllm_server``, from the project's venv: ``make vllm``) and SGLang's server on the CPU
(``sglang_server``: ``make sglang``). Phoenix's is in tests/tracing/test_otel_phoenix.py."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rollscope.cpu.sglang import ENVIRONMENT as SGLANG_CPU_ENVIRONMENT
from rollscope.cpu.sglang import SERVER_ARGUMENTS as SGLANG_CPU_ARGUMENTS

ROOT = Path(__file__).resolve().parents[2]
WEAVE_VENV = ROOT / ".venv-weave"


class WeaveTraceServer:
    """W&B's Weave trace server in a process of its own (``weave_trace_server.py``); ``environment()``
    points the weave client, ``weave.init`` and a trace sidecar at it, with a fresh client cache
    (the client caches object creation on disk: against a fresh server, a warm cache would skip it)."""

    def __init__(self, data_dir: Path) -> None:
        python = WEAVE_VENV / "bin" / "python"
        if not python.exists():
            raise RuntimeError(f"W&B's Weave trace server is not installed in {WEAVE_VENV}: run `make install`")
        self.log = data_dir / "server.log"
        self.process = subprocess.Popen(
            [str(python), str(Path(__file__).with_name("weave_trace_server.py")), str(data_dir / "data")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            text=True,
            env={**os.environ, "DD_TRACE_ENABLED": "false", "PYTHONWARNINGS": "ignore"},
        )
        self.url = self.process.stdout.readline().strip()  # once the migrations ran (~10 s)
        if not self.url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"the Weave trace server did not start: {self.log.read_text()[-3000:]}")
        self.cache_dir = tempfile.mkdtemp(prefix="weave-cache-", dir=data_dir)

    def environment(self) -> dict[str, str]:
        return {
            "WANDB_API_KEY": "x" * 40,
            "WANDB_BASE_URL": self.url,
            "WF_TRACE_SERVER_URL": f"{self.url}/traces",
            "WEAVE_SERVER_CACHE_DIR": self.cache_dir,
            "WANDB_ERROR_REPORTING": "false",
        }

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()  # it serves until its stdin closes
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def weave_calls(project: str) -> list[dict]:
    """Every call of ``project`` (``entity/project``), read through the weave client's own query,
    as plain dicts of the fields the Traces table shows."""
    import weave

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    fields = (
        "id",
        "trace_id",
        "parent_id",
        "project_id",
        "display_name",
        "op_name",
        "started_at",
        "ended_at",
        "attributes",
        "inputs",
        "output",
        "summary",
        "exception",
        "wb_run_id",
        "wb_run_step",
    )
    return [{f: plain(getattr(c, f, None)) for f in fields} for c in weave.init(project).get_calls()]


def weave_feedback(project: str) -> list[dict]:
    """Every feedback item of ``project``, as plain dicts."""
    import weave

    return [
        {"weave_ref": f.weave_ref, "feedback_type": f.feedback_type, "payload": dict(f.payload)}
        for f in weave.init(project).get_feedback()
    ]


class EngineServer:
    """A model server in a process group of its own on 127.0.0.1, started once and ready when
    ``health`` answers 200; ``close`` stops the group (SIGTERM: the engines unlink their shared
    memory on the way out; SIGKILL a minute later)."""

    name = "the engine"
    health = "/health"

    def __init__(self, command: list[str], env: dict[str, str], log: Path, port: int, *, ready_s: float) -> None:
        self.url, self.log = f"http://127.0.0.1:{port}", log
        self.process = subprocess.Popen(
            command, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}{self.health}", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.close()
        raise RuntimeError(f"{self.name} was not ready in {ready_s:.0f} s: {log.read_text()[-3000:]}")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)


def free_port(below: int = 65536) -> int:
    """A port nothing listens on (SGLang derives more ports from its own, hence ``below``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return port if port < below else free_port(below)


class VLLMServer(EngineServer):
    """``vllm serve MODEL`` (vLLM's CPU build, ~40 s to ready), fp32 and with the log-probs of the
    sampled distribution (``processed_logprobs``: what verl's actor computes, at any temperature)."""

    name = "vllm serve"

    def __init__(self, model: Path, log: Path, *, max_model_len: int = 512, ready_s: float = 300.0) -> None:
        vllm = Path(sys.executable).with_name("vllm")
        if not vllm.exists():
            raise RuntimeError(f"vLLM is not installed in {vllm.parent.parent}: run `make vllm`")
        self.model, port = model, free_port()
        super().__init__(
            [
                str(vllm),
                "serve",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dtype",
                "float32",
                "--max-model-len",
                str(max_model_len),
                "--enforce-eager",
                "--logprobs-mode",
                "processed_logprobs",
            ],
            {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1", "TORCH_COMPILE_DISABLE": "1"},
            log,
            port,
            ready_s=ready_s,
        )


class SGLangServer(EngineServer):
    """``python -m sglang.launch_server`` of MODEL on the CPU (``make sglang``; docs/llm-clients.md,
    "SGLang on CPU"): torch-native attention, fp32, ready on ``/health_generate`` (a real
    generation) in ~15-40 s. Its log-probs are those of the sampled distribution, as vLLM's above."""

    name = "SGLang's server"
    health = "/health_generate"

    def __init__(self, model: Path, log: Path, *, context_length: int = 512, ready_s: float = 300.0) -> None:
        if importlib.util.find_spec("sglang") is None:
            raise RuntimeError(f"SGLang is not installed in {sys.prefix}: run `make sglang`")
        self.model, port = model, free_port(below=40000)
        super().__init__(
            [
                sys.executable,
                "-m",
                "sglang.launch_server",
                "--model-path",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *SGLANG_CPU_ARGUMENTS,
                "--dtype",
                "float32",
                "--context-length",
                str(context_length),
                "--max-total-tokens",
                "8192",
            ],
            SGLANG_CPU_ENVIRONMENT,
            log,
            port,
            ready_s=ready_s,
        )
