"""Which trace sidecars are still at work after the processes they trace have ended.

A sidecar is nobody's child (``child.detach``): when its traced process ends without closing
tracing — a Ray worker ended with its children at the end of a run — it stores what it was sent,
then exits. A launcher that must not read the store before that (``rollscope.cpu.launch``)
names a file in ``ROLLSCOPE_SIDECAR_LOCK`` for the processes it starts; every sidecar started
under it holds a shared ``flock`` on that file from its start until it exits (the kernel lets go
of it however the sidecar ends), so an exclusive lock on it means all of them are done.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

ENV = "ROLLSCOPE_SIDECAR_LOCK"
POLL_S = 0.1

_held: list[int] = []  # the sidecar's lock, open for the rest of its life


def hold() -> None:
    """In a sidecar: take the shared lock on the file ``ROLLSCOPE_SIDECAR_LOCK`` names, if any."""
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:  # an unusable path costs the launcher its wait, never the traces
        return
    _held.append(fd)


def wait_released(path: str | os.PathLike, timeout: float) -> bool:
    """Whether every sidecar holding ``path`` exited within ``timeout`` seconds."""
    fd = os.open(Path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(POLL_S)
    finally:
        os.close(fd)
