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
- number of processes: a pids cgroup where the host offers one (root here: ``RLIMIT_NPROC`` does
  not bind uid 0, which the sandbox's uid maps to), else ``RLIMIT_NPROC``;
- memory of all its processes together, its tmpfs pages included: a memory cgroup where offered;
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
import uuid
from pathlib import Path
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool

log = logging.getLogger("rollscope.tools")

RUNNER = str(Path(__file__).with_name("sandbox_runner.py"))
SANDBOX_ID = 65534  # nobody
WORKDIR = "/work"
CGROUP_V1 = Path("/sys/fs/cgroup")
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
    """Why bubblewrap cannot run a sandbox here, or None when it can (tried once per process)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (bwrap not on PATH): apt-get install bubblewrap"
    try:
        done = subprocess.run([*_bwrap_args(bwrap, 1), "/bin/true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        return f"bubblewrap cannot create the sandbox's namespaces here (user namespaces disabled?): {why}"
    return None


def _python() -> tuple[str, str]:
    """The interpreter to run (the real file behind a venv's link) and the prefix it needs."""
    return os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)


def _bwrap_args(bwrap: str, disk_mb: int, *mounts: str) -> list[str]:
    _, prefix = _python()
    size = str(disk_mb * 1024 * 1024)
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID), "--cap-drop", "ALL",
            "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/lib", "/lib", "--ro-bind-try", "/lib64", "/lib64",
            "--ro-bind-try", "/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
            "--size", size, "--tmpfs", WORKDIR, "--dir", f"{WORKDIR}/tmp", "--chdir", WORKDIR,
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", WORKDIR,
            "--setenv", "TMPDIR", f"{WORKDIR}/tmp", "--setenv", "PYTHONHASHSEED", "0"]  # fmt: skip
    if not prefix.startswith("/usr/"):  # (at its own path: the interpreter's library path names it)
        args += ["--ro-bind", prefix, prefix]
    # bwrap's root and /dev are tmpfs mounts without a size: read-only once set up, nothing lands there
    return [*args, *mounts, "--remount-ro", "/dev", "--remount-ro", "/"]


class _Cgroups:
    """A pids (and memory) cgroup of its own for one sandbox, where the host lets us make one
    (cgroup v1 hierarchies writable by this process). Entered by the child before it execs."""

    def __init__(self, max_procs: int, memory_mb: int) -> None:
        self.dirs: list[Path] = []
        name = f"rollscope-sandbox-{uuid.uuid4().hex[:12]}"
        for controller, limits in (("pids", {"pids.max": str(max_procs)}),
                                   ("memory", {"memory.limit_in_bytes": str(memory_mb * 1024 * 1024)})):  # fmt: skip
            root = CGROUP_V1 / controller
            if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
                continue
            path = root / name
            try:
                path.mkdir()
                for key, value in limits.items():
                    (path / key).write_text(value)
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            self.dirs.append(path)

    @property
    def bounds_processes(self) -> bool:
        return any(d.parent.name == "pids" for d in self.dirs)

    def enter(self) -> None:  # in the child, between fork and exec
        pid = str(os.getpid())
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(pid)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        return sorted(found)

    def close(self, deadline_s: float = 10.0) -> None:
        """Kill whatever is left in the cgroups, wait for it to go, remove them."""
        end = time.monotonic() + deadline_s
        while self.pids() and time.monotonic() < end:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


def _rlimits(cpu_s: int, memory_mb: int, max_procs: int, cgroups: _Cgroups | None, own_session: bool) -> Any:
    def apply() -> None:  # in the child, between fork and exec
        if own_session:
            os.setsid()
        if cgroups is not None:
            cgroups.enter()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

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
        result = await run_sandboxed(code, self.wall_s, self.cpu_seconds, self.memory_mb, self.max_processes,
                                     disk_mb=self.disk_mb, max_output_chars=self.max_output,
                                     unsandboxed=self.unsandboxed)  # fmt: skip
        text = result["output"]
        if result["status"] != "ok":
            text = f"{text}\n[{result['status']}]".strip()
        return ToolResponse(text=text or "(no output)"), 0.0, {"status": result["status"], "exit": result["exit"]}


async def run_sandboxed(code: str, wall_s: float, cpu_s: int = 5, memory_mb: int = 512, max_procs: int = 16, *,
                        disk_mb: int = 64, max_output_chars: int = 4000,
                        unsandboxed: bool = False) -> dict[str, Any]:  # fmt: skip
    """Run ``code``; returns {"status": ok|error|timeout|killed|output_limit, "exit": code, "output": text}.

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
            cgroups = None
            env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "PYTHONHASHSEED": "0"}
        else:
            code_fd = os.memfd_create("main.py")
            stack.callback(os.close, code_fd)
            os.write(code_fd, code.encode("utf-8", "surrogatepass"))
            os.lseek(code_fd, 0, os.SEEK_SET)
            info_r, info_w = os.pipe()  # bwrap says there which pid its namespace's init has
            os.set_blocking(info_r, False)
            stack.callback(os.close, info_r)
            stack.callback(_wait_gone, info_r)
            python, _ = _python()
            argv = [*_bwrap_args(shutil.which("bwrap"), disk_mb, "--ro-bind", RUNNER, "/sandbox/runner.py",
                                 "--file", str(code_fd), f"{WORKDIR}/main.py", "--info-fd", str(info_w)),
                    python, "-I", "-S", "/sandbox/runner.py", WORKDIR]  # fmt: skip
            cwd, fds, env = None, (code_fd, info_w), {}
            cgroups = _Cgroups(max_procs, memory_mb)
            stack.callback(cgroups.close)
        return await _run(argv, cwd, env, fds, wall_s, cpu_s, memory_mb, max_procs, cgroups, max_output_chars,
                          own_session=unsandboxed)  # fmt: skip


async def _run(argv: list[str], cwd: str | None, env: dict[str, str], fds: tuple[int, ...], wall_s: float,
               cpu_s: int, memory_mb: int, max_procs: int, cgroups: _Cgroups | None, max_output_chars: int,
               own_session: bool) -> dict[str, Any]:  # fmt: skip
    # (bwrap makes the sandbox's session itself; the unsandboxed child gets one here, so that its
    # whole process group can be killed)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, pass_fds=fds, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, preexec_fn=_rlimits(cpu_s, memory_mb, max_procs, cgroups, own_session),
        )  # fmt: skip
    finally:
        for fd in fds[1:]:  # the write end of bwrap's info pipe is bwrap's alone now
            os.close(fd)
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
