"""The sidecar process and the two pipes to it: started, greeted (CONFIG, then READY with each
backend's resume options, or FAILED with the error its backends raised), written to and read from,
and ended. Nothing here knows what the frames mean beyond the greeting (``protocol``)."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._sidecar.protocol import (
    CONFIG,
    FAILED,
    LOG,
    READY,
    read_frame,
    read_frame_timeout,
    write_frame,
)

log = logging.getLogger("rollscope.tracing")

START_TIMEOUT_S = 60.0


class SidecarError(RuntimeError):
    """The sidecar could not be started (its backends then run in the traced process)."""


def greet(out_fd: int, in_fd: int, config: dict[str, Any], timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Send ``config`` and wait for the child's answer: each backend's options for continuing it in
    this process (``TraceBackend.resume_options``). The backends' own errors (a trace directory
    that cannot be created) are raised as they are; no answer or a garbled one is a SidecarError."""
    write_frame(out_fd, CONFIG, pickle.dumps(config))
    deadline = time.monotonic() + timeout
    reply = read_frame_timeout(in_fd, timeout)
    while reply is not None and reply[0] == LOG:  # what the child warned of while it started (an adopted spool)
        level, message = wire.decode(reply[1])
        log.log(level, "trace sidecar: %s", message)
        reply = read_frame_timeout(in_fd, max(0.0, deadline - time.monotonic()))
    if reply is None or reply[0] not in (READY, FAILED):
        raise SidecarError("no greeting" if reply is None else f"an unexpected first frame (kind {reply[0]})")
    if reply[0] == FAILED:
        error_type, message = wire.decode(reply[1])
        raise (OSError if error_type == "OSError" else ValueError)(message)
    return wire.decode(reply[1])


class SidecarProcess:
    """The child, started and greeted: ``resume`` holds what ``greet`` returned."""

    def __init__(self, config: dict[str, Any]) -> None:
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from rollscope.tracing._sidecar.child import main; main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            raise SidecarError(f"cannot start the trace sidecar: {exc}") from exc
        self.pid = self.proc.pid
        self.out_fd, self.in_fd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        try:
            self.resume = greet(self.out_fd, self.in_fd, config)
        except SidecarError as exc:
            self.proc.kill()
            raise SidecarError(f"the trace sidecar (pid {self.pid}) did not start: {exc}") from exc
        except Exception:
            self.proc.wait(5)
            raise

    def send(self, kind: int, body: bytes = b"") -> None:
        """Raises OSError when the child is gone (its pipe closed)."""
        write_frame(self.out_fd, kind, body)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """What the child sends, until its end of the pipe closes."""
        while (frame := read_frame(self.in_fd)) is not None:
            yield frame

    def exit_code(self) -> int:
        return self.proc.wait()

    def finish(self, timeout: float) -> bool:
        """Wait for the child to exit (killed past ``timeout``: False), then close the pipes."""
        ok = True
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("trace sidecar (pid %d) did not finish in time; killed", self.pid)
            self.proc.kill()
            ok = False
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        return ok

    def abandon(self) -> None:
        """In a forked child: the pipes belong to the parent's tracer; let go without a word."""
        for fd in (self.out_fd, self.in_fd):
            try:
                os.close(fd)
            except OSError:
                pass
