"""The sidecar process and the two pipes to it: started, greeted (CONFIG, then READY with its pid and
each backend's resume options, or FAILED with the error its backends raised), written to and read
from, and ended. Nothing here knows what the frames mean beyond the greeting (``protocol``).

The process started here forks the sidecar and exits at once (``child.detach``): the sidecar is
not this process's child, so it is waited for through a pidfd (its pid's), not ``wait``.

``prestart`` starts one ahead of its configuration, a spare: its interpreter, imports and secret
rules (about a second of CPU) load on another core while the traced process does its own start-up
(``rollscope run`` importing verl), and the next ``SidecarProcess`` greets it instead of starting
one. Nothing is stored before the greeting, and a spare never greeted exits with the process that
started it (its stdin closes)."""

from __future__ import annotations

import logging
import os
import pickle
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from rollscope.tracing import _wire as wire
from rollscope.tracing._redaction import secret_env_values
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
_CHILD = "from rollscope.tracing._sidecar.child import main; main(warm={})"


class SidecarError(RuntimeError):
    """The sidecar could not be started (its backends then run in the traced process)."""


def greet(
    out_fd: int, in_fd: int, config: dict[str, Any], timeout: float = START_TIMEOUT_S
) -> tuple[int, dict[str, Any]]:
    """Send ``config`` and wait for the child's answer: its pid and each backend's options for
    continuing it in this process (``TraceBackend.resume_options``). The backends' own errors (a
    trace directory that cannot be created) are raised as they are; no answer or a garbled one is
    a SidecarError."""
    try:
        write_frame(out_fd, CONFIG, pickle.dumps(config))
    except OSError as exc:  # (a child that died before reading it)
        raise SidecarError(f"its pipe closed: {exc}") from exc
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
    """The child, started and greeted: ``pid`` is the sidecar's, ``resume`` what ``greet`` returned,
    ``secrets`` the secret values its environment started with (``sender`` tells it of newer ones)."""

    def __init__(self, config: dict[str, Any]) -> None:
        spare = _take_spare()
        if spare is not None:
            try:
                self._greet(spare, config)
                return
            except SidecarError as exc:
                log.info("%s; starting another", exc)
        self._greet(_Launch(warm=False), config)

    def _greet(self, launch: _Launch, config: dict[str, Any]) -> None:
        launcher = launch.launcher
        self.pid, self._pidfd, self.secrets = launcher.pid, None, launch.secrets
        self._pipes = (launcher.stdin, launcher.stdout)
        self.out_fd, self.in_fd = launcher.stdin.fileno(), launcher.stdout.fileno()
        try:
            self.pid, self.resume = greet(self.out_fd, self.in_fd, config)
            self._pidfd = _pidfd(self.pid)
        except SidecarError as exc:
            launcher.kill()
            self._close_pipes()  # a sidecar still starting reads the end of its stdin and exits
            raise SidecarError(f"the trace sidecar (pid {self.pid}) did not start: {exc}") from exc
        except Exception:
            self._close_pipes()
            raise
        finally:
            launcher.wait()  # it exits as soon as it has forked the sidecar

    def send(self, kind: int, body: bytes = b"") -> None:
        """Raises OSError when the child is gone (its pipe closed)."""
        write_frame(self.out_fd, kind, body)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """What the child sends, until its end of the pipe closes (or the caller stops reading):
        the reading end is closed here, by its one reader, once done with."""
        try:
            while (frame := read_frame(self.in_fd)) is not None:
                yield frame
        finally:
            self._pipes[1].close()

    def wait(self, timeout: float | None) -> bool:
        """Whether the sidecar exited within ``timeout`` seconds."""
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], timeout)[0])
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:  # no pidfd (not Linux): its pid
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.05)
        return False

    def leave(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the child to exit, then close the pipe to it. A child still
        at work is left to finish on its own (``child.ORPHAN_S``): it holds what was sent to it."""
        exited = self.wait(timeout)
        if not exited:
            log.warning(
                "trace sidecar (pid %d) is still storing what it was sent; it goes on after this "
                "process stops waiting for it",
                self.pid,
            )
        self._close_pipes(reading=False)
        return exited

    def _close_pipes(self, reading: bool = True) -> None:
        for f in self._pipes if reading else self._pipes[:1]:
            f.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def abandon(self) -> None:
        """In a forked child: the pipes belong to the parent's tracer; let go without a word."""
        for fd in (self.out_fd, self.in_fd, self._pidfd):
            try:
                if fd is not None:
                    os.close(fd)
            except OSError:
                pass


class _Launch:
    """A started launcher (which forks the sidecar and exits) and what its environment held."""

    def __init__(self, warm: bool) -> None:
        """``warm``: the child loads its secret rules and imports before its configuration comes."""
        self.started_in = os.getpid()
        self.settings = _settings()
        self.secrets = secret_env_values()
        try:
            self.launcher = subprocess.Popen(
                [sys.executable, "-c", _CHILD.format(warm)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                close_fds=True,
            )
        except OSError as exc:
            raise SidecarError(f"cannot start the trace sidecar: {exc}") from exc

    def discard(self) -> None:
        """Let the child go unconfigured: it reads the end of its stdin and exits."""
        for pipe in (self.launcher.stdin, self.launcher.stdout):
            pipe.close()
        self.launcher.wait()


_spare: _Launch | None = None


def prestart() -> None:
    """Start a sidecar now for the next ``SidecarProcess`` to configure (none if one waits already;
    where none can start, the next one tries again and says why)."""
    global _spare
    if _spare is None or _spare.started_in != os.getpid():
        try:
            _spare = _Launch(warm=True)
        except SidecarError:
            _spare = None


def discard_spare() -> None:
    """End a spare no tracer took (every backend ran in the traced process)."""
    spare = _take_spare()
    if spare is not None:
        spare.discard()


def _take_spare() -> _Launch | None:
    """The spare, if this process started it and its ``ROLLSCOPE_`` settings still hold (a child
    reads them as it starts); one that no longer fits is discarded."""
    global _spare
    spare, _spare = _spare, None
    if spare is None or spare.started_in != os.getpid():
        return None  # (a forked child's copy: the pipes are its parent's)
    if spare.settings != _settings():
        spare.discard()
        return None
    return spare


def _settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("ROLLSCOPE_")}


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``, readable once it has exited (Linux 5.3 on; None elsewhere)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
