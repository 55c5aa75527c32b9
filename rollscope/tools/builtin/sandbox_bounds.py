"""How the kernel bounds a sandbox's processes and memory on this host: cgroups where this process
may make them, otherwise rlimits arranged to hold the same totals. Never silently weaker: where
neither holds, the sandbox refuses to start with the bound that is missing.

- **cgroups**: a pids and a memory cgroup per sandbox, in cgroup v1 hierarchies writable here (root
  on a v1 or hybrid host), or in a cgroup v2 subtree delegated to this process: its own cgroup when
  it may enable ``pids`` and ``memory`` for children (the root of a cgroup namespace, a systemd unit
  with ``Delegate=yes``), or the directory named by ``ROLLSCOPE_SANDBOX_CGROUP``.
- **rlimits** (no cgroup of our own: a container on a cgroup v2 host without delegation, a non-root
  user). Processes: ``RLIMIT_NPROC``, which the kernel counts per user namespace, so inside the
  sandbox's own namespace it counts the sandbox's processes only; the runner sets it before the
  code runs (set before bubblewrap it would count every process of the caller's uid). uid 0 is
  exempt from it, so root starts bubblewrap as uid 65534 (unprivileged user namespaces; the
  interpreter must be readable by that uid, else Debian's ``/usr/bin/python3`` is used). Memory:
  ``RLIMIT_AS`` per process, and as many processes as the budget allows at that size, so that
  processes x address space <= ``memory_mb`` (bubblewrap's own processes counted); the work
  directory's tmpfs is capped apart (``disk_mb``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import stat
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SANDBOX_HOST_UID = 65534  # nobody: the host uid of a root caller's sandbox without a pids cgroup
MIN_PROCESS_MB = 64  # the smallest address space a sandbox process gets (Python starts in ~20 MB)
SYSTEM_PYTHON = "/usr/bin/python3"


class BoundsUnavailable(RuntimeError):
    """A bound cannot be enforced here; the message names it and how to get it."""


@dataclass(frozen=True)
class Cgroups:
    """Where this host lets us make a sandbox's cgroups (None: not possible)."""

    v1_pids: Path | None = None
    v1_memory: Path | None = None
    v2_parent: Path | None = None

    @property
    def pids(self) -> bool:
        return self.v1_pids is not None or self.v2_parent is not None

    @property
    def memory(self) -> bool:
        return self.v1_memory is not None or self.v2_parent is not None


@dataclass(frozen=True)
class Bounds:
    """One sandbox's bounds and the mechanism behind each."""

    processes: int  # every process of the sandbox, bubblewrap's included
    process_memory_mb: int  # RLIMIT_AS of each
    memory_mb: int
    cgroups: Cgroups
    nproc: int | None  # RLIMIT_NPROC the runner sets inside (None: the pids cgroup bounds processes)
    host_uid: int | None  # the uid bubblewrap starts as (None: the caller's)
    python: str  # the interpreter the sandbox runs (the real file behind a venv's link)
    prefix: str  # the installation it needs

    def describe(self) -> str:
        c = self.cgroups
        procs = (
            f"a pids cgroup ({'v1' if c.v1_pids else 'v2'})"
            if c.pids
            else "RLIMIT_NPROC in the sandbox's user namespace"
        )
        memory = (
            f"a memory cgroup ({'v1' if c.v1_memory else 'v2'})"
            if c.memory
            else f"RLIMIT_AS {self.process_memory_mb} MB per process x {self.processes} processes"
        )
        uid = f"; as host uid {self.host_uid}" if self.host_uid is not None else ""
        return f"{self.processes} processes by {procs}; {self.memory_mb} MB by {memory}{uid}"


