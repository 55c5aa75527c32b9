"""Runs model-written Python where the kernel sets the bounds, and leaves nothing behind.

Code an RL policy writes is adversarial by construction, so the boundary lives outside the
interpreter that runs it: bubblewrap (``bwrap``, the sandbox Flatpak uses; Debian's
``bubblewrap``) starts the child in new user, pid, mount, ipc, uts, cgroup and network namespaces,
as uid/gid 65534 with every capability dropped, in a new session, dying with its parent. Its file
system is a read-only view of ``/usr``, ``/lib*``, ``/bin`` and the interpreter's prefix, a fresh
``/proc`` (its own processes only) and ``/dev``, and a size-capped tmpfs as working directory
(``/work``, also ``$TMPDIR``); nothing else of the host exists in it (no ``/root``, ``/home``,
``/etc``, host ``/tmp`` or ``/dev/shm``). Bounds the host enforces, whatever the code does:
- CPU seconds, address space, file size and open files (rlimits, inherited by every process);
- number of processes and memory of all its processes together: cgroups (v1, or a delegated v2
  subtree) where this process may make them, else rlimits arranged to hold the same totals, never
  silently less (``sandbox_bounds``: which mechanism, why, and what it costs);
- wall time and output: the host reads stdout/stderr in chunks and kills the whole sandbox past
  the time limit or the output cap (the model then sees what came, truncated, plus a note);
- disk: the tmpfs size.
When the call returns, every process of the sandbox is gone (killing bwrap kills its pid
namespace's init, and with it every process in the namespace; the call waits for that).

No seccomp filter: with no capability outside its own user namespace and no further user
namespaces allowed (``--disable-userns``), ``mount``, ``unshare``, ``setns`` and ``keyctl`` on the
host's objects fail in the kernel already, and host processes are invisible in its pid namespace
(nothing to ``ptrace`` or ``pidfd_open``; its own init ignores its signals).

The audit hook in ``sandbox_runner.py`` stays as a second layer (clear messages for the common
refusals), never as the boundary. Where bubblewrap cannot run (not installed, no user namespaces),
the tool refuses with one error saying what is missing; ``allow_unsandboxed: true`` in its config
runs trusted code in a plain child process instead (rlimits and the audit hook only), loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.tools.builtin.sandbox_bounds import Bounds, BoundsUnavailable, SandboxCgroups, plan
from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool

log = logging.getLogger("rollscope.tools")

RUNNER = str(Path(__file__).with_name("sandbox_runner.py"))
SANDBOX_ID = 65534  # nobody
WORKDIR = "/work"
READ_CHUNK = 1 << 16

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


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot isolate code on this host; the message says what is missing."""


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """Why bubblewrap cannot run a sandbox here with its bounds, or None when it can (tried once
    per process, the way sandboxes will start: as the uid they will start as)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (bwrap not on PATH): apt-get install bubblewrap"
    try:
        bounds = plan(16, 512)
    except BoundsUnavailable as exc:
        return str(exc)
    try:
        done = subprocess.run(
            [*_bwrap_args(bwrap, 1, bounds), "/bin/true"],
            capture_output=True,
            timeout=30,
            preexec_fn=_child_setup(5, 512, None, host_uid=bounds.host_uid),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        return f"bubblewrap cannot create the sandbox's namespaces here (user namespaces disabled?): {why}"
    return None


def _bwrap_args(bwrap: str, disk_mb: int, bounds: Bounds, *mounts: str) -> list[str]:
    prefix = bounds.prefix
    size = str(disk_mb * 1024 * 1024)
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--uid",
        str(SANDBOX_ID),
        "--gid",
        str(SANDBOX_ID),
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind-try",
        "/lib",
        "/lib",
        "--ro-bind-try",
        "/lib64",
        "/lib64",
        "--ro-bind-try",
        "/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        size,
        "--tmpfs",
        WORKDIR,
        "--dir",
        f"{WORKDIR}/tmp",
        "--chdir",
        WORKDIR,
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        WORKDIR,
        "--setenv",
        "TMPDIR",
        f"{WORKDIR}/tmp",
        "--setenv",
        "PYTHONHASHSEED",
        "0",
    ]
    if not prefix.startswith("/usr/"):  # (at its own path: the interpreter's library path names it)
        args += ["--ro-bind", prefix, prefix]
    # bwrap's root and /dev are tmpfs mounts without a size: read-only once set up, nothing lands there
    return [*args, *mounts, "--remount-ro", "/dev", "--remount-ro", "/"]


def _child_setup(
    cpu_s: int,
    memory_mb: int,
    cgroups: SandboxCgroups | None,
    *,
    nproc: int | None = None,
    host_uid: int | None = None,
    own_session: bool = False,
) -> Any:
    """What the child does between fork and exec: enter its cgroups, take its rlimits, and (root
    without a pids cgroup) become ``host_uid``, so that ``RLIMIT_NPROC`` binds it."""

    def apply() -> None:
        if own_session:
            os.setsid()
        if cgroups is not None:
            cgroups.enter()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if host_uid is not None:
            os.setgroups([])
            os.setgid(host_uid)
            os.setuid(host_uid)

    return apply


class PythonSandboxTool(TracedTool):
    """Config: ``timeout`` (wall seconds, default 10), ``cpu_seconds`` (5), ``memory_mb`` (512),
    ``max_processes`` (16), ``disk_mb`` (64), ``max_output_chars`` (4000), ``allow_unsandboxed``
    (false: refuse to run where bubblewrap cannot isolate the code)."""

    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        config = {"timeout": 10, **(config or {})}
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SCHEMA))
        self.cpu_seconds = int(self.config.get("cpu_seconds", 5))
        self.memory_mb = int(self.config.get("memory_mb", 512))
        self.max_processes = int(self.config.get("max_processes", 16))
        self.disk_mb = int(self.config.get("disk_mb", 64))
        self.max_output = int(self.config.get("max_output_chars", 4000))
        self.unsandboxed = bool(self.config.get("allow_unsandboxed", False))
        problem = sandbox_problem()
        if problem is not None and not self.unsandboxed:
            raise SandboxUnavailable(f"PythonSandboxTool will not run model-written code unsandboxed: {problem}")
        if problem is not None:
            log.warning("PythonSandboxTool runs code WITHOUT kernel isolation (allow_unsandboxed: true): %s", problem)
        self.unsandboxed = problem is not None
        # The wall-clock limit is enforced here (not by TracedTool's timeout) so the sandbox is
        # gone before the tool returns; TracedTool's timeout is the backstop.
        self.wall_s = self.timeout_s
        self.timeout_s = self.wall_s + 15

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            raise ToolError("'code' must be a non-empty string")
        result = await run_sandboxed(
            code,
            self.wall_s,
            self.cpu_seconds,
            self.memory_mb,
            self.max_processes,
            disk_mb=self.disk_mb,
            max_output_chars=self.max_output,
            unsandboxed=self.unsandboxed,
        )
        text = result["output"]
        if result["status"] != "ok":
            text = f"{text}\n[{result['status']}]".strip()
        return ToolResponse(text=text or "(no output)"), 0.0, {"status": result["status"], "exit": result["exit"]}


async def run_sandboxed(
    code: str,
    wall_s: float,
    cpu_s: int = 5,
    memory_mb: int = 512,
    max_procs: int = 16,
    *,
    disk_mb: int = 64,
    max_output_chars: int = 4000,
    unsandboxed: bool = False,
) -> dict[str, Any]:
    """Run ``code``; returns {"status": ok|error|timeout|killed|output_limit, "exit": code, "output": text,
    "bounds": how processes and memory were bounded}.

    Sandboxed by bubblewrap (raises ``SandboxUnavailable`` where it cannot run) unless
    ``unsandboxed``: a plain child process with rlimits and the audit hook, for trusted code.
    """
    if not unsandboxed and (problem := sandbox_problem()) is not None:
        raise SandboxUnavailable(problem)
    with contextlib.ExitStack() as stack:
        if unsandboxed:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="rollscope-sandbox-"))
            Path(workdir, "main.py").write_text(code)
            argv, cwd, fds = [sys.executable, "-I", "-S", RUNNER, workdir], workdir, ()
            env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "PYTHONHASHSEED": "0"}
            setup = _child_setup(cpu_s, memory_mb, None, nproc=max_procs, own_session=True)
            bounds_text = f"unsandboxed: RLIMIT_AS {memory_mb} MB, RLIMIT_NPROC {max_procs}"
        else:
            bounds = plan(max_procs, memory_mb)
            code_fd = _memfd("main.py", code.encode("utf-8", "surrogatepass"))
            stack.callback(os.close, code_fd)
            with open(RUNNER, "rb") as f:  # read here: the sandbox's uid may not reach this installation
                runner_fd = _memfd("runner.py", f.read())
            stack.callback(os.close, runner_fd)
            info_r, info_w = os.pipe()  # bwrap says there which pid its namespace's init has
            os.set_blocking(info_r, False)
            stack.callback(os.close, info_r)
            stack.callback(_wait_gone, info_r)
            nproc = [] if bounds.nproc is None else [str(bounds.nproc)]
            argv = [
                *_bwrap_args(
                    shutil.which("bwrap"),
                    disk_mb,
                    bounds,
                    "--file",
                    str(runner_fd),
                    "/sandbox/runner.py",
                    "--file",
                    str(code_fd),
                    f"{WORKDIR}/main.py",
                    "--info-fd",
                    str(info_w),
                ),
                bounds.python,
                "-I",
                "-S",
                "/sandbox/runner.py",
                WORKDIR,
                *nproc,
            ]
            cwd, fds, env = None, (code_fd, runner_fd, info_w), {}
            cgroups = SandboxCgroups(bounds) if bounds.cgroups.pids or bounds.cgroups.memory else None
            if cgroups is not None:
                stack.callback(cgroups.close)
            setup = _child_setup(cpu_s, bounds.process_memory_mb, cgroups, host_uid=bounds.host_uid)
            bounds_text = bounds.describe()
        result = await _run(argv, cwd, env, fds, wall_s, cpu_s, setup, max_output_chars, own_session=unsandboxed)
        return {**result, "bounds": bounds_text}


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def _run(
    argv: list[str],
    cwd: str | None,
    env: dict[str, str],
    fds: tuple[int, ...],
    wall_s: float,
    cpu_s: int,
    setup: Any,
    max_output_chars: int,
    own_session: bool,
) -> dict[str, Any]:
    # (bwrap makes the sandbox's session itself; the unsandboxed child gets one in ``setup``, so
    # that its whole process group can be killed)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            pass_fds=fds,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=setup,
        )
    finally:
        if fds:  # the write end of bwrap's info pipe is bwrap's alone now
            os.close(fds[-1])
    max_bytes = max_output_chars * 4 + 64  # enough for max_output_chars characters of UTF-8
    chunks: list[bytes] = []
    try:
        size, over = await asyncio.wait_for(_read(proc, chunks, max_bytes), wall_s)
        status = "output_limit" if over else None
    except asyncio.TimeoutError:
        size, status = sum(map(len, chunks)), "timeout"
    finally:
        _kill(proc.pid, own_session)
        # Read to the end: a paused pipe (output past the cap) would otherwise never report its
        # end, and asyncio reports the exit only after it. Bounded: a process of the unsandboxed
        # path that left its group could hold the pipe open.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(_drain(proc), 10)
    output = b"".join(chunks).decode("utf-8", "replace")
    if len(output) > max_output_chars or status == "output_limit":
        output = output[:max_output_chars] + f"\n...[output truncated at {max_output_chars} chars of {size:,} bytes]"
    exit_code = proc.returncode
    if not own_session and exit_code is not None and exit_code > 128:
        exit_code = 128 - exit_code  # bwrap's init reports a signal death as 128 + N: as asyncio would, -N
    if status == "timeout":
        return {"status": "timeout", "exit": exit_code, "output": f"{output}\ntimed out after {wall_s:g}s".strip()}
    if status == "output_limit":
        return {"status": "output_limit", "exit": exit_code, "output": output + "\nkilled: output limit"}
    status = "ok" if exit_code == 0 else ("killed" if exit_code < 0 else "error")
    if exit_code == -signal.SIGXCPU:
        output += f"\nkilled: CPU limit of {cpu_s}s"
    elif exit_code == -signal.SIGKILL:
        output += "\nkilled"
    return {"status": status, "exit": exit_code, "output": output}


async def _read(proc: asyncio.subprocess.Process, chunks: list[bytes], max_bytes: int) -> tuple[int, bool]:
    """Read the child's output in chunks until it ends (then wait for it) or passes ``max_bytes``:
    (bytes seen, whether the cap was passed). Kept chunks go into ``chunks`` as they come."""
    size = 0
    while chunk := await proc.stdout.read(READ_CHUNK):
        if size < max_bytes:
            chunks.append(chunk[: max_bytes - size])
        size += len(chunk)
        if size > max_bytes:
            return size, True
    await proc.wait()
    return size, False


async def _drain(proc: asyncio.subprocess.Process) -> None:
    while await proc.stdout.read(READ_CHUNK):
        pass
    await proc.wait()


def _wait_gone(info_fd: int, deadline_s: float = 10.0) -> None:
    """Wait until the sandbox's pid-namespace init has exited: the kernel has then killed every
    other process of the namespace (init goes last)."""
    try:
        info = json.loads(os.read(info_fd, 4096) or b"{}")
    except (OSError, ValueError):
        return
    pid = info.get("child-pid")
    end = time.monotonic() + deadline_s
    while isinstance(pid, int) and time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.005)


def _kill(pid: int, group: bool) -> None:
    """Kill the sandbox: bwrap itself (its pid namespace dies with it), or the unsandboxed child's group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
