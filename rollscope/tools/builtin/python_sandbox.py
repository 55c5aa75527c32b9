"""Runs model-written Python in a child process with hard limits, and leaves nothing behind.

Layers, outermost first:
- a fresh temporary working directory, deleted afterwards;
- its own session (process group), killed as a whole when the run ends or times out;
- a private network namespace when the OS allows it (root, or unprivileged user namespaces);
- resource limits: CPU seconds, address space, file size, open files, processes;
- ``python -I -S``: no user site, no site-packages, no environment variables from the parent;
- an audit hook (sandbox_runner.py) refusing sockets, process creation, native code loading and
  file access outside the working directory and the standard library.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import resource
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool

RUNNER = str(Path(__file__).with_name("sandbox_runner.py"))
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

SCHEMA = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run a Python 3 program (standard library only, no network, no files outside its "
        "working directory) and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the program; print() the results"}},
            "required": ["code"],
        },
    },
}


def _limits(cpu_s: int, memory_mb: int, max_procs: int) -> Any:
    def apply() -> None:  # runs in the child between fork and exec
        os.setsid()
        for flags in (CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET):
            if _libc_unshare(flags) == 0:
                break
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _libc_unshare(flags: int) -> int:
    try:
        return ctypes.CDLL(None, use_errno=True).unshare(flags)
    except (OSError, AttributeError):
        return -1


class PythonSandboxTool(TracedTool):
    """Config: ``timeout`` (wall seconds, default 10), ``cpu_seconds`` (5), ``memory_mb`` (512),
    ``max_output_chars`` (4000)."""

    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        config = {"timeout": 10, **(config or {})}
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SCHEMA))
        self.cpu_seconds = int(self.config.get("cpu_seconds", 5))
        self.memory_mb = int(self.config.get("memory_mb", 512))
        self.max_output = int(self.config.get("max_output_chars", 4000))
        # The wall-clock limit is enforced here (not by TracedTool's timeout) so the process group is
        # killed before the tool returns; TracedTool's timeout is the backstop.
        self.wall_s = self.timeout_s
        self.timeout_s = self.wall_s + 5

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            raise ToolError("'code' must be a non-empty string")
        result = await run_sandboxed(code, self.wall_s, self.cpu_seconds, self.memory_mb)
        text = result["output"]
        if len(text) > self.max_output:
            text = text[: self.max_output] + f"\n...[output truncated, {len(result['output'])} chars]"
        if result["status"] != "ok":
            text = f"{text}\n[{result['status']}]".strip()
        return ToolResponse(text=text or "(no output)"), 0.0, {"status": result["status"], "exit": result["exit"]}


async def run_sandboxed(code: str, wall_s: float, cpu_s: int = 5, memory_mb: int = 512,
                        max_procs: int = 16) -> dict[str, Any]:  # fmt: skip
    """Run ``code``; returns {"status": ok|error|timeout|killed, "exit": code, "output": text}."""
    workdir = tempfile.mkdtemp(prefix="rollscope-sandbox-")
    proc = None
    try:
        Path(workdir, "main.py").write_text(code)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", RUNNER, workdir,
            cwd=workdir, env={"PATH": "/usr/bin:/bin", "HOME": workdir, "PYTHONHASHSEED": "0"},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_limits(cpu_s, memory_mb, max_procs),
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), wall_s)
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            out = b""
            await proc.wait()
            return {"status": "timeout", "exit": proc.returncode, "output": f"timed out after {wall_s:g}s"}
        exit_code = proc.returncode
        status = "ok" if exit_code == 0 else ("killed" if exit_code < 0 else "error")
        output = out.decode("utf-8", "replace")
        if exit_code == -signal.SIGXCPU or exit_code == -signal.SIGKILL:
            output += f"\nkilled: CPU limit of {cpu_s}s" if exit_code == -signal.SIGXCPU else "\nkilled"
        return {"status": status, "exit": exit_code, "output": output}
    finally:
        if proc is not None:
            _kill_group(proc.pid)
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