def plan(max_procs: int, memory_mb: int, cgroups: Cgroups | None = None) -> Bounds:
    """The bounds for one sandbox of ``max_procs`` processes and ``memory_mb`` of memory here."""
    cgroups = host_cgroups() if cgroups is None else cgroups
    if cgroups.memory:
        processes, per_process = max_procs, memory_mb
    else:  # processes x address space <= the budget
        processes = max(3, min(max_procs, memory_mb // MIN_PROCESS_MB))
        per_process = memory_mb // processes
    host_uid = SANDBOX_HOST_UID if os.geteuid() == 0 and not cgroups.pids else None
    # Inside its namespace: bubblewrap's init and the runner; the outer bubblewrap is not counted there.
    nproc = None if cgroups.pids else processes - 1
    return Bounds(processes, per_process, memory_mb, cgroups, nproc, host_uid, *interpreter_for(host_uid))


def interpreter_for(uid: int | None) -> tuple[str, str]:
    """The interpreter file to run in the sandbox and its prefix: this one, unless ``uid`` cannot
    read it."""
    own, prefix = os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)
    system = os.path.realpath(SYSTEM_PYTHON)
    for binary, where in ((own, prefix), (system, "/usr")):
        if _world_readable(binary, where) if uid is not None else _readable(binary, where):
            return binary, where
    who = f"uid {uid} (as root without a pids cgroup, the sandbox runs as that uid)" if uid else "this user"
    raise BoundsUnavailable(
        f"{who} cannot read this interpreter ({own}) nor {SYSTEM_PYTHON}: install "
        "Debian's python3, or run where a pids cgroup can be made (cgroup v1 as root, "
        "or a delegated cgroup v2 subtree)"
    )


def _readable(binary: str, prefix: str) -> bool:
    """Whether this process may run ``binary`` and read its installation."""
    return os.access(binary, os.X_OK) and os.access(prefix, os.R_OK | os.X_OK)


def _world_readable(binary: str, prefix: str) -> bool:
    """Whether any uid may run ``binary`` and read below ``prefix`` (every directory up to it searchable)."""
    paths = [Path(binary), *Path(binary).parents, Path(prefix), *Path(prefix).parents]
    try:
        modes = {p: os.stat(p).st_mode for p in paths}
    except OSError:
        return False
    return all(m & stat.S_IXOTH for m in modes.values()) and bool(modes[Path(binary)] & stat.S_IROTH)


@functools.lru_cache(maxsize=1)
def host_cgroups() -> Cgroups:
    """What this process may make, probed once: a child cgroup made and removed in each place."""
    return Cgroups(_v1("pids"), _v1("memory"), _v2_parent())


def _v1(controller: str) -> Path | None:
    root = CGROUP_ROOT / controller
    if not (root / "cgroup.procs").exists() or _type_of(root) != "cgroup":
        return None
    return root if _probe(root) else None


def _v2_parent() -> Path | None:
    mount = next((m for m, fstype in _mounts() if fstype == "cgroup2"), None)
    configured = os.environ.get("ROLLSCOPE_SANDBOX_CGROUP")
    if configured:
        candidate = Path(configured)
    elif mount is None:
        return None
    else:
        own = next((line[3:] for line in _read("/proc/self/cgroup").splitlines() if line.startswith("0::")), None)
        if own is None:
            return None
        candidate = mount / own.strip().lstrip("/")
    wanted = {"pids", "memory"}
    if not wanted <= set(_read(candidate / "cgroup.controllers").split()):
        return None
    enabled = set(_read(candidate / "cgroup.subtree_control").split())
    if not wanted <= enabled:
        try:  # refused (EBUSY) where the cgroup holds processes itself: not delegated to us
            (candidate / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted - enabled))
        except OSError:
            return None
    return candidate if _probe(candidate) else None


def _probe(parent: Path) -> bool:
    path = parent / f"rollscope-probe-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        path.rmdir()
        return True
    except OSError:
        return False


def _mounts() -> list[tuple[Path, str]]:
    out = []
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) > 4 and tail:
            out.append((Path(fields[4].replace("\\040", " ")), tail[0]))
    return out


def _type_of(path: Path) -> str | None:
    return next((fstype for mount, fstype in reversed(_mounts()) if mount == path), None)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


class SandboxCgroups:
    """One sandbox's cgroups (per ``Bounds``): made with their limits, entered by the child between
    fork and exec, and emptied (every process killed) and removed at the end."""

    def __init__(self, bounds: Bounds) -> None:
        self.dirs: list[Path] = []
        c = bounds.cgroups
        name = f"rollscope-sandbox-{uuid.uuid4().hex[:12]}"
        memory = str(bounds.memory_mb * 1024 * 1024)
        if c.v2_parent is not None:
            self._make(
                c.v2_parent / name, {"pids.max": str(bounds.processes), "memory.max": memory, "memory.swap.max": "0"}
            )
        if c.v1_pids is not None:
            self._make(c.v1_pids / name, {"pids.max": str(bounds.processes)})
        if c.v1_memory is not None:
            self._make(c.v1_memory / name, {"memory.limit_in_bytes": memory})

    def _make(self, path: Path, limits: dict[str, str]) -> None:
        try:
            path.mkdir()
            for key, value in limits.items():
                if key == "memory.swap.max" and not (path / key).exists():
                    continue  # no swap accounting: no swap to bound
                (path / key).write_text(value)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            self.close()
            raise BoundsUnavailable(f"cannot make the sandbox's cgroup {path}: {exc}") from exc
        self.dirs.append(path)

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
